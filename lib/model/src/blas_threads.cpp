// set_blas_threads (kvtool/blas.h): kvtool links the generic libblas.so.3, so which BLAS runs is
// the system's choice (Debian's alternatives); the thread setting is looked up by name at run time.
#include <dlfcn.h>

#include <algorithm>

#include "kvtool/blas.h"

namespace kvtool {

bool set_blas_threads(int threads) {
  threads = std::max(1, threads);
  using SetThreads = void (*)(int);
  for (const char* name : {"openblas_set_num_threads", "bli_thread_set_num_threads"}) {
    if (void* f = dlsym(RTLD_DEFAULT, name)) {
      reinterpret_cast<SetThreads>(f)(threads);
      return true;
    }
  }
  return false;
}

int blas_threads() {
  using GetThreads = int (*)();
  for (const char* name : {"openblas_get_num_threads", "bli_thread_get_num_threads"}) {
    if (void* f = dlsym(RTLD_DEFAULT, name)) return std::max(1, reinterpret_cast<GetThreads>(f)());
  }
  return 0;
}

}  // namespace kvtool
