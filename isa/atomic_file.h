// Results are never half-written: every output file (program binaries, stats
// reports, checkpoints, bundles, images) is written under a temporary name in the
// same directory and renamed over the target only once it is complete, so a
// reader sees the old file or the new one, never a prefix.
//
// Contract:
//  - AtomicFile(path) picks the temporary name PATH.tmp.PID (same directory, so
//    the rename cannot cross file systems); the writer writes temp() with any API.
//  - commit() renames temp() to path; gpnpu::Error ("cannot write PATH: reason")
//    if that fails.
//  - The destructor removes temp() unless commit() succeeded: a write that throws
//    part-way leaves neither a partial PATH nor a stray temporary behind, and an
//    existing PATH is untouched.
//  - write_file_atomic(path, bytes) does all of it for bytes in memory, and names
//    the reason (errno) when the directory is missing or the disk is full.
//  - A target that is not a regular file is written in place (direct(): temp() is
//    path, commit() renames nothing): a device (/dev/null, /dev/full), a FIFO, a
//    directory (the open fails: "Is a directory"), or any path under /dev/ or /proc/
//    (/dev/stdout). Renaming over such a path would replace the device node or the
//    link (as root) or fail creating the temporary in /dev.
//  - A symbolic link to a regular file keeps its link: the temporary goes beside
//    the file it points to, which the rename replaces.
//  - The temporary is registered with isa/io_rules.h, so SIGINT/SIGTERM remove it;
//    temporaries of the same target left by a process that died (a kill -9, a
//    crash) are removed when the next AtomicFile for that target is made.
// Header-only and free of SystemC, so the model library uses it too.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "isa/error.h"
#include "isa/io_rules.h"

namespace gpnpu {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), target_(path_) {
    struct stat st, lst;
    bool exists = ::stat(path_.c_str(), &st) == 0;
    if ((exists && !S_ISREG(st.st_mode)) || path_.starts_with("/dev/") || path_.starts_with("/proc/")) {
      direct_ = true;
      temp_ = path_;
      return;
    }
    if (exists && ::lstat(path_.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      std::error_code ec;
      std::filesystem::path real = std::filesystem::canonical(path_, ec);
      if (!ec) target_ = real.string();
    }
    temp_ = target_ + ".tmp." + std::to_string(::getpid());
    const std::filesystem::path t(target_);
    io::sweep_stale_temps(t.parent_path().string(), t.filename().string() + ".tmp.");
    temp_id_ = io::register_temp(temp_);
  }
  ~AtomicFile() {
    io::unregister_temp(temp_id_);
    if (!committed_ && !direct_) std::remove(temp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& temp() const { return temp_; }
  // The target is written in place (not a regular file): no temporary, no rename.
  bool direct() const { return direct_; }

  void commit() {
    if (!direct_ && std::rename(temp_.c_str(), target_.c_str()) != 0)
      fail("cannot write '{}': {}", path_, std::strerror(errno));
    committed_ = true;
    io::unregister_temp(temp_id_);
    temp_id_ = -1;
  }

 private:
  std::string path_, target_, temp_;  // target_: path_ with a symbolic link resolved
  bool committed_ = false, direct_ = false;
  int temp_id_ = -1;
};

// The same for bytes made piece by piece: produce(put) calls put(piece) in order.
inline void write_file_atomic(const std::string& path,
                              const std::function<void(const std::function<void(std::string_view)>&)>& produce) {
  AtomicFile out(path);
  std::FILE* f = std::fopen(out.temp().c_str(), "wb");
  if (!f) fail("cannot write '{}': {} (check that the directory exists and is writable)", path, std::strerror(errno));
  bool ok = true;
  produce([&](std::string_view piece) { ok = ok && std::fwrite(piece.data(), 1, piece.size(), f) == piece.size(); });
  ok = ok && std::fflush(f) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) fail("cannot write '{}': {} (disk full or file too large?)", path, std::strerror(err));
  out.commit();
}

inline void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [bytes](const std::function<void(std::string_view)>& put) { put(bytes); });
}

}  // namespace gpnpu
