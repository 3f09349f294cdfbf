// The GGUF forward pass (kvtool/gguf_model.h): llama.cpp's graph for llama and qwen2 (src/models/
// llama.cpp and qwen2.cpp at the version formats/gguf.md names) on float32 weights. A batch of rows
// goes through each layer as matrix products on BLAS (sgemm_); attention of a batch is one product
// per head against the cached rows, causal, in blocks of queries. One position with the attention
// hook (forward) attends row by row, so that dense and "every row selected" give the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "impl/gguf_weights.h"
#include "kvtool/blas.h"
#include "kvtool/error.h"
#include "kvtool/half.h"

namespace kvtool {

using impl::GgufScratch;

namespace {

// ggml-cpu's quantize_row_q8_0 on x86 (arch/x86/quants.c, the path CI's llama.cpp runs), then
// dequantization: blocks of 32, codes round-half-even(x * 127/amax), scale amax/127 kept as f16.
void round_q8_0(float* x, int64_t count) {
  for (int64_t b = 0; b + 32 <= count; b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float id = amax != 0 ? 127.f / amax : 0.0f, dh = f16_to_f32(f32_to_f16(amax / 127.f));
    for (int j = 0; j < 32; ++j) x[b + j] = std::nearbyint(x[b + j] * id) * dh;
  }
}

// quantize_row_q8_K_ref then dequantization: blocks of 256, scale -max/127 (the value of largest
// magnitude, signed) kept as float, codes at most 127.
void round_q8_k(float* x, int64_t count) {
  for (int64_t b = 0; b + 256 <= count; b += 256) {
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[b + j]) > amax) amax = std::fabs(x[b + j]), max = x[b + j];
    if (amax == 0) continue;
    const float iscale = -127.f / max, d = 1 / iscale;
    for (int j = 0; j < 256; ++j) {
      const float v = iscale * x[b + j] + 12582912.f;  // nearest_int
      int32_t bits;
      std::memcpy(&bits, &v, 4);
      x[b + j] = static_cast<float>(std::min(127, (bits & 0x007fffff) - 0x00400000)) * d;
    }
  }
}

// The input of a product with a matrix of ggml `type` as llama.cpp's CPU kernels see it
// (GgufDecoderOptions::llama_cpp_activations); `in` is a row's length.
const float* llama_cpp_input(const float* x, int n, int in, uint32_t type, std::vector<float>& buf) {
  // q4_0, q5_0, q8_0 take q8_0 blocks; q4_1 and q5_1 take q8_1 blocks, whose codes and scale are
  // q8_0's (the block's sum, which q8_1 adds, enters only through the weights' minimum).
  // f16 weights take f16 inputs (ggml-cpu's vec_dot_type of F16; its tinyBLAS F16 kernels on x86
  // need an F16 B as well), which some of llama.cpp's CPU builds measurably do and others did not
  // (docs/models.md): the gguf forward test accepts either.
  const bool q8_0 = type == 2 || type == 3 || type == 6 || type == 7 || type == 8, q8_k = type == 12 || type == 14,
             bf16 = type == 30, f16 = type == 1;
  if (!q8_0 && !q8_k && !bf16 && !f16) return x;
  buf.assign(x, x + static_cast<size_t>(n) * in);
  for (int i = 0; i < n; ++i) {
    float* row = buf.data() + static_cast<size_t>(i) * in;
    if (q8_0) round_q8_0(row, in);
    if (q8_k) round_q8_k(row, in);
    if (bf16)
      for (int j = 0; j < in; ++j) row[j] = bf16_to_f32(f32_to_bf16(row[j]));
    if (f16)
      for (int j = 0; j < in; ++j) row[j] = f16_to_f32(f32_to_f16(row[j]));
  }
  return buf.data();
}

// Holds the process's BLAS at one thread while a forward pass runs, then restores its setting: the
// pass runs its products on its own threads, in blocks fixed whatever the thread count (linear).
class BlasOneThread {
 public:
  BlasOneThread() : before_(blas_threads()) {
    if (before_ > 1) set_blas_threads(1);
  }
  ~BlasOneThread() {
    if (before_ > 1) set_blas_threads(before_);
  }
  BlasOneThread(const BlasOneThread&) = delete;
  BlasOneThread& operator=(const BlasOneThread&) = delete;

 private:
  int before_;
};

// Runs f(0..count-1) over up to `threads` threads.
template <typename F>
void parallel_for(int count, int threads, F f) {
  threads = std::max(1, std::min(threads, count));
  if (threads == 1) {
    for (int i = 0; i < count; ++i) f(i);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = t; i < count; i += threads) f(i);
    });
  for (auto& th : pool) th.join();
}

// y[n][out] = x[n][in] · W[out][in]^T (+ bias[out]); with `llama_cpp`, x rounded as llama.cpp does.
// Blocks of kOutRows outputs, each one single-threaded sgemm (the forward pass holds the BLAS at one
// thread, BlasOneThread), spread over `threads`: the blocks are the same whatever the thread count
// or the process's BLAS setting, so the sums are too. OpenBLAS's own threads split a product
// otherwise by their count, and on some CPUs (an AVX2-only EPYC: Zen kernels) that moved the last
// bits, so a report depended on what the process had set before (docs/models.md).
void linear(const float* x, int n, int in, const impl::GgufMatrix& w, int out, float* y, bool llama_cpp, int threads,
            const std::vector<float>& bias = {}) {
  constexpr int kOutRows = 128;
  constexpr double kParallelWork = 1 << 22;  // multiply-adds below which threads cost more than they save
  std::vector<float> buf;
  if (llama_cpp) x = llama_cpp_input(x, n, in, w.type, buf);
  const int blocks = (out + kOutRows - 1) / kOutRows;
  const bool parallel = double(out) * n * in >= kParallelWork;
  parallel_for(blocks, parallel ? threads : 1, [&](int b) {
    const float one = 1.f, zero = 0.f;
    const int o0 = b * kOutRows, rows = std::min(kOutRows, out - o0);
    sgemm_("T", "N", &rows, &n, &in, &one, w.w.data() + static_cast<size_t>(o0) * in, &in, x, &in, &zero, y + o0, &out);
  });
  if (!bias.empty())
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < out; ++j) y[static_cast<size_t>(i) * out + j] += bias[static_cast<size_t>(j)];
}

// ggml_rms_norm (sum of squares in double, scale 1/sqrtf(mean + eps)) then ggml_mul by the weight.
void rms_norm(const float* x, int n, int d, const std::vector<float>& w, float eps, float* y) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<size_t>(i) * d;
    double sum = 0;
    for (int j = 0; j < d; ++j) sum += static_cast<double>(xi[j]) * xi[j];
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / d) + eps);
    float* yi = y + static_cast<size_t>(i) * d;
    for (int j = 0; j < d; ++j) yi[j] = (xi[j] * scale) * w[static_cast<size_t>(j)];
  }
}

// ggml_rope_ext on one head vector at position p: angles theta_i = p * base^(-2i/n_dims), the power
// taken by repeated multiplication as ggml_rope_cache_init does, divided by the frequency factor,
// times freq_scale; NORM rotates (2i, 2i + 1), NEOX (i, i + n_dims/2); channels past n_dims stay.
void rope(float* v, int32_t p, const GgufModelConfig& c, const std::vector<float>& freq_factors) {
  const int nd = c.rope_dims;
  const float theta_scale = std::pow(c.rope_theta, -2.0f / static_cast<float>(nd));
  float theta = static_cast<float>(p);
  for (int i0 = 0; i0 < nd; i0 += 2) {
    const float ff = freq_factors.empty() ? 1.0f : freq_factors[static_cast<size_t>(i0 / 2)];
    const float angle = c.rope_freq_scale * (theta / ff);
    const float cs = std::cos(angle), sn = std::sin(angle);
    const int a = c.rope_neox ? i0 / 2 : i0, b = c.rope_neox ? i0 / 2 + nd / 2 : i0 + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * cs - x1 * sn;
    v[b] = x0 * sn + x1 * cs;
    theta *= theta_scale;
  }
}

// Softmax of one row of scores in place (ggml_soft_max: the maximum subtracted, sum in double).
void softmax(float* s, int n) {
  float mx = -INFINITY;
  for (int j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  double sum = 0;
  for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < n; ++j) s[j] *= inv;
}

}  // namespace

namespace impl {

// Dense causal attention of the batch's queries (rows pos0 .. pos0 + n - 1) over the cached rows:
// per head, scores of a block of queries against rows [0, last position + 1) by sgemm, masked,
// softmax, then the weighted sum of V by sgemm.
void attend_batch(const GgufModelConfig& c, const std::vector<float>& kc, const std::vector<float>& vc, int32_t n,
                  int32_t pos0, GgufScratch& s, int threads) {
  const int hd = c.head_dim, qd = c.heads * hd, kvd = c.kv_heads * hd, group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  constexpr int kBlock = 256;
  const int blocks = (n + kBlock - 1) / kBlock;
  parallel_for(c.heads * blocks, threads, [&](int job) {
    const int h = job / blocks, b0 = (job % blocks) * kBlock, bn = std::min(kBlock, n - b0);
    const int rows = pos0 + b0 + bn;  // causal: the block's last query sees rows [0, rows)
    std::vector<float> sc(static_cast<size_t>(bn) * rows);
    const float* q = s.q.data() + static_cast<size_t>(b0) * qd + h * hd;
    const float* k = kc.data() + (h / group) * hd;
    const float zero = 0.f, one = 1.f;
    int m = rows, nn = bn, kk = hd, lk = kvd, lq = qd;
    sgemm_("T", "N", &m, &nn, &kk, &scale, k, &lk, q, &lq, &zero, sc.data(), &m);
    for (int i = 0; i < bn; ++i) {
      const int visible = pos0 + b0 + i + 1;
      float* row = sc.data() + static_cast<size_t>(i) * rows;
      std::fill(row + visible, row + rows, 0.f);
      softmax(row, visible);
    }
    const float* v = vc.data() + (h / group) * hd;
    float* o = s.o.data() + static_cast<size_t>(b0) * qd + h * hd;
    int mo = hd, ko = rows, lv = kvd;
    sgemm_("N", "N", &mo, &nn, &ko, &one, v, &lv, sc.data(), &m, &zero, o, &lq);
  });
}

// One query row at `pos` attending head by head to all rows [0, pos] or to those `select` chooses,
// as Llama2cModel::attend does.
void attend_one(const GgufModelConfig& c, const std::vector<float>& kc, const std::vector<float>& vc, int32_t layer,
                int32_t pos, GgufScratch& s, const AttentionSelect& select) {
  const int hd = c.head_dim, kvd = c.kv_heads * hd, group = c.heads / c.kv_heads;
  AttentionRows rows;
  std::vector<float> att;
  for (int h = 0; h < c.heads; ++h) {
    const float* qh = s.q.data() + h * hd;
    rows.extra_logit.clear(), rows.extra_value.clear();
    const bool sparse = select && select(layer, h, s.q.data(), pos, rows);
    const int n = sparse ? static_cast<int>(rows.rows.size()) : pos + 1;
    const int e = sparse ? extra_count(rows, hd) : 0;
    KVT_CHECK(n > 0 && (!sparse || rows.log_weight.size() == rows.rows.size()), INTERNAL,
              "sparse attention needs at least one row, each with a weight");
    att.resize(static_cast<size_t>(n + e));
    const int kvh = h / group;
    for (int j = 0; j < n; ++j) {
      const int t = sparse ? rows.rows[static_cast<size_t>(j)] : j;
      KVT_CHECK(t >= 0 && t <= pos, INTERNAL, "sparse attention row " << t << " outside 0.." << pos);
      const float* kt = kc.data() + static_cast<size_t>(t) * kvd + kvh * hd;
      float sc = 0;
      for (int i = 0; i < hd; ++i) sc += qh[i] * kt[i];
      att[static_cast<size_t>(j)] = sc / std::sqrt(static_cast<float>(hd));
      if (sparse) att[static_cast<size_t>(j)] += rows.log_weight[static_cast<size_t>(j)];
    }
    std::copy(rows.extra_logit.begin(), rows.extra_logit.begin() + e, att.begin() + n);
    softmax(att.data(), n + e);
    float* out = s.o.data() + h * hd;
    std::fill(out, out + hd, 0.f);
    for (int j = 0; j < n; ++j) {
      const int t = sparse ? rows.rows[static_cast<size_t>(j)] : j;
      const float* vt = vc.data() + static_cast<size_t>(t) * kvd + kvh * hd;
      for (int i = 0; i < hd; ++i) out[i] += att[static_cast<size_t>(j)] * vt[i];
    }
    for (int j = 0; j < e; ++j) {
      const float* vt = rows.extra_value.data() + static_cast<size_t>(j) * hd;
      for (int i = 0; i < hd; ++i) out[i] += att[static_cast<size_t>(n + j)] * vt[i];
    }
  }
}

}  // namespace impl

void GgufDecoder::layer(int32_t l, int32_t n, int32_t pos0, GgufScratch& s, const AttentionSelect& select) {
  const GgufModelConfig& c = cfg_;
  const impl::GgufLayer& w = w_->layers[static_cast<size_t>(l)];
  const int D = c.dim, hd = c.head_dim, qd = c.heads * hd, kvd = c.kv_heads * hd, F = c.hidden;
  rms_norm(s.x.data(), n, D, w.attn_norm, c.rms_eps, s.xn.data());
  const bool lc = opt_.llama_cpp_activations;
  const int t = opt_.threads;
  linear(s.xn.data(), n, D, w.wq, qd, s.q.data(), lc, t, w.bq);
  linear(s.xn.data(), n, D, w.wk, kvd, s.k.data(), lc, t, w.bk);
  linear(s.xn.data(), n, D, w.wv, kvd, s.v.data(), lc, t, w.bv);
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < c.heads; ++h)
      rope(s.q.data() + static_cast<size_t>(i) * qd + h * hd, pos0 + i, c, w_->rope_freqs);
    for (int h = 0; h < c.kv_heads; ++h)
      rope(s.k.data() + static_cast<size_t>(i) * kvd + h * hd, pos0 + i, c, w_->rope_freqs);
  }
  auto& kc = cache_.k[static_cast<size_t>(l)];
  auto& vc = cache_.v[static_cast<size_t>(l)];
  kc.resize(static_cast<size_t>(pos0) * kvd);
  vc.resize(static_cast<size_t>(pos0) * kvd);
  kc.insert(kc.end(), s.k.begin(), s.k.begin() + static_cast<ptrdiff_t>(n) * kvd);
  vc.insert(vc.end(), s.v.begin(), s.v.begin() + static_cast<ptrdiff_t>(n) * kvd);
  auto out = [&](float* dst, const std::vector<float>& src, int width) {
    if (dst) std::copy_n(src.begin(), static_cast<size_t>(n) * width, dst + static_cast<size_t>(l) * n * width);
  };
  out(s.q_out, s.q, qd);
  out(s.k_out, s.k, kvd);
  out(s.v_out, s.v, kvd);
  if (n == 1)
    impl::attend_one(c, kc, vc, l, pos0, s, select);
  else
    impl::attend_batch(c, kc, vc, n, pos0, s, opt_.threads);
  linear(s.o.data(), n, qd, w.wo, D, s.xn.data(), lc, t);
  for (size_t i = 0; i < static_cast<size_t>(n) * D; ++i) s.x[i] += s.xn[i];
  rms_norm(s.x.data(), n, D, w.ffn_norm, c.rms_eps, s.xn.data());
  linear(s.xn.data(), n, D, w.gate, F, s.gate.data(), lc, t);
  linear(s.xn.data(), n, D, w.up, F, s.up.data(), lc, t);
  for (size_t i = 0; i < static_cast<size_t>(n) * F; ++i) {
    const float g = s.gate[i];
    s.gate[i] = g / (1.0f + std::exp(-g)) * s.up[i];  // ggml_swiglu: silu(gate) * up
  }
  linear(s.gate.data(), n, F, w.down, D, s.xn.data(), lc, t);
  for (size_t i = 0; i < static_cast<size_t>(n) * D; ++i) s.x[i] += s.xn[i];
}

void GgufDecoder::prefill(const int32_t* tokens, int32_t n, int32_t pos0, float* q, float* k, float* v,
                          std::vector<float>& last_logits) {
  run(tokens, n, pos0, q, k, v, last_logits, nullptr);
}

void GgufDecoder::run(const int32_t* tokens, int32_t n, int32_t pos0, float* q, float* k, float* v,
                      std::vector<float>& last_logits, const AttentionSelect& select) {
  const GgufModelConfig& c = cfg_;
  KVT_CHECK(n >= 1 && pos0 == cache_.rows, USAGE,
            "prefill of " << n << " rows at position " << pos0 << " after " << cache_.rows << " cached rows");
  KVT_CHECK(int64_t(pos0) + n <= c.context, USAGE,
            "positions up to " << int64_t(pos0) + n << " exceed the model's context length " << c.context);
  const BlasOneThread one_blas_thread;
  const size_t D = static_cast<size_t>(c.dim);
  GgufScratch s;
  s.n = n;
  s.x.resize(n * D);
  for (int32_t i = 0; i < n; ++i) {
    KVT_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab, USAGE,
              "token " << tokens[i] << " is outside the model's vocabulary of " << c.vocab);
    std::copy_n(w_->embed.w.begin() + static_cast<ptrdiff_t>(tokens[i]) * c.dim, D, s.x.begin() + i * D);
  }
  const size_t qd = static_cast<size_t>(c.heads) * c.head_dim, kvd = static_cast<size_t>(c.kv_heads) * c.head_dim;
  s.xn.resize(n * D);
  s.q.resize(n * qd);
  s.o.resize(n * qd);
  s.k.resize(n * kvd);
  s.v.resize(n * kvd);
  s.gate.resize(n * static_cast<size_t>(c.hidden));
  s.up.resize(s.gate.size());
  s.q_out = q, s.k_out = k, s.v_out = v;
  for (int32_t l = 0; l < c.layers; ++l) layer(l, n, pos0, s, select);
  cache_.rows = pos0 + n;
  std::vector<float> last(D);
  rms_norm(s.x.data() + (n - 1) * D, 1, c.dim, w_->output_norm, c.rms_eps, last.data());
  last_logits.resize(static_cast<size_t>(c.vocab));
  linear(last.data(), 1, c.dim, c.tied_output ? w_->embed : w_->output, c.vocab, last_logits.data(),
         opt_.llama_cpp_activations, opt_.threads);
}

void GgufDecoder::forward(int32_t token, int32_t pos, std::vector<float>& q_out, std::vector<float>& k_out,
                          std::vector<float>& v_out, std::vector<float>& logits, const AttentionSelect& select) {
  const GgufModelConfig& c = cfg_;
  KVT_CHECK(pos >= 0 && pos <= cache_.rows, USAGE, "position " << pos << " after " << cache_.rows << " cached rows");
  cache_.rows = pos;  // a position before the end replaces the rows from it on
  q_out.resize(static_cast<size_t>(c.layers) * c.heads * c.head_dim);
  k_out.resize(static_cast<size_t>(c.layers) * c.kv_heads * c.head_dim);
  v_out.resize(k_out.size());
  run(&token, 1, pos, q_out.data(), k_out.data(), v_out.data(), logits, select);
}

}  // namespace kvtool
