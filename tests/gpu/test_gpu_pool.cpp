// The runtime pool through a device tier (pool_check.h): every kind's committed artifact published
// into the CUDA device tier (cuda/src/backend.cu) and queried; receipts compared with the host tier
// and with an independent brute-force scorer. Then a self-test: an error injected into the device's
// answers for each kind must be caught.
//   kvtool_gpu_pool_test [--emulated] DATA_DIR [RESULTS_FILE]
// Without a usable GPU it prints why and exits 77 (ctest: SKIP_RETURN_CODE), or 1 with
// KVTOOL_REQUIRE_GPU=1. --emulated uses the host-memory test device instead (tests/support): that
// checks the harness and the brute force against the host on any machine, not the GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "emulated_device.h"
#include "pool_check.h"
#include "kvtool/device.h"

namespace {

constexpr int kSkip = 77;

std::shared_ptr<kvtool::DeviceBackend> pick_device(bool emulated, std::string& label, std::string& why_not) {
  if (emulated) {
    label = "emulated device (host arithmetic: checks the harness and the brute force, not a GPU)";
    return std::make_shared<kvtool::test::EmulatedDevice>();
  }
#ifdef KVTOOL_GPU_POOL_CUDA
  // Through the runtime's registry, which cuda/src/backend.cu fills in: the path of kvtool load and the C API.
  if (!kvtool::device_backend_registered()) {  // a link error, not a missing GPU: never a skip
    std::fprintf(stderr, "FAIL: the CUDA tier is linked in but did not register itself (kvtool/device.h)\n");
    std::exit(1);
  }
  auto dev = kvtool::make_device_backend();
  if (!dev) why_not = "no usable CUDA device (cudaGetDeviceCount found none)";
  label = "CUDA device tier (cuda/src/backend.cu)";
  return dev;
#else
  why_not = "this binary was built without CUDA";
  return nullptr;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  int arg = 1;
  const bool emulated = argc > 1 && std::strcmp(argv[1], "--emulated") == 0;
  arg += emulated;
  if (argc <= arg) {
    std::fprintf(stderr, "usage: %s [--emulated] DATA_DIR [RESULTS_FILE]\n", argv[0]);
    return 2;
  }
  const std::string data = argv[arg];
  std::string label, why_not;
  auto dev = pick_device(emulated, label, why_not);
  if (!dev) {
    const char* req = std::getenv("KVTOOL_REQUIRE_GPU");
    const bool require = req && std::string(req) == "1";
    std::printf("SKIPPED: %s; the pool's device tier was not checked%s\n", why_not.c_str(),
                require ? " (KVTOOL_REQUIRE_GPU=1: failing)" : "");
    return require ? 1 : kSkip;
  }
  std::ostringstream report;
  report << "pool checks through the " << label << "\n";
  int failures = 0;
  try {
    failures += kvtool::gpucheck::run_pool_checks(dev, data, report);
    failures += kvtool::gpucheck::run_fault_self_test(dev, data, report);
  } catch (const std::exception& e) {
    report << "FAIL exception: " << e.what() << "\n";
    ++failures;
  }
  report << failures << " failure(s)\n";
  std::cout << report.str();
  if (argc > arg + 1) std::ofstream(argv[arg + 1]) << report.str();
  return failures ? 1 : 0;
}
