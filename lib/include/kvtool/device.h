// The device tier behind the runtime pool: memory, asynchronous host-to-device copies with a
// completion, and the device mirrors of the query arithmetic (lib/include/kvtool/scoring.h). The
// CUDA implementation lives in cuda/ (kvtool::cuda::make_backend); tests use an emulated backend
// whose completions they deliver by hand to inject races deterministically.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "kvtool/export.h"

namespace kvtool {

// One asynchronous copy. ready() polls, wait() blocks until the copy landed (or failed: it throws
// Error INTERNAL after the copy's resources are safe to free).
class KVTOOL_API Transfer {
 public:
  virtual ~Transfer() = default;
  virtual bool ready() = 0;
  virtual void wait() = 0;
};

// A PQ part resident in device memory (section images as stored, raw).
struct PqDevicePart {
  const void* centroids = nullptr;  // f32 [m, k, dsub]
  const void* codes = nullptr;      // u8 or u16 [n, m]
  int64_t m = 0, k = 0, dsub = 0, n = 0;
  int code_bytes = 1;
};

class KVTOOL_API DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string name() const = 0;
  // Page-locked host memory when the device wants it for async copies (else aligned memory).
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) = 0;
  // nullptr when the device cannot supply the bytes (the pool's budget is checked before).
  virtual void* device_alloc(size_t bytes) = 0;
  virtual void device_free(void* p) = 0;
  virtual std::unique_ptr<Transfer> copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;  // synchronous
  // PQ lookup-table scoring and top-k of one query on the device: the same ids and scores as
  // scoring::pq_lut + pq_scores + top_k on the host.
  virtual void pq_top_k(const PqDevicePart& part, const float* q, int64_t k, std::vector<int64_t>& ids,
                        std::vector<float>& scores) = 0;
};

// Host-memory stand-in for a device, used by tests and by the pool's own checks of the device-tier
// logic on machines without a GPU: "device" memory is ordinary memory, copies complete when
// `deliver()` says so (or immediately with auto_complete), scoring runs lib/scoring.
class KVTOOL_API EmulatedDevice : public DeviceBackend {
 public:
  explicit EmulatedDevice(bool auto_complete = true);
  ~EmulatedDevice() override;
  std::string name() const override { return "emulated"; }
  void* host_alloc(size_t bytes) override;
  void host_free(void* p) override;
  void* device_alloc(size_t bytes) override;
  void device_free(void* p) override;
  std::unique_ptr<Transfer> copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void pq_top_k(const PqDevicePart& part, const float* q, int64_t k, std::vector<int64_t>& ids,
                std::vector<float>& scores) override;

  // Test controls. Copies started while auto_complete is off wait for deliver(i) (i = start order).
  size_t started() const;
  void deliver(size_t i);
  void deliver_all();
  int64_t device_bytes_live() const;  // bytes allocated and not yet freed
  int64_t host_bytes_live() const;

  struct State;

 private:
  std::shared_ptr<State> st_;
};

}  // namespace kvtool
