// See kvtool/mapped_file.h. The SIGBUS guard: a thread that reads through read() registers a jump
// target; the handler jumps back to it for a fault in that thread and passes any other SIGBUS on
// to the handler that was installed before (or the default action), so it changes nothing else.
#include "kvtool/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include "kvtool/error.h"

namespace kvtool {

namespace {

thread_local sigjmp_buf* t_fault_target = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* target = t_fault_target) siglongjmp(*target, 1);
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction) return g_previous_sigbus.sa_sigaction(sig, info, context);
  } else if (g_previous_sigbus.sa_handler != SIG_IGN && g_previous_sigbus.sa_handler != SIG_DFL) {
    return g_previous_sigbus.sa_handler(sig);
  }
  signal(SIGBUS, SIG_DFL);  // the default action: the fault repeats on return and ends the process
}

void install_sigbus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

}  // namespace

MappedFile::MappedFile(const RandomAccessFile& file) : name_(file.name()), size_(file.size()) {
  if (size_ == 0) return;
  void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  KVT_CHECK(p != MAP_FAILED, IO_ERROR, "cannot map " << name_ << ": " << std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  install_sigbus_guard();
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::read(uint64_t offset, size_t n, const std::function<void(const uint8_t*)>& use) const {
  KVT_CHECK(offset <= size_ && n <= size_ - offset, TRUNCATED,
            name_ << " is shorter than its headers say (" << size_ << " bytes)");
  sigjmp_buf target;
  sigjmp_buf* const outer = t_fault_target;
  if (sigsetjmp(target, 1) != 0) {
    t_fault_target = outer;
    KVT_THROW(TRUNCATED, name_ << " became shorter while it was read");
  }
  t_fault_target = &target;
  try {
    use(data_ + offset);
  } catch (...) {
    t_fault_target = outer;
    throw;
  }
  t_fault_target = outer;
}

}  // namespace kvtool
