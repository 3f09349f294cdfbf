#include "kvtool/atomic_file.h"
#include "kvtool/output_path.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

#include "kvtool/error.h"

namespace kvtool {

namespace {
constexpr int kSlots = 64;
constexpr size_t kNameMax = 512;
// Per slot the directory descriptor and temporary name: unlinkat() is async-signal-safe and never
// resolves the directory path again.
char g_names[kSlots][kNameMax];
int g_dirs[kSlots];
std::atomic<bool> g_live[kSlots];
std::mutex g_mu;

extern "C" void cleanup_on_signal(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_live[i].load()) unlinkat(g_dirs[i], g_names[i], 0);
  signal(sig, SIG_DFL);
  raise(sig);
}

int register_temp(int dir_fd, const std::string& name) {
  if (name.size() >= kNameMax) return -1;
  std::lock_guard<std::mutex> lk(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    if (!g_live[i].load()) {
      std::memcpy(g_names[i], name.c_str(), name.size() + 1);
      g_dirs[i] = dir_fd;
      g_live[i].store(true);
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot >= 0) g_live[slot].store(false);
}

std::string dir_of(const std::string& p) {
  auto pos = p.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return p.substr(0, pos);
}
std::string base_of(const std::string& p) {
  auto pos = p.find_last_of('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

// The pid recorded in a temporary's suffix `<pid>.<random>`, or -1 (older names have no pid).
long pid_of_suffix(const std::string& suffix) {
  size_t dot = suffix.find('.');
  if (dot == 0 || dot == std::string::npos || dot > 10) return -1;
  long pid = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (suffix[i] < '0' || suffix[i] > '9') return -1;
    pid = pid * 10 + (suffix[i] - '0');
  }
  return pid;
}

bool writer_is_gone(long pid) { return pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// Removes temporaries of `name` left by killed writers (see atomic_file.h for the rule).
void remove_stale_temps(int dir_fd, const std::string& name) {
  const std::string prefix = "." + name + ".tmp.";
  int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  rewinddir(d);
  const time_t now = time(nullptr);
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    struct stat st {};
    if (fstatat(dir_fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
      continue;
    if (writer_is_gone(pid_of_suffix(n.substr(prefix.size()))) || now - st.st_mtime >= kStaleTempSeconds)
      stale.push_back(n);
  }
  closedir(d);
  for (const auto& n : stale) unlinkat(dir_fd, n.c_str(), 0);
}

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  uint64_t x = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^ reinterpret_cast<uintptr_t>(&counter);
  static const char* digits = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (int i = 0; i < 8; ++i, x /= 36) s.push_back(digits[x % 36]);
  return s;
}
}  // namespace

bool is_temp_name(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

void install_cleanup_handlers() {
  struct sigaction sa {};
  sa.sa_handler = cleanup_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal (SIGHUP) cleans up too, unless the hangup is ignored (nohup): then it stays so.
  struct sigaction old {};
  if (sigaction(SIGHUP, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, nullptr);
}

void refuse_existing_output(const std::string& path) {
  struct stat st {};
  // A symlink, even a dangling one, is an existing output.
  KVT_CHECK(lstat(path.c_str(), &st) != 0, OUTPUT_EXISTS, "'" << path << "' already exists; refusing to overwrite it");
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

AtomicOutput::AtomicOutput(std::string final_path, bool overwrite) : final_(std::move(final_path)) {
  KVT_CHECK(!final_.empty(), USAGE, "empty output path");
  struct stat st {};
  if (lstat(final_.c_str(), &st) == 0) {
    if (!overwrite) refuse_existing_output(final_);
    struct stat target {};
    KVT_CHECK(stat(final_.c_str(), &target) != 0 || !S_ISDIR(target.st_mode), IO_ERROR,
              "'" << final_ << "' is a directory");
  }
  const std::string dir = dir_of(final_);
  name_ = base_of(final_);
  dir_fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  KVT_CHECK(dir_fd_ >= 0, IO_ERROR, "cannot create a temporary file in '" << dir << "': " << std::strerror(errno));
  open_temp(dir);
}

AtomicOutput::AtomicOutput(int dir_fd, const std::string& name, bool overwrite, int mode) : name_(name), mode_(mode) {
  KVT_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", USAGE,
            "'" << name << "' is not a file name");
  final_ = name;
  dir_fd_ = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  KVT_CHECK(dir_fd_ >= 0, IO_ERROR, "cannot use the directory of '" << name << "': " << std::strerror(errno));
  struct stat st {};
  if (fstatat(dir_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!overwrite) close(dir_fd_);
    KVT_CHECK(overwrite, OUTPUT_EXISTS, "'" << name << "' already exists; refusing to overwrite it");
  }
  open_temp(".");
}

void AtomicOutput::open_temp(const std::string& dir_display) {
  remove_stale_temps(dir_fd_, name_);
  const std::string stem = "." + name_ + ".tmp." + std::to_string(getpid()) + ".";
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    temp_name_ = stem + random_suffix();
    fd_ = openat(dir_fd_, temp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    int e = errno;
    close(dir_fd_);
    dir_fd_ = -1;
    KVT_THROW(IO_ERROR, "cannot create a temporary file in '" << dir_display << "': " << std::strerror(e));
  }
  temp_ = dir_display == "." && final_.find('/') == std::string::npos ? temp_name_ : dir_display + "/" + temp_name_;
  slot_ = register_temp(dir_fd_, temp_name_);
}

AtomicOutput::~AtomicOutput() {
  if (!done_) abandon();
  if (dir_fd_ >= 0) close(dir_fd_);
}

void AtomicOutput::release_fd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void AtomicOutput::abandon() {
  release_fd();
  unregister_temp(slot_);
  if (!done_) unlinkat(dir_fd_, temp_name_.c_str(), 0);
  done_ = true;
}

void AtomicOutput::commit() {
  KVT_CHECK(!done_, INTERNAL, "output committed twice");
  if (fd_ < 0) {
    fd_ = openat(dir_fd_, temp_name_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot reopen '" << temp_ << "': " << std::strerror(errno));
  }
  if (fsync(fd_) != 0) {
    int e = errno;
    abandon();
    KVT_THROW(IO_ERROR, "fsync of '" << final_ << "' failed: " << std::strerror(e));
  }
  if (mode_ >= 0) {
    fchmod(fd_, static_cast<mode_t>(mode_));
  } else {
    // Readers of the final file expect the usual umask-derived mode, not the temporary's 0600.
    mode_t um = umask(0);
    umask(um);
    fchmod(fd_, 0666 & ~um);
  }
  release_fd();
  if (renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name_.c_str()) != 0) {
    int e = errno;
    abandon();
    KVT_THROW(IO_ERROR, "cannot rename onto '" << final_ << "': " << std::strerror(e));
  }
  unregister_temp(slot_);
  done_ = true;
  fsync(dir_fd_);
}

void write_all(int fd, const void* data, size_t n, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    KVT_CHECK(w > 0, IO_ERROR, "write to " << what << " failed: " << std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace kvtool
