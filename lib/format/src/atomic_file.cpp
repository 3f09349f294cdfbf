#include "kvtool/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "kvtool/error.h"

namespace kvtool {

namespace {
constexpr int kSlots = 64;
constexpr size_t kPathMax = 4096;
char g_paths[kSlots][kPathMax];
std::atomic<bool> g_live[kSlots];
std::mutex g_mu;

extern "C" void cleanup_on_signal(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_live[i].load()) unlink(g_paths[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

int register_temp(const std::string& p) {
  if (p.size() >= kPathMax) return -1;
  std::lock_guard<std::mutex> lk(g_mu);
  for (int i = 0; i < kSlots; ++i) {
    if (!g_live[i].load()) {
      std::memcpy(g_paths[i], p.c_str(), p.size() + 1);
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
}  // namespace

void install_cleanup_handlers() {
  struct sigaction sa {};
  sa.sa_handler = cleanup_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

AtomicOutput::AtomicOutput(std::string final_path, bool overwrite) : final_(std::move(final_path)) {
  KVT_CHECK(!final_.empty(), USAGE, "empty output path");
  struct stat st {};
  if (stat(final_.c_str(), &st) == 0) {
    KVT_CHECK(overwrite, OUTPUT_EXISTS, "'" << final_ << "' already exists; refusing to overwrite it");
    KVT_CHECK(!S_ISDIR(st.st_mode), IO_ERROR, "'" << final_ << "' is a directory");
  }
  std::string tmpl = dir_of(final_) + "/." + base_of(final_) + ".tmp.XXXXXX";
  std::string buf = tmpl;
  fd_ = mkstemp(buf.data());
  KVT_CHECK(fd_ >= 0, IO_ERROR,
            "cannot create a temporary file in '" << dir_of(final_) << "': " << std::strerror(errno));
  temp_ = buf;
  slot_ = register_temp(temp_);
}

AtomicOutput::~AtomicOutput() {
  if (!done_) abandon();
}

void AtomicOutput::release_fd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void AtomicOutput::abandon() {
  release_fd();
  if (!done_) unlink(temp_.c_str());
  unregister_temp(slot_);
  done_ = true;
}

void AtomicOutput::commit() {
  KVT_CHECK(!done_, INTERNAL, "output committed twice");
  if (fd_ < 0) {
    fd_ = open(temp_.c_str(), O_RDONLY);
    KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot reopen '" << temp_ << "': " << std::strerror(errno));
  }
  if (fsync(fd_) != 0) {
    int e = errno;
    abandon();
    KVT_THROW(IO_ERROR, "fsync of '" << final_ << "' failed: " << std::strerror(e));
  }
  // Readers of the final file expect the usual umask-derived mode, not mkstemp's 0600.
  mode_t um = umask(0);
  umask(um);
  fchmod(fd_, 0666 & ~um);
  release_fd();
  if (rename(temp_.c_str(), final_.c_str()) != 0) {
    int e = errno;
    abandon();
    KVT_THROW(IO_ERROR, "cannot rename onto '" << final_ << "': " << std::strerror(e));
  }
  unregister_temp(slot_);
  done_ = true;
  int dfd = open(dir_of(final_).c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
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
