#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/sort.h>

#include <stdexcept>
#include <string>

#include "kvtool/cuda_kernels.h"
#include "kvtool/half.h"  // f16_bits_to_f32_bits: one definition for host and device

namespace kvtool::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // not left behind to fail the thread's next, unrelated check
  throw std::runtime_error(std::string("CUDA ") + what + " failed: " + cudaGetErrorString(e));
}

// Device buffer freed on scope exit.
template <typename T>
struct DevBuf {
  T* p = nullptr;
  explicit DevBuf(size_t n) { check(cudaMalloc(reinterpret_cast<void**>(&p), (n ? n : 1) * sizeof(T)), "cudaMalloc"); }
  DevBuf(const T* host, size_t n) : DevBuf(n) {
    if (n) check(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

unsigned blocks_for(int64_t n, int threads = 256) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

__global__ void to_f32_kernel(int kind, const void* in, float* out, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (kind == 0) {
      out[i] = static_cast<const float*>(in)[i];
    } else {
      uint16_t b = static_cast<const uint16_t*>(in)[i];
      out[i] = __uint_as_float(kind == 1 ? f16_bits_to_f32_bits(b) : static_cast<uint32_t>(b) << 16);
    }
  }
}

__global__ void pq_lut_kernel(const float* q, const float* cen, int64_t m, int64_t k, int64_t dsub, float* lut) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m * k) return;
  const int64_t j = i / k;
  const float* c = cen + i * dsub;
  float s = 0.f;
  for (int64_t t = 0; t < dsub; ++t) s = __fadd_rn(s, __fmul_rn(q[j * dsub + t], c[t]));
  lut[i] = s;
}

template <typename Code>
__global__ void pq_score_kernel(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k, float* score,
                                unsigned long long* keys) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int64_t j = 0; j < m; ++j) s = __fadd_rn(s, lut[j * k + codes[i * m + j]]);
    score[i] = s;
    // Sort key: score descending, then index ascending. -0 and +0 are equal scores.
    uint32_t u = __float_as_uint(s == 0.f ? 0.f : s);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending in float order
    keys[i] = (static_cast<unsigned long long>(~u) << 32) | static_cast<unsigned long long>(i);
  }
}

// The centroid and SimHash kernels score query blockIdx.y of a batch (q at q + qi * d, results at
// out + qi * count): a single query is a grid of height 1. Rows are grid-strided.
__global__ void dot_f64_kernel(const float* q, const float* cen, const int64_t* rows, int64_t count, int64_t d,
                               double scale, double* out) {
  const int64_t qi = blockIdx.y;
  const float* qq = q + qi * d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* c = cen + (rows ? rows[i] : i) * d;
    double z = 0;
    for (int64_t t = 0; t < d; ++t) z = __dadd_rn(z, __dmul_rn(static_cast<double>(qq[t]), static_cast<double>(c[t])));
    out[qi * count + i] = __dmul_rn(z, scale);
  }
}

__global__ void dot_f32_kernel(const float* q, const float* cen, int64_t count, int64_t d, float* out) {
  const int64_t qi = blockIdx.y;
  const float* qq = q + qi * d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* c = cen + i * d;
    float s = 0.f;
    for (int64_t t = 0; t < d; ++t) s = __fadd_rn(s, __fmul_rn(qq[t], c[t]));
    out[qi * count + i] = s;
  }
}

// s[qi][c] = q[qi] · w[:, c] for every hash column c = t * bits + b.
__global__ void simhash_kernel(const float* q, int64_t d, const float* w, int64_t cols, float* s) {
  const int64_t qi = blockIdx.y;
  const float* qq = q + qi * d;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < d; ++j) acc = __fadd_rn(acc, __fmul_rn(qq[j], w[j * cols + c]));
    s[qi * cols + c] = acc;
  }
}

// One block per (table blockIdx.x, query blockIdx.y): the query's code in that table, then a count
// for every member of its bucket.
template <typename Id>
__global__ void collide_kernel(const float* s, int64_t bits, int64_t tables, const uint32_t* offsets, const Id* ids,
                               int64_t buckets, int64_t n, int64_t base, uint32_t* codes, unsigned* count) {
  const int64_t t = blockIdx.x, qi = blockIdx.y;
  if (t >= tables) return;
  const float* sq = s + qi * bits * tables;
  uint32_t code = 0;
  for (int64_t b = 0; b < bits; ++b) code |= static_cast<uint32_t>(sq[t * bits + b] > 0.f) << b;
  if (threadIdx.x == 0) codes[qi * tables + t] = code;
  const uint32_t* off = offsets + t * (buckets + 1);
  const Id* tid = ids + t * n;
  unsigned* cq = count + qi * n;
  for (uint32_t i = off[code] + threadIdx.x; i < off[code + 1]; i += blockDim.x)
    atomicAdd(&cq[static_cast<int64_t>(tid[i]) - base], 1u);
}

__global__ void widen_count_kernel(const unsigned* in, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<uint16_t>(in[i]);
}

// Codes and collision counts of `count` queries (u16 counts [count, n]) on `st`; d_q [count, d],
// d_s [count, bits * tables], d_codes [count, tables], d_count [count, n] are the caller's buffers.
void enqueue_simhash(const float* d_q, int64_t count, int64_t d, const float* d_w, int64_t bits, int64_t tables,
                     const uint32_t* d_offsets, const void* d_ids, int id_bytes, int64_t n, int64_t base, float* d_s,
                     uint32_t* d_codes, unsigned* d_count, uint16_t* d_c16, cudaStream_t st) {
  const int64_t cols = bits * tables, buckets = int64_t{1} << bits;
  const auto qs = static_cast<unsigned>(count);
  if (n) check(cudaMemsetAsync(d_count, 0, count * n * sizeof(unsigned), st), "cudaMemsetAsync");
  simhash_kernel<<<dim3(blocks_for(cols), qs), 256, 0, st>>>(d_q, d, d_w, cols, d_s);
  const dim3 grid(static_cast<unsigned>(tables), qs);
  if (id_bytes == 2)
    collide_kernel<<<grid, 128, 0, st>>>(d_s, bits, tables, d_offsets, static_cast<const uint16_t*>(d_ids), buckets, n,
                                         base, d_codes, d_count);
  else
    collide_kernel<<<grid, 128, 0, st>>>(d_s, bits, tables, d_offsets, static_cast<const uint32_t*>(d_ids), buckets, n,
                                         base, d_codes, d_count);
  if (n) widen_count_kernel<<<blocks_for(count * n), 256, 0, st>>>(d_count, d_c16, count * n);
  check(cudaGetLastError(), "simhash kernels");
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

bool convert_to_f32(int kind, const void* in, float* out, size_t n) {
  if (device_count() == 0) return false;
  const size_t es = kind == 0 ? 4 : 2;
  DevBuf<uint8_t> din(static_cast<const uint8_t*>(in), n * es);
  DevBuf<float> dout(n);
  if (n) to_f32_kernel<<<blocks_for(static_cast<int64_t>(n)), 256>>>(kind, din.p, dout.p, n);
  check(cudaGetLastError(), "conversion kernel");
  if (n) check(cudaMemcpy(out, dout.p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return true;
}

bool pq_top_k_device(const float* d_centroids, const void* d_codes, int code_bytes, int64_t m, int64_t k, int64_t dsub,
                     int64_t n, const float* q, int64_t top, std::vector<int64_t>& ids, std::vector<float>& scores,
                     std::vector<float>* all_scores) {
  if (device_count() == 0) return false;
  ids.clear();
  scores.clear();
  if (n <= 0) return true;
  DevBuf<float> dq(q, static_cast<size_t>(m * dsub));
  DevBuf<float> lut(static_cast<size_t>(m * k)), score(static_cast<size_t>(n));
  DevBuf<unsigned long long> keys(static_cast<size_t>(n));
  pq_lut_kernel<<<blocks_for(m * k), 256>>>(dq.p, d_centroids, m, k, dsub, lut.p);
  if (code_bytes == 1)
    pq_score_kernel<<<blocks_for(n), 256>>>(lut.p, static_cast<const uint8_t*>(d_codes), n, m, k, score.p, keys.p);
  else
    pq_score_kernel<<<blocks_for(n), 256>>>(lut.p, static_cast<const uint16_t*>(d_codes), n, m, k, score.p, keys.p);
  check(cudaGetLastError(), "pq kernels");
  thrust::device_ptr<unsigned long long> kp(keys.p);
  thrust::sort(thrust::device, kp, kp + n);
  const int64_t b = top < 0 ? 0 : (top < n ? top : n);
  std::vector<unsigned long long> best(static_cast<size_t>(b));
  std::vector<float> all(static_cast<size_t>(n));
  if (b)
    check(cudaMemcpy(best.data(), keys.p, b * sizeof(unsigned long long), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  check(cudaMemcpy(all.data(), score.p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  for (unsigned long long key : best) {
    const int64_t i = static_cast<int64_t>(key & 0xffffffffull);
    ids.push_back(i);
    scores.push_back(all[static_cast<size_t>(i)]);
  }
  if (all_scores) all_scores->swap(all);
  return true;
}

bool pq_top_k(const float* centroids, const void* codes, int code_bytes, int64_t m, int64_t k, int64_t dsub, int64_t n,
              const float* q, int64_t top, std::vector<int64_t>& ids, std::vector<float>& scores,
              std::vector<float>* all_scores) {
  if (device_count() == 0) return false;
  DevBuf<float> dc(centroids, static_cast<size_t>(m * k * dsub));
  DevBuf<uint8_t> dcodes(static_cast<const uint8_t*>(codes), static_cast<size_t>(n * m * code_bytes));
  return pq_top_k_device(dc.p, dcodes.p, code_bytes, m, k, dsub, n, q, top, ids, scores, all_scores);
}

bool dot_scores_f64_device(const float* d_centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                           const float* q, double* out) {
  if (device_count() == 0) return false;
  if (count <= 0) return true;
  DevBuf<float> dq(q, static_cast<size_t>(d));
  DevBuf<int64_t> dr(rows ? static_cast<size_t>(count) : 0);
  if (rows) check(cudaMemcpy(dr.p, rows, count * sizeof(int64_t), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  DevBuf<double> dout(static_cast<size_t>(count));
  dot_f64_kernel<<<blocks_for(count), 256>>>(dq.p, d_centroids, rows ? dr.p : nullptr, count, d, scale, dout.p);
  check(cudaGetLastError(), "dot kernel");
  check(cudaMemcpy(out, dout.p, count * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return true;
}

bool dot_scores_f64(const float* q, const float* centroids, int64_t centroid_rows, const int64_t* rows, int64_t count,
                    int64_t d, double scale, double* out) {
  if (device_count() == 0) return false;
  DevBuf<float> dc(centroids, static_cast<size_t>(centroid_rows * d));
  return dot_scores_f64_device(dc.p, rows, count, d, scale, q, out);
}

bool dot_scores_device(const float* d_centroids, int64_t count, int64_t d, const float* q, float* out) {
  if (device_count() == 0) return false;
  if (count <= 0) return true;
  DevBuf<float> dq(q, static_cast<size_t>(d)), dout(static_cast<size_t>(count));
  dot_f32_kernel<<<blocks_for(count), 256>>>(dq.p, d_centroids, count, d, dout.p);
  check(cudaGetLastError(), "dot kernel");
  check(cudaMemcpy(out, dout.p, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return true;
}

bool dot_scores(const float* q, const float* centroids, int64_t count, int64_t d, float* out) {
  if (device_count() == 0) return false;
  DevBuf<float> dc(centroids, static_cast<size_t>(count * d));
  return dot_scores_device(dc.p, count, d, q, out);
}

bool simhash_collisions_device(const float* d_w, const uint32_t* d_offsets, const void* d_ids, int id_bytes, int64_t d,
                               int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, uint32_t* codes,
                               uint16_t* count) {
  if (device_count() == 0) return false;
  const int64_t cols = bits * tables;
  DevBuf<float> dq(q, static_cast<size_t>(d)), ds(static_cast<size_t>(cols));
  DevBuf<uint32_t> dcodes(static_cast<size_t>(tables));
  DevBuf<unsigned> dcount(static_cast<size_t>(n));
  DevBuf<uint16_t> dc16(static_cast<size_t>(n));
  enqueue_simhash(dq.p, 1, d, d_w, bits, tables, d_offsets, d_ids, id_bytes, n, base, ds.p, dcodes.p, dcount.p, dc16.p,
                  nullptr);
  check(cudaMemcpy(codes, dcodes.p, tables * sizeof(uint32_t), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  if (n) check(cudaMemcpy(count, dc16.p, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return true;
}

bool simhash_collisions(const float* q, int64_t d, const float* w, int64_t bits, int64_t tables,
                        const uint32_t* offsets, const uint32_t* ids, int64_t n, int64_t base, uint32_t* codes,
                        uint16_t* count) {
  if (device_count() == 0) return false;
  const int64_t buckets = int64_t{1} << bits;
  DevBuf<float> dw(w, static_cast<size_t>(d * bits * tables));
  DevBuf<uint32_t> doff(offsets, static_cast<size_t>(tables * (buckets + 1))),
      dids(ids, static_cast<size_t>(tables * n));
  return simhash_collisions_device(dw.p, doff.p, dids.p, 4, d, bits, tables, n, base, q, codes, count);
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}
void device_free(void* p) { cudaFree(p); }
void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}
void pinned_free(void* p) { cudaFreeHost(p); }

struct CopyHandle {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
};

CopyHandle* copy_async(void* dst, const void* src, size_t bytes) {
  auto* h = new CopyHandle;
  cudaError_t e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming);
  if (e == cudaSuccess && bytes) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, h->stream);
  if (e == cudaSuccess) e = cudaEventRecord(h->done, h->stream);
  if (e != cudaSuccess) {
    if (h->stream) cudaStreamSynchronize(h->stream);
    copy_release(h);
    check(e, "async host-to-device copy");
  }
  return h;
}
bool copy_ready(CopyHandle* h) {
  cudaError_t e = cudaEventQuery(h->done);
  if (e == cudaErrorNotReady) return false;
  return true;  // landed (a failure is reported by copy_wait)
}
void copy_wait(CopyHandle* h) { check(cudaEventSynchronize(h->done), "waiting for a host-to-device copy"); }
void copy_release(CopyHandle* h) {
  if (!h) return;
  if (h->done) cudaEventDestroy(h->done);
  if (h->stream) cudaStreamDestroy(h->stream);
  delete h;
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

}  // namespace kvtool::cuda

// ---- Batched PQ queries (cuda_kernels.h, "Batched PQ queries") ---------------------------------
namespace kvtool::cuda {

namespace {

// Lookup tables of `count` queries: lut[qi][j][c] = sum_t q[qi][j][t] * cen[j][c][t], the
// arithmetic of pq_lut_kernel (and scoring::pq_lut) per query.
__global__ void pq_lut_batch_kernel(const float* q, const int64_t* members, const float* cen, int64_t count, int64_t m,
                                    int64_t k, int64_t dsub, float* lut) {
  const int64_t per = m * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count * per;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t qi = i / per, e = i % per, j = e / k;
    const float* c = cen + e * dsub;
    const float* qj = q + (members ? members[qi] : qi) * m * dsub + j * dsub;  // members: query qi's row of q
    float s = 0.f;
    for (int64_t t = 0; t < dsub; ++t) s = __fadd_rn(s, __fmul_rn(qj[t], c[t]));
    lut[i] = s;
  }
}

// Scores and selection keys of every row for query blockIdx.y (pq_score_kernel per query).
template <typename Code>
__global__ void pq_score_batch_kernel(const float* lut, const Code* codes, int64_t n, int64_t m, int64_t k,
                                      float* score, unsigned long long* keys) {
  const int64_t qi = blockIdx.y;
  const float* l = lut + qi * m * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int64_t j = 0; j < m; ++j) s = __fadd_rn(s, l[j * k + codes[i * m + j]]);
    score[qi * n + i] = s;
    uint32_t u = __float_as_uint(s == 0.f ? 0.f : s);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    keys[qi * n + i] = (static_cast<unsigned long long>(~u) << 32) | static_cast<unsigned long long>(i);
  }
}

constexpr int kSelectThreads = 1024;

// One block per query: the b-th smallest of its n unique keys by an MSD radix select (8 bits a
// pass, a shared histogram), then the b keys at most that one gathered into shared memory, padded
// to a power of two with the largest key, bitonic-sorted, and written out as row ids and scores.
__global__ void __launch_bounds__(kSelectThreads)
    select_top_kernel(const unsigned long long* keys, const float* score, int64_t n, int64_t b, int64_t padded,
                      PqBatchPlacement out) {
  extern __shared__ unsigned long long kept[];  // [padded]
  __shared__ unsigned int hist[256];
  __shared__ unsigned long long prefix_s;
  __shared__ long long remaining_s;
  __shared__ unsigned int fill;
  const int64_t qi = blockIdx.x;
  const unsigned long long* key = keys + qi * n;
  if (threadIdx.x == 0) {
    prefix_s = 0;
    remaining_s = b;  // rank (1-based) of the wanted key among those matching the prefix
    fill = 0;
  }
  unsigned long long mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    const unsigned long long prefix = prefix_s;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      if ((key[i] & mask) == prefix) atomicAdd(&hist[(key[i] >> shift) & 0xff], 1u);
    __syncthreads();
    if (threadIdx.x == 0) {
      long long before = 0;
      int d = 0;
      while (before + hist[d] < remaining_s) before += hist[d++];
      remaining_s -= before;
      prefix_s = prefix | (static_cast<unsigned long long>(d) << shift);
    }
    mask |= 0xffull << shift;
    __syncthreads();
  }
  const unsigned long long kth = prefix_s;  // exactly b keys are <= kth: keys are unique
  for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) kept[i] = ~0ull;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (key[i] <= kth) kept[atomicAdd(&fill, 1u)] = key[i];
  __syncthreads();
  for (int64_t size = 2; size <= padded; size <<= 1)
    for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
        const int64_t j = i ^ stride;
        if (j > i) {
          const bool up = (i & size) == 0;
          const unsigned long long a = kept[i], c = kept[j];
          if ((a > c) == up) {
            kept[i] = c;
            kept[j] = a;
          }
        }
      }
      __syncthreads();
    }
  const int64_t at = (out.members ? out.members[qi] : qi) * out.stride;  // this query's answer row
  for (int64_t r = threadIdx.x; r < b; r += blockDim.x) {
    const int64_t row = static_cast<int64_t>(kept[r] & 0xffffffffull);
    out.ids[at + r] = out.row_base + row;
    out.scores[at + r] = score[qi * n + row];
  }
}

int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

struct PqBatchWorkspace {
  PqBatchShape shape;
  float* q = nullptr;  // page-locked host
  int64_t* ids = nullptr;
  float* scores = nullptr;
  float *d_q = nullptr, *d_lut = nullptr, *d_score = nullptr, *d_out_scores = nullptr;
  unsigned long long* d_keys = nullptr;
  int64_t* d_ids = nullptr;
};

void pq_batch_workspace_destroy(PqBatchWorkspace* ws) {
  if (!ws) return;
  cudaFreeHost(ws->q);
  cudaFreeHost(ws->ids);
  cudaFreeHost(ws->scores);
  for (void* p : {static_cast<void*>(ws->d_q), static_cast<void*>(ws->d_lut), static_cast<void*>(ws->d_score),
                  static_cast<void*>(ws->d_out_scores), static_cast<void*>(ws->d_keys), static_cast<void*>(ws->d_ids)})
    cudaFree(p);
  delete ws;
}

PqBatchWorkspace* pq_batch_workspace_create(const PqBatchShape& s) {
  if (device_count() == 0) return nullptr;
  if (s.max_queries < 1 || s.max_queries > 65535 || s.max_rows < 1 || s.max_subspaces < 1 || s.max_centroids < 1 ||
      s.max_dim < 1 || s.max_top < 1 || s.max_top > kMaxBatchTop || s.max_rows > int64_t{UINT32_MAX})
    throw std::runtime_error(
        "pq batch workspace: a shape value is out of range (queries at most 65535: the grid's y; top at most 8192)");
  auto* ws = new PqBatchWorkspace;
  ws->shape = s;
  const size_t nq = static_cast<size_t>(s.max_queries), rows = nq * static_cast<size_t>(s.max_rows),
               top = nq * static_cast<size_t>(s.max_top);
  try {
    check(cudaHostAlloc(reinterpret_cast<void**>(&ws->q), nq * s.max_dim * sizeof(float), cudaHostAllocDefault),
          "cudaHostAlloc");
    check(cudaHostAlloc(reinterpret_cast<void**>(&ws->ids), top * sizeof(int64_t), cudaHostAllocDefault),
          "cudaHostAlloc");
    check(cudaHostAlloc(reinterpret_cast<void**>(&ws->scores), top * sizeof(float), cudaHostAllocDefault),
          "cudaHostAlloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_q), nq * s.max_dim * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_lut), nq * s.max_subspaces * s.max_centroids * sizeof(float)),
          "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_score), rows * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_keys), rows * sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_ids), top * sizeof(int64_t)), "cudaMalloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_out_scores), top * sizeof(float)), "cudaMalloc");
    // Up to 64 KiB of keys per block: above the default 48 KiB, so opted in here, outside any capture.
    // The attribute is the kernel's, for the whole process: always the largest any workspace needs,
    // never a smaller one that another workspace's batches would then exceed.
    const int shared = static_cast<int>(kMaxBatchTop * sizeof(unsigned long long));
    check(cudaFuncSetAttribute(select_top_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared),
          "cudaFuncSetAttribute");
  } catch (...) {
    pq_batch_workspace_destroy(ws);
    throw;
  }
  return ws;
}

size_t pq_batch_workspace_bytes(const PqBatchShape& s) {
  const size_t nq = static_cast<size_t>(s.max_queries), rows = nq * static_cast<size_t>(s.max_rows),
               top = nq * static_cast<size_t>(s.max_top);
  return 2 * nq * s.max_dim * sizeof(float) + 2 * top * (sizeof(int64_t) + sizeof(float)) +
         nq * s.max_subspaces * s.max_centroids * sizeof(float) + rows * (sizeof(float) + sizeof(unsigned long long));
}

float* pq_batch_queries(PqBatchWorkspace* ws) { return ws->q; }
const int64_t* pq_batch_ids(const PqBatchWorkspace* ws) { return ws->ids; }
const float* pq_batch_scores(const PqBatchWorkspace* ws) { return ws->scores; }

namespace {
// The shape checks, lookup tables, scores and selection of a batch whose queries are in device
// memory, answers written as `out` places them (the host-copy path and the device-resident one).
// The rows each query gets, min(top, n), after checking the batch against the workspace's shape.
int64_t pq_batch_rows(const PqBatchWorkspace* ws, int code_bytes, int64_t m, int64_t k, int64_t dsub, int64_t n,
                      int64_t count, int64_t top) {
  const PqBatchShape& s = ws->shape;
  if (count < 0 || count > s.max_queries || n < 0 || n > s.max_rows || m < 1 || m > s.max_subspaces ||
      k > s.max_centroids || dsub < 1 || m * dsub > s.max_dim || top < 0 || (code_bytes != 1 && code_bytes != 2))
    throw std::runtime_error("pq batch: the batch exceeds the workspace's shape");
  const int64_t b = top < n ? top : n;
  if (b > s.max_top) throw std::runtime_error("pq batch: more rows asked for than the workspace's max_top");
  return b;
}

void enqueue_pq_selection(PqBatchWorkspace* ws, const float* d_centroids, const void* d_codes, int code_bytes,
                          int64_t m, int64_t k, int64_t dsub, int64_t n, int64_t count, int64_t top, const float* d_q,
                          const PqBatchPlacement& out, cudaStream_t st) {
  const int64_t b = pq_batch_rows(ws, code_bytes, m, k, dsub, n, count, top);
  if (count == 0 || b == 0) return;
  pq_lut_batch_kernel<<<blocks_for(count * m * k), 256, 0, st>>>(d_q, out.members, d_centroids, count, m, k, dsub,
                                                                 ws->d_lut);
  const dim3 grid(blocks_for(n), static_cast<unsigned>(count));
  if (code_bytes == 1)
    pq_score_batch_kernel<<<grid, 256, 0, st>>>(ws->d_lut, static_cast<const uint8_t*>(d_codes), n, m, k, ws->d_score,
                                                ws->d_keys);
  else
    pq_score_batch_kernel<<<grid, 256, 0, st>>>(ws->d_lut, static_cast<const uint16_t*>(d_codes), n, m, k, ws->d_score,
                                                ws->d_keys);
  const int64_t padded = pow2_at_least(b);
  select_top_kernel<<<static_cast<unsigned>(count), kSelectThreads, padded * sizeof(unsigned long long), st>>>(
      ws->d_keys, ws->d_score, n, b, padded, out);
  check(cudaGetLastError(), "pq batch kernels");
}
}  // namespace

void pq_top_k_batch_enqueue(PqBatchWorkspace* ws, const float* d_centroids, const void* d_codes, int code_bytes,
                            int64_t m, int64_t k, int64_t dsub, int64_t n, int64_t count, int64_t top, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const int64_t b = pq_batch_rows(ws, code_bytes, m, k, dsub, n, count, top);
  if (count == 0 || b == 0) return;
  check(cudaMemcpyAsync(ws->d_q, ws->q, count * m * dsub * sizeof(float), cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync H2D");
  enqueue_pq_selection(ws, d_centroids, d_codes, code_bytes, m, k, dsub, n, count, top, ws->d_q,
                       {nullptr, 0, ws->d_ids, ws->d_out_scores, b}, st);
  check(cudaMemcpyAsync(ws->ids, ws->d_ids, count * b * sizeof(int64_t), cudaMemcpyDeviceToHost, st),
        "cudaMemcpyAsync D2H");
  check(cudaMemcpyAsync(ws->scores, ws->d_out_scores, count * b * sizeof(float), cudaMemcpyDeviceToHost, st),
        "cudaMemcpyAsync D2H");
}

void pq_top_k_batch_enqueue_on_device(PqBatchWorkspace* ws, const float* d_centroids, const void* d_codes,
                                      int code_bytes, int64_t m, int64_t k, int64_t dsub, int64_t n, int64_t count,
                                      int64_t top, const float* d_q, const PqBatchPlacement& out, void* stream) {
  enqueue_pq_selection(ws, d_centroids, d_codes, code_bytes, m, k, dsub, n, count, top, d_q, out,
                       static_cast<cudaStream_t>(stream));
}

// ---- Batched scoring primitives (cuda_kernels.h, "Batched scoring primitives") -----------------

struct ScoreBatchWorkspace {
  ScoreBatchShape shape;
  float* q = nullptr;    // page-locked host [max_queries, max_dim]
  void* out = nullptr;   // page-locked host [max_queries, max_rows] of up to 8 bytes (double scores)
  float* d_q = nullptr;  // device copies of the above
  void* d_out = nullptr;
  float* d_s = nullptr;         // SimHash only: projections [max_queries, max_hash_columns]
  uint32_t* d_codes = nullptr;  // codes [max_queries, max_hash_columns] (tables <= columns)
  unsigned* d_count = nullptr;  // counts [max_queries, max_rows] before narrowing to u16
};

void score_batch_workspace_destroy(ScoreBatchWorkspace* ws) {
  if (!ws) return;
  cudaFreeHost(ws->q);
  cudaFreeHost(ws->out);
  for (void* p : {static_cast<void*>(ws->d_q), ws->d_out, static_cast<void*>(ws->d_s), static_cast<void*>(ws->d_codes),
                  static_cast<void*>(ws->d_count)})
    cudaFree(p);
  delete ws;
}

ScoreBatchWorkspace* score_batch_workspace_create(const ScoreBatchShape& s) {
  if (device_count() == 0) return nullptr;
  if (s.max_queries < 1 || s.max_queries > 65535 || s.max_dim < 1 || s.max_rows < 1 || s.max_hash_columns < 0)
    throw std::runtime_error("score batch workspace: a shape value is out of range (queries 1..65535: the grid's y)");
  auto* ws = new ScoreBatchWorkspace;
  ws->shape = s;
  const size_t nq = static_cast<size_t>(s.max_queries), rows = nq * static_cast<size_t>(s.max_rows),
               cols = nq * static_cast<size_t>(s.max_hash_columns);
  try {
    check(cudaHostAlloc(reinterpret_cast<void**>(&ws->q), nq * s.max_dim * sizeof(float), cudaHostAllocDefault),
          "cudaHostAlloc");
    check(cudaHostAlloc(&ws->out, rows * sizeof(double), cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaMalloc(reinterpret_cast<void**>(&ws->d_q), nq * s.max_dim * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&ws->d_out, rows * sizeof(double)), "cudaMalloc");
    if (cols) {
      check(cudaMalloc(reinterpret_cast<void**>(&ws->d_s), cols * sizeof(float)), "cudaMalloc");
      check(cudaMalloc(reinterpret_cast<void**>(&ws->d_codes), cols * sizeof(uint32_t)), "cudaMalloc");
      check(cudaMalloc(reinterpret_cast<void**>(&ws->d_count), rows * sizeof(unsigned)), "cudaMalloc");
    }
  } catch (...) {
    score_batch_workspace_destroy(ws);
    throw;
  }
  return ws;
}

size_t score_batch_workspace_bytes(const ScoreBatchShape& s) {
  const size_t nq = static_cast<size_t>(s.max_queries), rows = nq * static_cast<size_t>(s.max_rows),
               cols = nq * static_cast<size_t>(s.max_hash_columns);
  return 2 * nq * s.max_dim * sizeof(float) + 2 * rows * sizeof(double) +
         (cols ? cols * (sizeof(float) + sizeof(uint32_t)) + rows * sizeof(unsigned) : 0);
}

float* score_batch_queries(ScoreBatchWorkspace* ws) { return ws->q; }
const void* score_batch_results(const ScoreBatchWorkspace* ws) { return ws->out; }

namespace {
// The batch's shape against the workspace's; the queries' copy in.
cudaStream_t start_score_batch(ScoreBatchWorkspace* ws, const ScoreBatchShape& need, void* stream) {
  const ScoreBatchShape& s = ws->shape;
  if (need.max_queries < 0 || need.max_dim < 0 || need.max_rows < 0 || !s.covers(need))
    throw std::runtime_error("score batch: the batch exceeds the workspace's shape");
  auto st = static_cast<cudaStream_t>(stream);
  check(cudaMemcpyAsync(ws->d_q, ws->q, need.max_queries * need.max_dim * sizeof(float), cudaMemcpyHostToDevice, st),
        "cudaMemcpyAsync H2D");
  return st;
}
void finish_score_batch(ScoreBatchWorkspace* ws, size_t bytes, cudaStream_t st) {
  check(cudaGetLastError(), "score batch kernels");
  check(cudaMemcpyAsync(ws->out, ws->d_out, bytes, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync D2H");
}
}  // namespace

void dot_scores_batch_enqueue(ScoreBatchWorkspace* ws, const float* d_centroids, int64_t rows, int64_t d, int64_t count,
                              void* stream) {
  cudaStream_t st = start_score_batch(ws, {count, d, rows, 0}, stream);
  if (count == 0 || rows == 0) return;
  dot_f32_kernel<<<dim3(blocks_for(rows), static_cast<unsigned>(count)), 256, 0, st>>>(ws->d_q, d_centroids, rows, d,
                                                                                       static_cast<float*>(ws->d_out));
  finish_score_batch(ws, count * rows * sizeof(float), st);
}

void dot_scores_f64_batch_enqueue(ScoreBatchWorkspace* ws, const float* d_centroids, int64_t rows, int64_t d,
                                  double scale, int64_t count, void* stream) {
  cudaStream_t st = start_score_batch(ws, {count, d, rows, 0}, stream);
  if (count == 0 || rows == 0) return;
  dot_f64_kernel<<<dim3(blocks_for(rows), static_cast<unsigned>(count)), 256, 0, st>>>(
      ws->d_q, d_centroids, nullptr, rows, d, scale, static_cast<double*>(ws->d_out));
  finish_score_batch(ws, count * rows * sizeof(double), st);
}

void simhash_collisions_batch_enqueue(ScoreBatchWorkspace* ws, const float* d_w, const uint32_t* d_offsets,
                                      const void* d_ids, int id_bytes, int64_t d, int64_t bits, int64_t tables,
                                      int64_t n, int64_t base, int64_t count, void* stream) {
  if (bits < 1 || bits > 31 || tables < 1 || (id_bytes != 2 && id_bytes != 4))
    throw std::runtime_error("simhash batch: bits 1..31, tables >= 1 and 2- or 4-byte ids");
  cudaStream_t st = start_score_batch(ws, {count, d, n, bits * tables}, stream);
  if (count == 0) return;
  enqueue_simhash(ws->d_q, count, d, d_w, bits, tables, d_offsets, d_ids, id_bytes, n, base, ws->d_s, ws->d_codes,
                  ws->d_count, static_cast<uint16_t*>(ws->d_out), st);
  finish_score_batch(ws, count * n * sizeof(uint16_t), st);
}

}  // namespace kvtool::cuda
