// The rules every command applies to the paths, text and numbers a user gives it,
// each in one place (docs/errors.md, "Paths, text and numbers"). Commands call
// them at the top of their work; nothing here knows a command.
//
// Contract:
//  - Inputs: check_input() requires an existing regular file no larger than
//    `max_bytes` (a directory, device, FIFO or socket is one clear error, before
//    anything is read: /dev/zero would otherwise be read forever); read_input()
//    also reads it. check_input_dir() requires an existing directory.
//  - Outputs: an Outputs set names one command's inputs and outputs; check()
//    fails, before any work, when an output is a directory (or, for an output
//    directory, a file), is a FIFO outside /dev and /proc, cannot be created, or
//    has the same canonical path as an input or another output. Devices (/dev/null,
//    /dev/stdout) stay valid sinks and never collide.
//  - Temporaries: every temporary file or directory is registered (AtomicFile does
//    it for its PATH.tmp.PID); install_cleanup_handlers() makes SIGINT, SIGTERM and
//    SIGHUP remove the registered ones (a signal-safe handler: unlink, rmdir and
//    getdents only) and then die of the signal as before. sweep_stale_temps()
//    removes NAME.tmp.PID[...] entries whose process is gone.
//  - Locks: FileLock holds an flock on PATH.lock for files that concurrent
//    commands may share (a sweep's results, a cache entry); try mode fails naming
//    the holder's pid, wait mode blocks until it is free.
//  - Text: check_text() names the first BOM, NUL, control or (where ASCII is
//    required) non-ASCII character by line, column and code point.
//  - Numbers: parse_integer() takes a whole decimal integer in [lo, hi] or fails
//    naming the option, the text and the range (CLI options: isa/cli_rules.h).
// Free of SystemC and CLI11, so every library and the fuzz targets link it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpnpu::io {

constexpr uint64_t kMiB = uint64_t(1) << 20;

// ---- inputs ------------------------------------------------------------------------
void check_input(const std::string& path, const std::string& what, uint64_t max_bytes);
std::string read_input(const std::string& path, const std::string& what, uint64_t max_bytes);
void check_input_dir(const std::string& path, const std::string& what);
// What a path is, for messages: "a directory", "a character device", "a FIFO", ...
std::string file_kind(const std::string& path);

// ---- outputs -----------------------------------------------------------------------
class Outputs {
 public:
  Outputs& input(const std::string& what, const std::string& path);
  Outputs& output(const std::string& what, const std::string& path);      // a file
  Outputs& output_dir(const std::string& what, const std::string& path);  // a directory (created if missing)
  void check() const;

 private:
  struct Entry {
    std::string what, path;
    bool dir;
  };
  std::vector<Entry> inputs_, outputs_;
};

// ---- temporaries -------------------------------------------------------------------
void install_cleanup_handlers();
// Returns a slot id for unregister_temp (or -1 when the registry is full: the
// temporary is then only removed by its owner or a later stale sweep).
int register_temp(const std::string& path, bool directory = false);
void unregister_temp(int id);
// Removes entries of `dir` named PREFIX*.tmp.PID or PREFIX*.tmp.PID.* whose PID is
// not a live process ("" matches every name).
void sweep_stale_temps(const std::string& dir, const std::string& prefix = "");

// A registered temporary: removed (recursively for a directory) by the destructor
// unless keep() was called.
class ScopedTemp {
 public:
  ScopedTemp(std::string path, bool directory);
  ~ScopedTemp();
  ScopedTemp(const ScopedTemp&) = delete;
  ScopedTemp& operator=(const ScopedTemp&) = delete;
  const std::string& path() const { return path_; }
  void keep();

 private:
  std::string path_;
  bool dir_;
  int id_;
};

// ---- locks -------------------------------------------------------------------------
class FileLock {
 public:
  enum Mode { try_lock, wait };
  // Locks PATH.lock; `what` names the shared file in messages.
  FileLock(const std::string& path, const std::string& what, Mode mode);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
  int temp_id_ = -1;
};

// ---- text --------------------------------------------------------------------------
// Fails "FILE:LINE:COL: MESSAGE" at the first character that is a BOM, NUL, a
// control other than tab/CR/LF, an invisible format character (U+200B..U+200F,
// U+2060, U+FEFF, ...), invalid UTF-8, or (ascii_only) any non-ASCII character.
// The assembler calls find_text_problem() per line instead, to allow non-ASCII
// text in comments and mark names.
struct TextRules {
  bool ascii_only = true;
  std::string ascii_why;  // appended to the non-ASCII message, e.g. "mnemonics and labels are ASCII"
};
void check_text(std::string_view text, const std::string& file, const TextRules& rules);
// The first problem character in `line` (1-based byte column, message) or col 0.
struct TextProblem {
  int col = 0;
  std::string message;
};
TextProblem find_text_problem(std::string_view line, bool ascii_only);

// ---- numbers -----------------------------------------------------------------------
int64_t parse_integer(std::string_view text, const std::string& what, int64_t lo, int64_t hi);
// "WxH" (or "HxW"; `form` names it in messages) with each side in [lo, hi].
std::pair<int64_t, int64_t> parse_pair(std::string_view text, const std::string& what, const char* form, int64_t lo,
                                       int64_t hi);

}  // namespace gpnpu::io
