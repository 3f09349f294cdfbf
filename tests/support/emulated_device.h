// Host-memory stand-in for a device (kvtool::DeviceBackend), for tests only: "device" memory is
// ordinary memory, copies complete when `deliver()` says so (or at once with auto_complete), and
// scoring runs the host arithmetic of kvtool/scoring.h. Tests use it to drive the pool's device
// tier on machines without a GPU and to inject copy races deterministically; it is not part of
// the library, so no runtime can select it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/device.h"

namespace kvtool::test {

class EmulatedDevice : public DeviceBackend {
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
  void product_code_top_k(const ProductCodes& part, const float* q, int64_t k, std::vector<int64_t>& ids,
                          std::vector<float>& scores) override;
  void dot_scores(const float* centroids, int64_t count, int64_t d, const float* q, float* out) override;
  void dot_scores_f64(const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                      const float* q, double* out) override;
  void simhash_collisions(const float* w, const uint32_t* offsets, const void* ids, int id_bytes, int64_t d,
                          int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, uint32_t* codes,
                          uint16_t* count) override;
  // Batched PQ with buffers sized by reserve_pq_batches (the largest shape reserved so far); a
  // batch outside them returns false. Batches are serialized, as on one device workspace.
  // A device step run on the host when enqueued, reading and writing the "device" (host) memory.
  std::unique_ptr<DeviceStep> make_pq_step(const std::vector<PqStepGroup>& groups, int64_t top,
                                           int64_t stride) override;
  void prepare_stream(void* stream) override;
  void* last_prepared_stream() const;  // the stream of the last pool batch on this device
  void reserve_pq_batches(const PqBatchLimits& limits) override;
  int64_t pq_batch_capacity(const ProductCodes& part, int64_t top) override;
  bool product_code_top_k_batch(const ProductCodes& part, const float* q, int64_t count, int64_t top, void* stream,
                                int64_t* ids, float* scores) override;
  // Batched scoring primitives with buffers sized by reserve_score_batches (as above).
  void reserve_score_batches(const ScoreBatchLimits& limits) override;
  int64_t score_batch_capacity(const ScoreBatchLimits& one) override;
  int64_t batch_buffer_bytes() override;
  bool dot_scores_batch(const float* centroids, int64_t rows, int64_t d, const float* q, int64_t count, void* stream,
                        float* out) override;
  bool dot_scores_f64_batch(const float* centroids, int64_t rows, int64_t d, double scale, const float* q,
                            int64_t count, void* stream, double* out) override;
  bool simhash_collisions_batch(const float* w, const uint32_t* offsets, const void* ids, int id_bytes, int64_t d,
                                int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, int64_t count,
                                void* stream, uint16_t* counts, int64_t stride) override;
  int64_t scoring_calls() const;  // device scoring calls so far (tests: the device path was taken)
  int64_t batch_calls() const;    // batched calls that answered (PQ and scoring primitives)
  void* last_stream() const;      // the stream the last answered batch was given

  // Test controls. Copies started while auto_complete is off wait for deliver(i) (i = start order).
  size_t started() const;
  void deliver(size_t i);
  void deliver_all();
  int64_t device_bytes_live() const;  // bytes allocated and not yet freed
  int64_t host_bytes_live() const;

 private:
  struct State;
  class EmulatedTransfer;
  // Shared with the transfers it hands out, which may outlive the device in a test.
  std::shared_ptr<State> st_;
};

}  // namespace kvtool::test
