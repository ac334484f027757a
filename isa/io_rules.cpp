// The path, temporary-file, lock, text and number rules (contract in isa/io_rules.h).
#include "isa/io_rules.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "isa/error.h"

namespace gpnpu::io {

namespace fs = std::filesystem;

namespace {

std::string kind_of(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISREG(st.st_mode)) return "a regular file";
  return "not a regular file";
}

// Devices and /proc entries are written in place (isa/atomic_file.h), never renamed over.
bool is_system_path(const std::string& p) { return p.starts_with("/dev/") || p.starts_with("/proc/"); }

}  // namespace

std::string file_kind(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return kind_of(st);
}

// ---- inputs ------------------------------------------------------------------------

void check_input(const std::string& path, const std::string& what, uint64_t max_bytes) {
  if (path.empty()) fail("{}: the path is empty; give a file", what);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail("cannot open {} '{}': {}", what, path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{} '{}' is a directory, not a file; give a file inside it", what, path);
  if (!S_ISREG(st.st_mode))
    fail("{} '{}' is {}, not a regular file (inputs are read whole: copy the data to a file first)", what, path,
         kind_of(st));
  if (uint64_t(st.st_size) > max_bytes)
    fail("{} '{}' is {} bytes, more than the {} MiB a {} can be; is it the right file?", what, path,
         uint64_t(st.st_size), max_bytes / kMiB, what);
}

std::string read_input(const std::string& path, const std::string& what, uint64_t max_bytes) {
  check_input(path, what, max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {} '{}': {}", what, path, std::strerror(errno));
  // In 1 MiB pieces, not through a character iterator (~25 ms on the 11 MB tokenizer file,
  // measured by the helper of the sixth stop), without relying on the size check_input saw.
  std::string data;
  std::vector<char> piece(1 << 20);
  while (in.read(piece.data(), std::streamsize(piece.size())) || in.gcount() > 0)
    data.append(piece.data(), size_t(in.gcount()));
  if (in.bad()) fail("cannot read {} '{}': read error", what, path);
  return data;
}

void check_input_dir(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail("cannot open {} '{}': {}", what, path, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail("{} '{}' is {}, not a directory", what, path, kind_of(st));
}

// ---- outputs -----------------------------------------------------------------------

Outputs& Outputs::input(const std::string& what, const std::string& path) {
  if (!path.empty()) inputs_.push_back({what, path, false});
  return *this;
}
Outputs& Outputs::output(const std::string& what, const std::string& path) {
  if (!path.empty()) outputs_.push_back({what, path, false});
  return *this;
}
Outputs& Outputs::output_dir(const std::string& what, const std::string& path) {
  if (!path.empty()) outputs_.push_back({what, path, true});
  return *this;
}

namespace {

// The canonical path of an existing or yet-to-be-created file, or "" for a device,
// FIFO or socket (written in place; never "the same file" as another output).
std::string identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return "";
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

// The nearest existing ancestor of `p` (itself included).
fs::path existing_ancestor(fs::path p) {
  std::error_code ec;
  p = fs::absolute(p, ec).lexically_normal();
  while (!p.empty() && !fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  return p;
}

void check_writable_output(const std::string& what, const std::string& path, bool dir) {
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (dir) {
    if (exists && !S_ISDIR(st.st_mode))
      fail("{} '{}' is {}, not a directory; give a directory (it is created if missing)", what, path, kind_of(st));
    fs::path anc = existing_ancestor(path);
    struct stat ast;
    if (::stat(anc.c_str(), &ast) != 0 || !S_ISDIR(ast.st_mode))
      fail("{} '{}': cannot create the directory: '{}' is {}, not a directory", what, path, anc.string(),
           ::stat(anc.c_str(), &ast) == 0 ? kind_of(ast) : "missing");
    if (::access(anc.c_str(), W_OK | X_OK) != 0)
      fail("cannot write {} '{}': {} ('{}'; check that the directory is writable)", what, path, std::strerror(errno),
           anc.string());
    return;
  }
  if (exists) {
    if (S_ISDIR(st.st_mode)) fail("{} '{}' is a directory; give a file name (for example {}/NAME)", what, path, path);
    if (!S_ISREG(st.st_mode)) {
      if (is_system_path(path) || !S_ISFIFO(st.st_mode)) return;  // a device: written in place
      fail("{} '{}' is {}: outputs are written whole under a temporary name and renamed; give a regular file", what,
           path, kind_of(st));
    }
  }
  if (is_system_path(path)) return;
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  struct stat pst;
  if (::stat(parent.c_str(), &pst) != 0)
    fail("cannot write '{}': {} (check that the directory exists and is writable)", path, std::strerror(errno));
  if (!S_ISDIR(pst.st_mode))
    fail("cannot write '{}': '{}' is {}, not a directory (check that the directory exists and is writable)", path,
         parent.string(), kind_of(pst));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    fail("cannot write '{}': {} (check that the directory exists and is writable)", path, std::strerror(errno));
}

}  // namespace

void Outputs::check() const {
  std::vector<std::string> out_ids, in_ids, dir_ids;
  for (const Entry& o : outputs_) out_ids.push_back(identity(o.path));
  for (const Entry& i : inputs_) in_ids.push_back(identity(i.path));
  for (size_t a = 0; a < outputs_.size(); ++a)
    if (outputs_[a].dir) dir_ids.push_back(out_ids[a]);
  for (const Entry& o : outputs_) {
    // A file inside an output directory of the same command: the directory's check covers it.
    const std::string parent = identity(fs::path(o.path).parent_path().empty() ? "." : fs::path(o.path).parent_path().string());
    if (o.dir || std::find(dir_ids.begin(), dir_ids.end(), parent) == dir_ids.end() || fs::is_directory(o.path))
      check_writable_output(o.what, o.path, o.dir);
  }
  for (size_t a = 0; a < outputs_.size(); ++a) {
    if (out_ids[a].empty()) continue;
    for (size_t b = 0; b < a; ++b)
      if (out_ids[b] == out_ids[a] && outputs_[a].dir == outputs_[b].dir)
        fail("{} and {} are the same {} '{}': one would overwrite the other; give different paths", outputs_[b].what,
             outputs_[a].what, outputs_[a].dir ? "directory" : "file", outputs_[a].path);
    if (outputs_[a].dir) continue;  // writing into an input directory is fine: its files are compared one by one
    for (size_t i = 0; i < inputs_.size(); ++i)
      if (in_ids[i] == out_ids[a])
        fail("{} '{}' is the input {} ('{}'): writing it would destroy the input; give another output path",
             outputs_[a].what, outputs_[a].path, inputs_[i].what, inputs_[i].path);
  }
}

// ---- temporaries -------------------------------------------------------------------

namespace {

constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;
struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 registered
  bool dir = false;
  char path[kPathMax];
};
Slot g_slots[kSlots];

struct Dirent64 {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// Signal-safe recursive removal: open, getdents64, unlinkat, rmdir only.
void remove_tree_signal_safe(const char* path, int depth) {
  int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ::unlink(path);
    return;
  }
  alignas(8) char buf[4096];
  for (int pass = 0; pass < 4; ++pass) {  // entries removed while listing may hide others: list again
    bool any = false;
    ::lseek(fd, 0, SEEK_SET);
    for (;;) {
      long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const Dirent64* d = reinterpret_cast<const Dirent64*>(buf + off);
        off += d->reclen;
        if (d->name[0] == '.' && (d->name[1] == 0 || (d->name[1] == '.' && d->name[2] == 0))) continue;
        any = true;
        if (::unlinkat(fd, d->name, 0) == 0) continue;
        if (depth >= 8) continue;
        char child[kPathMax];
        size_t a = std::strlen(path), b = std::strlen(d->name);
        if (a + b + 2 > sizeof child) continue;
        std::memcpy(child, path, a);
        child[a] = '/';
        std::memcpy(child + a + 1, d->name, b + 1);
        remove_tree_signal_safe(child, depth + 1);
      }
    }
    if (!any) break;
  }
  ::close(fd);
  ::rmdir(path);
}

extern "C" void cleanup_on_signal(int sig) {
  int saved = errno;
  for (Slot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) != 2) continue;
    if (s.dir) remove_tree_signal_safe(s.path, 0);
    else ::unlink(s.path);
  }
  errno = saved;
  // Die of the same signal, as without the handler (a parent sees "killed by SIGINT").
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool pid_alive(long pid) {
  if (pid <= 0) return false;
  if (pid == ::getpid()) return true;
  return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

// The PID of NAME.tmp.PID or NAME.tmp.PID.SUFFIX, or -1.
long temp_owner(const std::string& name) {
  size_t at = name.rfind(".tmp.");
  if (at == std::string::npos) return -1;
  size_t b = at + 5, e = b;
  while (e < name.size() && name[e] >= '0' && name[e] <= '9') ++e;
  if (e == b || e - b > 9 || (e < name.size() && name[e] != '.')) return -1;
  return std::stol(name.substr(b, e - b));
}

}  // namespace

void install_cleanup_handlers() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup: stay ignored
    struct sigaction sa {};
    sa.sa_handler = cleanup_on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

int register_temp(const std::string& path, bool directory) {
  if (path.size() + 1 > kPathMax) return -1;
  for (int k = 0; k < kSlots; ++k) {
    int expected = 0;
    if (!g_slots[k].state.compare_exchange_strong(expected, 1)) continue;
    g_slots[k].dir = directory;
    std::memcpy(g_slots[k].path, path.c_str(), path.size() + 1);
    g_slots[k].state.store(2, std::memory_order_release);
    return k;
  }
  return -1;
}

void unregister_temp(int id) {
  if (id >= 0 && id < kSlots) g_slots[id].state.store(0, std::memory_order_release);
}

void sweep_stale_temps(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    long pid = temp_owner(name);
    if (pid < 0 || pid_alive(pid)) continue;
    std::error_code rec;
    fs::remove_all(it->path(), rec);
  }
}

ScopedTemp::ScopedTemp(std::string path, bool directory)
    : path_(std::move(path)), dir_(directory), id_(register_temp(path_, directory)) {}

ScopedTemp::~ScopedTemp() {
  if (id_ == -2) return;
  unregister_temp(id_);
  std::error_code ec;
  if (dir_) fs::remove_all(path_, ec);
  else fs::remove(path_, ec);
}

void ScopedTemp::keep() {
  unregister_temp(id_);
  id_ = -2;
}

// ---- locks -------------------------------------------------------------------------

FileLock::FileLock(const std::string& path, const std::string& what, Mode mode) : lock_path_(path + ".lock") {
  bool told = false;
  for (;;) {
    fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot lock {} '{}': cannot create '{}': {}", what, path, lock_path_, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {};
      ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
      std::string holder = n > 0 ? std::string(pid, size_t(n)) : "?";
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
      if (mode == try_lock) {
        ::close(fd_);
        fd_ = -1;
        fail("{} '{}' is being written by another gpnpu (pid {}, lock '{}'); wait for it to finish or use another path",
             what, path, holder, lock_path_);
      }
      if (!told) std::fprintf(stderr, "waiting for another gpnpu (pid %s) that is writing %s ...\n", holder.c_str(), path.c_str());
      told = true;
      ::flock(fd_, LOCK_EX);
    }
    // The holder removes the lock file when done: a lock on a removed file locks nothing.
    struct stat a, b;
    if (::fstat(fd_, &a) == 0 && ::stat(lock_path_.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
      break;
    ::close(fd_);
  }
  std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
  }
  temp_id_ = register_temp(lock_path_);
}

FileLock::~FileLock() {
  unregister_temp(temp_id_);
  if (fd_ >= 0) {
    ::unlink(lock_path_.c_str());
    ::close(fd_);
  }
}

// ---- text --------------------------------------------------------------------------

namespace {

const char* invisible_name(uint32_t cp) {
  switch (cp) {
    case 0x00A0: return "NO-BREAK SPACE";
    case 0x00AD: return "SOFT HYPHEN";
    case 0x200B: return "ZERO WIDTH SPACE";
    case 0x200C: return "ZERO WIDTH NON-JOINER";
    case 0x200D: return "ZERO WIDTH JOINER";
    case 0x200E: return "LEFT-TO-RIGHT MARK";
    case 0x200F: return "RIGHT-TO-LEFT MARK";
    case 0x2028: return "LINE SEPARATOR";
    case 0x2029: return "PARAGRAPH SEPARATOR";
    case 0x202A: case 0x202B: case 0x202C: case 0x202D: case 0x202E: return "BIDIRECTIONAL FORMATTING";
    case 0x2060: return "WORD JOINER";
    case 0x2066: case 0x2067: case 0x2068: case 0x2069: return "BIDIRECTIONAL ISOLATE";
    case 0xFEFF: return "BYTE ORDER MARK";
    default: return nullptr;
  }
}

}  // namespace

TextProblem find_text_problem(std::string_view line, bool ascii_only) {
  for (size_t i = 0; i < line.size();) {
    const uint8_t b = uint8_t(line[i]);
    const int col = int(i) + 1;
    if (b == 0) return {col, "NUL byte (U+0000): this is not a text file (a binary?)"};
    if ((b < 0x20 && b != '\t' && b != '\r') || b == 0x7f)
      return {col, fmt::format("control character U+{:04X}: remove it", b)};
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len = b >= 0xF0 && b < 0xF5 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
    if (b >= 0xF5) len = 0;
    uint32_t cp = len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
    bool ok = len > 0 && i + size_t(len) <= line.size();
    for (int k = 1; ok && k < len; ++k) {
      uint8_t c = uint8_t(line[i + size_t(k)]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))))
      ok = false;
    if (!ok) return {col, fmt::format("byte 0x{:02X} is not valid UTF-8: save the file as UTF-8 (or ASCII)", b)};
    if (const char* name = invisible_name(cp))
      return {col, fmt::format("invisible character U+{:04X} ({}): delete it{}", cp, name,
                               cp == 0xFEFF ? " (save the file without a byte-order mark)" : "")};
    if (ascii_only)
      return {col, fmt::format("non-ASCII character U+{:04X} '{}'", cp, std::string(line.substr(i, size_t(len))))};
    i += size_t(len);
  }
  return {};
}

void check_text(std::string_view text, const std::string& file, const TextRules& rules) {
  int line_no = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    ++line_no;
    TextProblem p = find_text_problem(text.substr(pos, nl - pos), rules.ascii_only);
    if (p.col)
      fail("{}:{}:{}: {}{}", file, line_no, p.col, p.message,
           p.message.starts_with("non-ASCII") && !rules.ascii_why.empty() ? "; " + rules.ascii_why : "");
    pos = nl + 1;
  }
}

// ---- numbers -----------------------------------------------------------------------

int64_t parse_integer(std::string_view text, const std::string& what, int64_t lo, int64_t hi) {
  const std::string prefix = what.empty() ? "" : what + ": ";
  std::string_view t = text;
  if (t.starts_with('+')) t.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  const bool digits = !t.empty() && p == t.data() + t.size();
  if (ec == std::errc::result_out_of_range || (digits && ec == std::errc() && (v < lo || v > hi)))
    fail("{}'{}' is out of range: expected an integer from {} to {}", prefix, text, lo, hi);
  if (ec != std::errc() || !digits) fail("{}'{}' is not an integer (expected {} to {})", prefix, text, lo, hi);
  return v;
}

std::pair<int64_t, int64_t> parse_pair(std::string_view text, const std::string& what, const char* form, int64_t lo,
                                       int64_t hi) {
  size_t x = text.find_first_of("xX");
  if (x == std::string_view::npos)
    fail("{} '{}' is not {} (two integers from {} to {}, e.g. 256x256)", what, text, form, lo, hi);
  const std::string w = fmt::format("{} '{}' ({})", what, text, form);
  return {parse_integer(text.substr(0, x), w, lo, hi), parse_integer(text.substr(x + 1), w, lo, hi)};
}

}  // namespace gpnpu::io
