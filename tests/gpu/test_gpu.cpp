// GPU checks: the CUDA kernels (cuda/src/kernels.cu) against the host arithmetic
// (lib/src/scoring.cpp, kvtool/half.h) on inputs generated in-process, then a small benchmark.
// Standalone: needs only the CUDA toolkit and a C++ compiler (tests/gpu/CMakeLists.txt), so it builds
// on the device machine; the main build compiles it too. Without a GPU it prints why and exits 77, which
// tests/CMakeLists.txt declares as SKIP_RETURN_CODE so ctest reports it Skipped, not Passed (with
// KVTOOL_REQUIRE_GPU=1 it fails instead). Writes a results summary to argv[1] when given.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kvtool/cuda_kernels.h"
#include "kvtool/half.h"
#include "kvtool/scoring.h"

using namespace kvtool;
namespace sc = kvtool::scoring;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next_u64() {  // SplitMix64
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
float next_f() { return static_cast<float>(static_cast<double>(next_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

int failures = 0;
std::ostringstream report;
void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
  report << (ok ? "ok   " : "FAIL ") << what << "\n";
  if (!ok) ++failures;
}
double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

void check_conversion() {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> dev(all.size());
  for (int kind : {1, 2}) {
    cuda::convert_to_f32(kind, all.data(), dev.data(), all.size());
    int bad = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      uint32_t h = kind == 1 ? f16_bits_to_f32_bits(all[i]) : static_cast<uint32_t>(all[i]) << 16;
      uint32_t g;
      std::memcpy(&g, &dev[i], 4);
      bad += h != g;
    }
    expect(bad == 0, std::string(kind == 1 ? "f16" : "bf16") + " conversion matches the host on all 65536 values");
  }
}

// PQ: ids identical, scores bit-identical, on random data and on data full of ties.
void check_pq(int64_t m, int64_t bits, int64_t dsub, int64_t n, bool ties) {
  const int64_t k = int64_t{1} << bits;
  std::vector<float> cen(static_cast<size_t>(m * k * dsub));
  for (auto& x : cen) x = ties ? std::round(next_f() * 4) / 4 : next_f();
  const int cb = bits <= 8 ? 1 : 2;
  std::vector<uint8_t> c8(static_cast<size_t>(n * m));
  std::vector<uint16_t> c16(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n * m; ++i) {
    uint64_t v = next_u64() % static_cast<uint64_t>(ties ? 2 : k);
    c8[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    c16[static_cast<size_t>(i)] = static_cast<uint16_t>(v);
  }
  int bad = 0;
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<float> q(static_cast<size_t>(m * dsub));
    for (auto& x : q) x = ties ? std::round(next_f() * 2) / 2 : next_f();
    std::vector<float> lut(static_cast<size_t>(m * k)), host(static_cast<size_t>(n));
    sc::pq_lut(q.data(), cen.data(), m, k, dsub, lut.data());
    if (cb == 1)
      sc::pq_scores_u8(lut.data(), c8.data(), n, m, k, host.data());
    else
      sc::pq_scores_u16(lut.data(), c16.data(), n, m, k, host.data());
    const int64_t top = n / 16;
    std::vector<int64_t> hid = sc::top_k(host.data(), n, top), did;
    std::vector<float> ds, dall;
    cuda::pq_top_k(cen.data(), cb == 1 ? static_cast<const void*>(c8.data()) : c16.data(), cb, m, k, dsub, n, q.data(),
                   top, did, ds, &dall);
    bad += did != hid;
    for (int64_t i = 0; i < n; ++i) bad += std::fabs(dall[i] - host[i]) > 1e-4f * std::max(1.f, std::fabs(host[i]));
    for (size_t i = 0; i < did.size() && i < hid.size(); ++i) bad += ds[i] != host[static_cast<size_t>(hid[i])];
  }
  char what[160];
  std::snprintf(what, sizeof what,
                "PQ LUT scoring + top-k (m=%lld, %lld bits, n=%lld%s) equals the host: ids and scores", (long long)m,
                (long long)bits, (long long)n, ties ? ", many ties" : "");
  expect(bad == 0, what);
}

void check_centroids() {
  const int64_t C = 2000, d = 128;
  std::vector<float> cen(static_cast<size_t>(C * d)), q(static_cast<size_t>(d));
  for (auto& x : cen) x = next_f();
  for (auto& x : q) x = next_f();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < C; i += 3) rows.push_back(i);
  std::vector<double> h(rows.size()), g(rows.size()), hall(C), gall(C);
  const double scale = 1.0 / std::sqrt(128.0);
  sc::dot_scores_f64(q.data(), cen.data(), rows.data(), static_cast<int64_t>(rows.size()), d, scale, h.data());
  cuda::dot_scores_f64(q.data(), cen.data(), C, rows.data(), static_cast<int64_t>(rows.size()), d, scale, g.data());
  sc::dot_scores_f64(q.data(), cen.data(), nullptr, C, d, scale, hall.data());
  cuda::dot_scores_f64(q.data(), cen.data(), C, nullptr, C, d, scale, gall.data());
  expect(h == g && hall == gall,
         "squeeze centroid scoring (f64; every group, then a subset as the fine pass) equals the host bit for bit");
  // clusterkv: float scores and the cluster ranking derived from them.
  std::vector<float> hf(C), gf(C);
  sc::dot_scores(q.data(), cen.data(), C, d, hf.data());
  cuda::dot_scores(q.data(), cen.data(), C, d, gf.data());
  expect(hf == gf && sc::rank_all(hf.data(), C) == sc::rank_all(gf.data(), C),
         "clusterkv centroid scoring (f32) equals the host bit for bit; the cluster ranking agrees");
}

// SimHash tables over random keys as lsh builds them: projections w [d, bits * tables], CSR offsets
// [tables, 2^bits + 1] and ids [tables, n] (row ids from `base`).
struct SimhashTables {
  int64_t d, bits, tables, n, buckets, base;
  std::vector<float> w, keys;
  std::vector<uint32_t> offsets, ids;
  SimhashTables(int64_t d_, int64_t bits_, int64_t tables_, int64_t n_, int64_t base_)
      : d(d_), bits(bits_), tables(tables_), n(n_), buckets(int64_t{1} << bits_), base(base_) {
    w.resize(static_cast<size_t>(d * bits * tables));
    keys.resize(static_cast<size_t>(n * d));
    for (auto& x : w) x = next_f();
    for (auto& x : keys) x = next_f();
    offsets.assign(static_cast<size_t>(tables * (buckets + 1)), 0);
    ids.resize(static_cast<size_t>(tables * n));
    std::vector<uint32_t> kc(static_cast<size_t>(n * tables));
    for (int64_t i = 0; i < n; ++i)
      sc::simhash_codes(keys.data() + i * d, d, w.data(), bits, tables, kc.data() + i * tables);
    for (int64_t t = 0; t < tables; ++t) {
      uint32_t* off = offsets.data() + t * (buckets + 1);
      for (int64_t i = 0; i < n; ++i) ++off[kc[i * tables + t] + 1];
      for (int64_t b = 0; b < buckets; ++b) off[b + 1] += off[b];
      std::vector<uint32_t> fill(off, off + buckets);
      for (int64_t i = 0; i < n; ++i) ids[t * n + fill[kc[i * tables + t]]++] = static_cast<uint32_t>(base + i);
    }
  }
  // A query near a random key.
  void query(float* q) const {
    const float* near = keys.data() + (next_u64() % n) * d;
    for (int64_t j = 0; j < d; ++j) q[j] = near[j] + 0.3f * next_f();
  }
  // The host's collision counts of q.
  std::vector<uint16_t> host_counts(const float* q) const {
    std::vector<uint32_t> codes(static_cast<size_t>(tables));
    std::vector<uint16_t> count(static_cast<size_t>(n), 0);
    sc::simhash_codes(q, d, w.data(), bits, tables, codes.data());
    sc::collision_counts(codes.data(), offsets.data(), ids.data(), tables, buckets, n, base, count.data());
    return count;
  }
};

void check_simhash() {
  const SimhashTables st(64, 8, 16, 5000, 32);
  const int64_t d = st.d, bits = st.bits, tables = st.tables, n = st.n, buckets = st.buckets, base = st.base;
  const std::vector<float>& w = st.w;
  const std::vector<uint32_t>&offsets = st.offsets, &ids = st.ids;
  int bad = 0;
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<float> q(static_cast<size_t>(d));
    st.query(q.data());
    std::vector<uint32_t> hc(tables), gc(tables);
    std::vector<uint16_t> hn(n, 0), gn(n, 0);
    sc::simhash_codes(q.data(), d, w.data(), bits, tables, hc.data());
    sc::collision_counts(hc.data(), offsets.data(), ids.data(), tables, buckets, n, base, hn.data());
    cuda::simhash_collisions(q.data(), d, w.data(), bits, tables, offsets.data(), ids.data(), n, base, gc.data(),
                             gn.data());
    bad += hc != gc || hn != gn;
    // u16 ids resident in device memory, as the pool's device tier holds small lsh parts.
    std::vector<uint16_t> ids16(ids.begin(), ids.end());
    void *dw = cuda::device_alloc(w.size() * 4), *doff = cuda::device_alloc(offsets.size() * 4),
         *did = cuda::device_alloc(ids16.size() * 2);
    cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(doff, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(did, ids16.data(), ids16.size() * 2, cudaMemcpyHostToDevice);
    std::vector<uint32_t> gc16(tables);
    std::vector<uint16_t> gn16(n, 7);
    cuda::simhash_collisions_device(static_cast<const float*>(dw), static_cast<const uint32_t*>(doff), did, 2, d, bits,
                                    tables, n, base, q.data(), gc16.data(), gn16.data());
    bad += hc != gc16 || hn != gn16;
    cuda::device_free(dw);
    cuda::device_free(doff);
    cuda::device_free(did);
  }
  expect(bad == 0, "SimHash codes of the query and collision counts (u32 and device-resident u16 ids) equal the host");
}

// Device memory holding a copy of a host vector (freed with the object).
template <typename T>
struct DeviceCopy {
  T* p = nullptr;
  explicit DeviceCopy(const std::vector<T>& v) {
    p = static_cast<T*>(cuda::device_alloc(v.size() * sizeof(T)));
    cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();  // landed before kernels on a non-blocking stream read it
  }
  ~DeviceCopy() { cuda::device_free(p); }
};

// Runs `enqueue` on `stream` directly and then replayed from a captured CUDA graph, calling
// fill() before and compare() after each run (the inputs change between runs at fixed addresses);
// returns whether the capture worked.
template <typename Fill, typename Enqueue, typename Compare>
bool direct_and_replayed(cudaStream_t stream, Fill&& fill, Enqueue&& enqueue, Compare&& compare) {
  for (int i = 0; i < 2; ++i) {
    fill();
    enqueue();
    cudaStreamSynchronize(stream);
    compare();
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool captured = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (captured) enqueue();
  captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess && captured &&
             cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0) == cudaSuccess;
  for (int replay = 0; captured && replay < 2; ++replay) {
    fill();
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    compare();
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return captured;
}

// Batched scoring primitives (cuda_kernels.h, "Batched scoring primitives"): every query of a batch
// equals the single-query host arithmetic bit for bit, on a caller stream and replayed from a
// graph: clusterkv's f32 and squeeze's f64 centroid products, lsh's collision counts (u16 and u32
// ids, a base offset), in a workspace larger than the batches.
void check_score_batches() {
  const int64_t C = 2000, d = 128, count = 16;  // the workspace's whole height
  cuda::ScoreBatchShape shape{16, 128, 6000, 8 * 16};
  cuda::ScoreBatchWorkspace* ws = cuda::score_batch_workspace_create(shape);
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  float* q = cuda::score_batch_queries(ws);
  std::vector<float> cen(static_cast<size_t>(C * d));
  for (auto& x : cen) x = next_f();
  const DeviceCopy<float> dcen(cen);
  const double scale = 1.0 / std::sqrt(128.0);
  int bad = 0;
  auto fill = [&] {
    for (int64_t i = 0; i < count * d; ++i) q[i] = next_f();
  };
  auto compare_f32 = [&] {
    std::vector<float> host(static_cast<size_t>(C));
    for (int64_t i = 0; i < count; ++i) {
      sc::dot_scores(q + i * d, cen.data(), C, d, host.data());
      bad += !std::equal(host.begin(), host.end(), static_cast<const float*>(cuda::score_batch_results(ws)) + i * C);
    }
  };
  auto compare_f64 = [&] {
    std::vector<double> host(static_cast<size_t>(C));
    for (int64_t i = 0; i < count; ++i) {
      sc::dot_scores_f64(q + i * d, cen.data(), nullptr, C, d, scale, host.data());
      bad += !std::equal(host.begin(), host.end(), static_cast<const double*>(cuda::score_batch_results(ws)) + i * C);
    }
  };
  bool captured = direct_and_replayed(
      stream, fill, [&] { cuda::dot_scores_batch_enqueue(ws, dcen.p, C, d, count, stream); }, compare_f32);
  captured &= direct_and_replayed(
      stream, fill, [&] { cuda::dot_scores_f64_batch_enqueue(ws, dcen.p, C, d, scale, count, stream); }, compare_f64);
  expect(bad == 0 && captured,
         "centroid scoring batches of 16 queries (clusterkv f32, squeeze f64) equal the host bit for bit, on a stream "
         "and replayed from a CUDA graph");
  bad = 0;
  const SimhashTables st(64, 8, 16, 5000, 32);
  const std::vector<uint16_t> ids16(st.ids.begin(), st.ids.end());
  const DeviceCopy<float> dw(st.w);
  const DeviceCopy<uint32_t> doff(st.offsets), did32(st.ids);
  const DeviceCopy<uint16_t> did16(ids16);
  const int64_t hashed = 7;  // fewer queries than the workspace holds
  for (int id_bytes : {2, 4}) {
    auto fill_near = [&] {
      for (int64_t i = 0; i < hashed; ++i) st.query(q + i * st.d);
    };
    auto compare = [&] {
      const auto* got = static_cast<const uint16_t*>(cuda::score_batch_results(ws));
      for (int64_t i = 0; i < hashed; ++i) {
        const std::vector<uint16_t> want = st.host_counts(q + i * st.d);
        bad += !std::equal(want.begin(), want.end(), got + i * st.n);
      }
    };
    const void* ids = id_bytes == 2 ? static_cast<const void*>(did16.p) : static_cast<const void*>(did32.p);
    captured &= direct_and_replayed(
        stream, fill_near,
        [&] {
          cuda::simhash_collisions_batch_enqueue(ws, dw.p, doff.p, ids, id_bytes, st.d, st.bits, st.tables, st.n,
                                                 st.base, hashed, stream);
        },
        compare);
  }
  expect(bad == 0 && captured,
         "SimHash collision batches of 7 queries (u16 and u32 ids) equal the host, on a stream and replayed from a "
         "CUDA graph");
  cudaStreamDestroy(stream);
  cuda::score_batch_workspace_destroy(ws);
}

// A part's centroids and codes in device memory (freed with the object).
struct DevicePart {
  float* cen = nullptr;
  void* codes = nullptr;
  DevicePart(const std::vector<float>& c, const void* k, size_t code_bytes) {
    cen = static_cast<float*>(cuda::device_alloc(c.size() * 4));
    codes = cuda::device_alloc(code_bytes);
    cudaMemcpy(cen, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(codes, k, code_bytes, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();  // landed before kernels on a non-blocking stream read it
  }
  ~DevicePart() {
    cuda::device_free(cen);
    cuda::device_free(codes);
  }
};

// Batched PQ (cuda_kernels.h, "Batched PQ queries"): every query of a batch equals the host's
// pq_lut + pq_scores + top_k (ids and scores bit for bit), on a caller stream, and again when the
// batch is captured in a CUDA graph and replayed with new queries written to the same addresses.
// roomy: the workspace is larger than the batch (the pool's case), and a second, small workspace is
// created after it and kept alive (the kernel's shared-memory limit is per process, not per workspace).
void check_pq_batch(int64_t m, int64_t bits, int64_t dsub, int64_t n, int64_t count, int64_t top, bool ties,
                    bool roomy = false) {
  const int64_t k = int64_t{1} << bits, d = m * dsub;
  const int cb = bits <= 8 ? 1 : 2;
  std::vector<float> cen(static_cast<size_t>(m * k * dsub));
  for (auto& x : cen) x = ties ? std::round(next_f() * 4) / 4 : next_f();
  std::vector<uint8_t> c8(static_cast<size_t>(n * m));
  std::vector<uint16_t> c16(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n * m; ++i) {
    const uint64_t v = next_u64() % static_cast<uint64_t>(ties ? 2 : k);
    c8[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    c16[static_cast<size_t>(i)] = static_cast<uint16_t>(v);
  }
  DevicePart part(cen, cb == 1 ? static_cast<const void*>(c8.data()) : c16.data(), static_cast<size_t>(n * m * cb));
  cuda::PqBatchShape shape;
  shape.max_queries = count;
  shape.max_rows = n;
  shape.max_subspaces = m;
  shape.max_centroids = k;
  shape.max_dim = d;
  shape.max_top = std::min(top, n);
  if (roomy) {
    shape.max_queries += 3;
    shape.max_rows += 100;
    shape.max_dim += 16;
    shape.max_top = std::min<int64_t>(cuda::kMaxBatchTop, shape.max_top + 5);
  }
  cuda::PqBatchWorkspace* ws = cuda::pq_batch_workspace_create(shape);
  const cuda::PqBatchShape small{1, 16, 1, 2, 8, 16};
  cuda::PqBatchWorkspace* other = roomy ? cuda::pq_batch_workspace_create(small) : nullptr;
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const int64_t b = std::min(top, n);
  int bad = 0;
  float* q = cuda::pq_batch_queries(ws);
  auto fill = [&] {
    for (int64_t i = 0; i < count * d; ++i) q[i] = ties ? std::round(next_f() * 2) / 2 : next_f();
  };
  auto compare = [&] {
    for (int64_t qi = 0; qi < count; ++qi) {
      std::vector<float> lut(static_cast<size_t>(m * k)), host(static_cast<size_t>(n));
      sc::pq_lut(q + qi * d, cen.data(), m, k, dsub, lut.data());
      if (cb == 1)
        sc::pq_scores_u8(lut.data(), c8.data(), n, m, k, host.data());
      else
        sc::pq_scores_u16(lut.data(), c16.data(), n, m, k, host.data());
      const std::vector<int64_t> want = sc::top_k(host.data(), n, b);
      for (int64_t r = 0; r < b; ++r) {
        bad += cuda::pq_batch_ids(ws)[qi * b + r] != want[static_cast<size_t>(r)];
        bad += cuda::pq_batch_scores(ws)[qi * b + r] != host[static_cast<size_t>(want[static_cast<size_t>(r)])];
      }
    }
  };
  auto enqueue = [&] { cuda::pq_top_k_batch_enqueue(ws, part.cen, part.codes, cb, m, k, dsub, n, count, top, stream); };
  const bool captured = direct_and_replayed(stream, fill, enqueue, compare);  // the same workspace twice, then a graph
  cudaStreamDestroy(stream);
  cuda::pq_batch_workspace_destroy(ws);
  cuda::pq_batch_workspace_destroy(other);
  char what[200];
  std::snprintf(what, sizeof what,
                "PQ batch of %lld queries (m=%lld, %lld bits, n=%lld, top %lld%s) equals the host, on a stream and "
                "replayed from a CUDA graph",
                (long long)count, (long long)m, (long long)bits, (long long)n, (long long)top,
                ties ? ", many ties" : "");
  expect(bad == 0 && captured, what);
}

// A decode step's PQ selection kept on the device (pq_top_k_batch_enqueue_on_device, what
// Lease::plan_device_step enqueues): queries read from device memory through a member list (out of
// order, some rows unused), answers written to device memory at each member's row with a stride and
// a row base; equal to the host's, directly and replayed from a graph.
void check_pq_on_device() {
  const int64_t m = 2, k = 64, dsub = 64, d = 128, n = 32768, count = 8, rows = 11, top = 3277;  // 6-bit codes
  const int64_t stride = top + 5, base = 100;
  std::vector<float> cen(static_cast<size_t>(m * k * dsub));
  for (auto& x : cen) x = next_f();
  std::vector<uint8_t> codes(static_cast<size_t>(n * m));
  for (auto& x : codes) x = static_cast<uint8_t>(next_u64() % k);
  DevicePart part(cen, codes.data(), codes.size());
  const std::vector<int64_t> members = {9, 7, 6, 4, 3, 2, 1, 0};  // rows 5, 8 and 10 belong to no one
  const DeviceCopy<int64_t> dmembers(members);
  std::vector<float> q(static_cast<size_t>(rows * d));
  const DeviceCopy<float> dq(q);
  const DeviceCopy<int64_t> dids(std::vector<int64_t>(static_cast<size_t>(rows * stride), -1));
  const DeviceCopy<float> dscores(std::vector<float>(static_cast<size_t>(rows * stride), 0.f));
  cuda::PqBatchWorkspace* ws = cuda::pq_batch_workspace_create({count, n, m, k, d, top});
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  int bad = 0;
  auto fill = [&] {
    for (auto& x : q) x = next_f();
    cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();  // landed before the non-blocking stream's kernels read it
  };
  auto compare = [&] {
    std::vector<int64_t> ids(static_cast<size_t>(rows * stride));
    std::vector<float> scores(ids.size());
    cudaMemcpy(ids.data(), dids.p, ids.size() * 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(scores.data(), dscores.p, scores.size() * 4, cudaMemcpyDeviceToHost);
    for (int64_t row : members) {
      std::vector<float> lut(static_cast<size_t>(m * k)), host(static_cast<size_t>(n));
      sc::pq_lut(q.data() + row * d, cen.data(), m, k, dsub, lut.data());
      sc::pq_scores_u8(lut.data(), codes.data(), n, m, k, host.data());
      const std::vector<int64_t> want = sc::top_k(host.data(), n, top);
      for (int64_t r = 0; r < top; ++r) {
        bad += ids[row * stride + r] != base + want[static_cast<size_t>(r)];
        bad += scores[row * stride + r] != host[static_cast<size_t>(want[static_cast<size_t>(r)])];
      }
    }
    for (int64_t row = 0; row < rows; ++row)  // nothing written outside the members' first `top` entries
      for (int64_t r = std::find(members.begin(), members.end(), row) != members.end() ? top : 0; r < stride; ++r)
        bad += ids[row * stride + r] != -1;
  };
  const bool captured = direct_and_replayed(
      stream, fill,
      [&] {
        cuda::pq_top_k_batch_enqueue_on_device(ws, part.cen, part.codes, 1, m, k, dsub, n, count, top, dq.p,
                                               {dmembers.p, base, dids.p, dscores.p, stride}, stream);
      },
      compare);
  cudaStreamDestroy(stream);
  cuda::pq_batch_workspace_destroy(ws);
  expect(bad == 0 && captured,
         "PQ batch kept on the device (queries by member list, answers placed by member, stride and row base) equals "
         "the host, on a stream and replayed from a CUDA graph");
}

// p50 / p99 of 200 runs (after 20 warm-ups) of `enqueue` on `stream` and synchronized, and of the
// same captured in a CUDA graph and replayed, as text.
template <typename Enqueue>
std::string batch_latency(cudaStream_t stream, Enqueue&& enqueue) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  enqueue();
  cudaStreamEndCapture(stream, &graph);
  cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0);
  std::vector<double> direct, replayed;
  for (int i = 0; i < 220; ++i) {
    auto t0 = Clock::now();
    enqueue();
    cudaStreamSynchronize(stream);
    if (i >= 20) direct.push_back(secs(t0));
    t0 = Clock::now();
    cudaGraphLaunch(exec, stream);
    cudaStreamSynchronize(stream);
    if (i >= 20) replayed.push_back(secs(t0));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(direct.begin(), direct.end());
  std::sort(replayed.begin(), replayed.end());
  char line[160];
  std::snprintf(line, sizeof line,
                "p50 %.3f ms p99 %.3f ms on a stream, p50 %.3f ms p99 %.3f ms replayed from a CUDA graph",
                direct[direct.size() / 2] * 1e3, direct[direct.size() * 99 / 100] * 1e3,
                replayed[replayed.size() / 2] * 1e3, replayed[replayed.size() * 99 / 100] * 1e3);
  return line;
}

// Per-batch latency of a decode step's layer: 32 queries against one 32K-row part (PQ selection;
// clusterkv's centroid scores at 80 rows per cluster; lsh's collision counts at K=10, L=150).
void bench_batches(std::ostringstream& out) {
  const int64_t n = 32768, count = 32;
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  for (auto [m, bits, top] : {std::tuple<int64_t, int64_t, int64_t>{2, 6, 3277}, {16, 8, 2048}, {2, 6, 8192}}) {
    const int64_t k = int64_t{1} << bits, dsub = 128 / m;
    std::vector<float> cen(static_cast<size_t>(m * k * dsub));
    std::vector<uint8_t> codes(static_cast<size_t>(n * m));
    for (auto& x : cen) x = next_f();
    for (auto& x : codes) x = static_cast<uint8_t>(next_u64() % static_cast<uint64_t>(k));
    DevicePart part(cen, codes.data(), codes.size());
    const cuda::PqBatchShape shape{count, n, m, k, 128, top};
    cuda::PqBatchWorkspace* ws = cuda::pq_batch_workspace_create(shape);
    for (int64_t i = 0; i < count * 128; ++i) cuda::pq_batch_queries(ws)[i] = next_f();
    out << "PQ batch of " << count << " queries, top-" << top << " of " << n << " rows (m=" << m << ", " << bits
        << " bits): per batch "
        << batch_latency(
               stream,
               [&] { cuda::pq_top_k_batch_enqueue(ws, part.cen, part.codes, 1, m, k, dsub, n, count, top, stream); })
        << "\n";
    cuda::pq_batch_workspace_destroy(ws);
  }
  const SimhashTables st(128, 10, 150, n, 0);
  const int64_t clusters = n / 80;
  std::vector<float> cen(static_cast<size_t>(clusters * 128));
  for (auto& x : cen) x = next_f();
  const DeviceCopy<float> dcen(cen), dw(st.w);
  const DeviceCopy<uint32_t> doff(st.offsets), dids(st.ids);
  cuda::ScoreBatchWorkspace* ws = cuda::score_batch_workspace_create({count, 128, n, 10 * 150});
  for (int64_t i = 0; i < count; ++i) st.query(cuda::score_batch_queries(ws) + i * 128);
  out << "clusterkv batch of " << count << " queries, " << clusters << " centroid scores each: per batch "
      << batch_latency(stream, [&] { cuda::dot_scores_batch_enqueue(ws, dcen.p, clusters, 128, count, stream); })
      << "\n";
  out << "lsh batch of " << count << " queries, collision counts of " << n << " rows (K=10, L=150): per batch "
      << batch_latency(stream,
                       [&] {
                         cuda::simhash_collisions_batch_enqueue(ws, dw.p, doff.p, dids.p, 4, 128, 10, 150, n, 0, count,
                                                                stream);
                       })
      << "\n";
  cuda::score_batch_workspace_destroy(ws);
  cudaStreamDestroy(stream);
}

void bench(std::ostringstream& out) {
  // Device-tier copy path (pinned staging, async H2D on a stream + event, as the pool publishes)
  // against a plain pinned cudaMemcpy of the same bytes, same run.
  const size_t bytes = size_t{512} << 20;
  void* h = cuda::pinned_alloc(bytes);
  void* dbuf = cuda::device_alloc(bytes);
  std::memset(h, 1, bytes);
  double best_async = 1e9, best_plain = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    auto* c = cuda::copy_async(dbuf, h, bytes);
    cuda::copy_wait(c);
    best_async = std::min(best_async, secs(t0));
    cuda::copy_release(c);
    t0 = Clock::now();
    cudaMemcpy(dbuf, h, bytes, cudaMemcpyHostToDevice);
    best_plain = std::min(best_plain, secs(t0));
  }
  double gb = static_cast<double>(bytes) / 1e9;
  char line[256];
  std::snprintf(line, sizeof line,
                "H2D 512 MiB: pool copy path %.1f GB/s, plain pinned cudaMemcpy %.1f GB/s (ratio %.2f)\n",
                gb / best_async, gb / best_plain, best_plain / best_async);
  out << line;
  cuda::pinned_free(h);
  cuda::device_free(dbuf);
  // PQ scoring + top-k on 32768 resident rows (m=16, 8 bits, d=128), vs the host path.
  const int64_t m = 16, k = 256, dsub = 8, n = 32768, top = 2048, nq = 200;
  std::vector<float> cen(static_cast<size_t>(m * k * dsub)), q(static_cast<size_t>(m * dsub));
  std::vector<uint8_t> codes(static_cast<size_t>(n * m));
  for (auto& x : cen) x = next_f();
  for (auto& x : codes) x = static_cast<uint8_t>(next_u64());
  for (auto& x : q) x = next_f();
  float* dc = static_cast<float*>(cuda::device_alloc(cen.size() * 4));
  void* dk = cuda::device_alloc(codes.size());
  cudaMemcpy(dc, cen.data(), cen.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, codes.data(), codes.size(), cudaMemcpyHostToDevice);
  std::vector<int64_t> ids;
  std::vector<float> s;
  cuda::pq_top_k_device(dc, dk, 1, m, k, dsub, n, q.data(), top, ids, s);  // warm-up
  std::vector<double> lat;
  for (int i = 0; i < nq; ++i) {
    auto t0 = Clock::now();
    cuda::pq_top_k_device(dc, dk, 1, m, k, dsub, n, q.data(), top, ids, s);
    lat.push_back(secs(t0));
  }
  std::sort(lat.begin(), lat.end());
  auto t0 = Clock::now();
  std::vector<float> lut(static_cast<size_t>(m * k)), score(static_cast<size_t>(n));
  for (int i = 0; i < 20; ++i) {
    sc::pq_lut(q.data(), cen.data(), m, k, dsub, lut.data());
    sc::pq_scores_u8(lut.data(), codes.data(), n, m, k, score.data());
    sc::top_k(score.data(), n, top);
  }
  double host = secs(t0) / 20;
  std::snprintf(
      line, sizeof line,
      "PQ top-%lld of %lld rows (m=16, 8 bits): device p50 %.3f ms p99 %.3f ms (%.1f Mrows/s incl. launch+copy-back); "
      "host %.3f ms (%.1f Mrows/s)\n",
      (long long)top, (long long)n, lat[lat.size() / 2] * 1e3, lat[lat.size() * 99 / 100] * 1e3,
      n / lat[lat.size() / 2] / 1e6, host * 1e3, n / host / 1e6);
  out << line;
  cuda::device_free(dc);
  cuda::device_free(dk);
}

}  // namespace

int main(int argc, char** argv) {
  int n = cuda::device_count();
  const char* req = std::getenv("KVTOOL_REQUIRE_GPU");
  if (n == 0) {
    bool require = req && std::string(req) == "1";
    std::printf("SKIPPED: no usable CUDA device; the kernels were not compared with the host%s\n",
                require ? " (KVTOOL_REQUIRE_GPU=1: failing)" : "");
    return require ? 1 : 77;  // 77: ctest's SKIP_RETURN_CODE
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  report << "GPU: " << prop.name << "\n";
  try {
    check_conversion();
    check_pq(8, 8, 8, 32768, false);
    check_pq(16, 4, 8, 20000, true);
    check_pq(4, 10, 16, 5000, false);
    check_pq_batch(2, 6, 64, 32768, 32, 3277, false);
    check_pq_batch(16, 8, 8, 32768, 8, 8192, false);  // the largest selection
    check_pq_batch(4, 10, 16, 5000, 5, 777, false);   // u16 codes, top not a power of two
    check_pq_batch(16, 4, 8, 20000, 4, 2000, true);
    check_pq_batch(2, 6, 64, 100, 3, 2048, false);          // top above the rows: every row, ranked
    check_pq_batch(2, 6, 64, 3000, 4, 1, false);            // top 1: no sort passes
    check_pq_batch(16, 8, 8, 32768, 6, 8192, false, true);  // a larger workspace; another alive
    check_centroids();
    check_simhash();
    check_score_batches();
    check_pq_on_device();
    if (!std::getenv("KVTOOL_GPU_NO_BENCH")) {
      bench(report);
      bench_batches(report);
    }
  } catch (const std::exception& e) {
    expect(false, std::string("exception: ") + e.what());
  }
  std::printf("%s", report.str().c_str());
  if (argc > 1) std::ofstream(argv[1]) << report.str();
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
