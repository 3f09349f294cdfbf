// The device tier's registry (kvtool/device.h).
#include <atomic>

#include "kvtool/device.h"

namespace kvtool {

namespace {
// Constant-initialized, so a registration from another file's static initializer (cuda/) finds it
// ready whatever the order of initialization.
std::atomic<DeviceBackendFactory> g_factory{nullptr};
}  // namespace

void register_device_backend(DeviceBackendFactory factory) { g_factory.store(factory); }

bool device_backend_registered() { return g_factory.load() != nullptr; }

std::shared_ptr<DeviceBackend> make_device_backend() {
  const DeviceBackendFactory f = g_factory.load();
  return f ? f() : nullptr;
}

}  // namespace kvtool
