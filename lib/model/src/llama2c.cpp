#include "kvtool/llama2c.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "kvtool/error.h"
#include "kvtool/sha256.h"

namespace kvtool {

namespace {

void rmsnorm(float* o, const float* x, const float* w, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + 1e-5f);
  for (int i = 0; i < n; ++i) o[i] = w[i] * (scale * x[i]);
}

// out[rows] = W[rows, cols] · x[cols]
void matvec(float* out, const float* x, const float* w, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* wr = w + static_cast<size_t>(r) * cols;
    float s = 0;
    for (int c = 0; c < cols; ++c) s += wr[c] * x[c];
    out[r] = s;
  }
}

void rope(float* v, int n, int head_dim, int pos) {
  for (int i = 0; i < n; i += 2) {
    int hd = i % head_dim;
    float freq = 1.0f / std::pow(10000.0f, static_cast<float>(hd) / static_cast<float>(head_dim));
    float val = static_cast<float>(pos) * freq;
    float c = std::cos(val), s = std::sin(val);
    float a = v[i], b = v[i + 1];
    v[i] = a * c - b * s;
    v[i + 1] = a * s + b * c;
  }
}

}  // namespace

Llama2cModel::Llama2cModel(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open model checkpoint '" << path << "'");
  uint64_t size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  int32_t hdr[7];
  KVT_CHECK(size >= sizeof hdr && f.read(reinterpret_cast<char*>(hdr), sizeof hdr), BAD_MODEL,
            "'" << path << "' is too short for a llama2.c header");
  cfg_.dim = hdr[0];
  cfg_.hidden_dim = hdr[1];
  cfg_.n_layers = hdr[2];
  cfg_.n_heads = hdr[3];
  cfg_.n_kv_heads = hdr[4];
  cfg_.shared_classifier = hdr[5] > 0;
  cfg_.vocab_size = std::abs(hdr[5]);
  cfg_.seq_len = hdr[6];
  const auto& c = cfg_;
  auto in = [](int32_t v, int32_t lo, int32_t hi) { return v >= lo && v <= hi; };
  KVT_CHECK(in(c.dim, 2, 1 << 16) && in(c.hidden_dim, 1, 1 << 18) && in(c.n_layers, 1, 1024) &&
                in(c.n_heads, 1, 1024) && in(c.n_kv_heads, 1, 1024) && in(c.vocab_size, 1, 1 << 22) &&
                in(c.seq_len, 1, 1 << 20),
            BAD_MODEL, "'" << path << "' has an implausible llama2.c header");
  KVT_CHECK(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0 && c.head_dim() % 2 == 0, BAD_MODEL,
            "'" << path << "': dim " << c.dim << ", heads " << c.n_heads << ", kv heads " << c.n_kv_heads
                << " do not form a valid head layout");
  uint64_t D = c.dim, Hd = c.hidden_dim, L = c.n_layers, V = c.vocab_size, KV = c.kv_dim(), S = c.seq_len,
           hs = c.head_dim();
  uint64_t n = V * D + L * D + L * D * D + 2 * L * KV * D + L * D * D + L * D + 3 * L * Hd * D + D + S * hs;
  if (!c.shared_classifier) n += V * D;
  KVT_CHECK(size == 28 + 4 * n, BAD_MODEL,
            "'" << path << "' has " << size << " bytes but its header implies " << 28 + 4 * n);
  w_.resize(n);
  KVT_CHECK(f.read(reinterpret_cast<char*>(w_.data()), static_cast<std::streamsize>(4 * n)), BAD_MODEL,
            "cannot read the weights of '" << path << "'");
  const float* p = w_.data();
  emb_ = p;
  p += V * D;
  rms_att_ = p;
  p += L * D;
  wq_ = p;
  p += L * D * D;
  wk_ = p;
  p += L * KV * D;
  wv_ = p;
  p += L * KV * D;
  wo_ = p;
  p += L * D * D;
  rms_ffn_ = p;
  p += L * D;
  w1_ = p;
  p += L * Hd * D;
  w2_ = p;
  p += L * D * Hd;
  w3_ = p;
  p += L * Hd * D;
  rms_final_ = p;
  p += D;
  p += S * hs;  // the two RoPE tables (S * hs/2 each) are recomputed, not read
  wcls_ = c.shared_classifier ? emb_ : p;
  for (float x : w_) KVT_CHECK(std::isfinite(x), BAD_MODEL, "'" << path << "' contains NaN/Inf weights");
  sha_ = to_hex(sha256_file(path));
  key_cache_.assign(L * S * KV, 0.f);
  val_cache_.assign(L * S * KV, 0.f);
}

int extra_count(const AttentionRows& rows, int head_dim) {
  const size_t e = rows.extra_logit.size();
  KVT_CHECK(rows.extra_value.size() == e * static_cast<size_t>(head_dim) && e < (size_t{1} << 30), INTERNAL,
            "estimated attention entries need one value vector each");
  return static_cast<int>(e);
}

// Each query head's attention output into out [n_heads * head_dim]: over every row 0..pos, or over
// the rows `select` chooses, in ascending order either way (so that choosing all rows is dense).
void Llama2cModel::attend(int32_t l, int32_t pos, const float* q, float* out_all, const AttentionSelect& select,
                          AttentionRows& rows, std::vector<float>& att) const {
  const auto& c = cfg_;
  const int KV = c.kv_dim(), hs = c.head_dim(), S = c.seq_len, kv_mul = c.n_heads / c.n_kv_heads;
  for (int h = 0; h < c.n_heads; ++h) {
    const float* qh = q + h * hs;
    rows.extra_logit.clear(), rows.extra_value.clear();
    const bool sparse = select && select(l, h, qh, pos, rows);
    const int n = sparse ? static_cast<int>(rows.rows.size()) : pos + 1;
    const int e = sparse ? extra_count(rows, hs) : 0;
    KVT_CHECK(n > 0 && (!sparse || rows.log_weight.size() == rows.rows.size()), INTERNAL,
              "sparse attention needs at least one row, each with a weight");
    att.resize(static_cast<size_t>(n + e));
    const int kvh = h / kv_mul;
    float mx = -INFINITY;
    for (int j = 0; j < n; ++j) {
      const int t = sparse ? rows.rows[j] : j;
      KVT_CHECK(t >= 0 && t <= pos, INTERNAL, "sparse attention row " << t << " outside 0.." << pos);
      const float* kt = key_cache_.data() + (static_cast<size_t>(l) * S + t) * KV + kvh * hs;
      float s = 0;
      for (int i = 0; i < hs; ++i) s += qh[i] * kt[i];
      att[j] = s / std::sqrt(static_cast<float>(hs));
      if (sparse) att[j] += rows.log_weight[j];
      mx = std::max(mx, att[j]);
    }
    for (int j = 0; j < e; ++j) mx = std::max(mx, att[n + j] = rows.extra_logit[j]);
    float sum = 0;
    for (int j = 0; j < n + e; ++j) sum += (att[j] = std::exp(att[j] - mx));
    float* out = out_all + h * hs;
    std::fill(out, out + hs, 0.f);
    for (int j = 0; j < n; ++j) {
      const int t = sparse ? rows.rows[j] : j;
      const float* vt = val_cache_.data() + (static_cast<size_t>(l) * S + t) * KV + kvh * hs;
      float a = att[j] / sum;
      for (int i = 0; i < hs; ++i) out[i] += a * vt[i];
    }
    for (int j = 0; j < e; ++j) {
      const float* vt = rows.extra_value.data() + static_cast<size_t>(j) * hs;
      float a = att[n + j] / sum;
      for (int i = 0; i < hs; ++i) out[i] += a * vt[i];
    }
  }
}

void Llama2cModel::forward(int32_t token, int32_t pos, std::vector<float>& q_out, std::vector<float>& k_out,
                           std::vector<float>& v_out, std::vector<float>& logits, const AttentionSelect& select) {
  const auto& c = cfg_;
  KVT_CHECK(token >= 0 && token < c.vocab_size, BAD_MODEL, "token " << token << " outside the vocabulary");
  KVT_CHECK(pos >= 0 && pos < c.seq_len, USAGE, "position " << pos << " beyond the model context " << c.seq_len);
  const int D = c.dim, KV = c.kv_dim(), hs = c.head_dim(), Hd = c.hidden_dim, S = c.seq_len;
  std::vector<float> x(emb_ + static_cast<size_t>(token) * D, emb_ + static_cast<size_t>(token + 1) * D);
  std::vector<float> xb(D), xb2(D), q(D), hb(Hd), hb2(Hd), att(pos + 1);
  AttentionRows rows;
  q_out.assign(static_cast<size_t>(c.n_layers) * D, 0.f);
  k_out.assign(static_cast<size_t>(c.n_layers) * KV, 0.f);
  v_out.assign(static_cast<size_t>(c.n_layers) * KV, 0.f);
  for (int l = 0; l < c.n_layers; ++l) {
    rmsnorm(xb.data(), x.data(), rms_att_ + static_cast<size_t>(l) * D, D);
    float* kc = key_cache_.data() + (static_cast<size_t>(l) * S + pos) * KV;
    float* vc = val_cache_.data() + (static_cast<size_t>(l) * S + pos) * KV;
    matvec(q.data(), xb.data(), wq_ + static_cast<size_t>(l) * D * D, D, D);
    matvec(kc, xb.data(), wk_ + static_cast<size_t>(l) * KV * D, KV, D);
    matvec(vc, xb.data(), wv_ + static_cast<size_t>(l) * KV * D, KV, D);
    rope(q.data(), D, hs, pos);
    rope(kc, KV, hs, pos);
    std::copy(q.begin(), q.end(), q_out.begin() + static_cast<size_t>(l) * D);
    std::copy(kc, kc + KV, k_out.begin() + static_cast<size_t>(l) * KV);
    std::copy(vc, vc + KV, v_out.begin() + static_cast<size_t>(l) * KV);
    attend(l, pos, q.data(), xb.data(), select, rows, att);
    matvec(xb2.data(), xb.data(), wo_ + static_cast<size_t>(l) * D * D, D, D);
    for (int i = 0; i < D; ++i) x[i] += xb2[i];
    rmsnorm(xb.data(), x.data(), rms_ffn_ + static_cast<size_t>(l) * D, D);
    matvec(hb.data(), xb.data(), w1_ + static_cast<size_t>(l) * Hd * D, Hd, D);
    matvec(hb2.data(), xb.data(), w3_ + static_cast<size_t>(l) * Hd * D, Hd, D);
    for (int i = 0; i < Hd; ++i) hb[i] = hb[i] / (1.0f + std::exp(-hb[i])) * hb2[i];
    matvec(xb2.data(), hb.data(), w2_ + static_cast<size_t>(l) * D * Hd, D, Hd);
    for (int i = 0; i < D; ++i) x[i] += xb2[i];
  }
  rmsnorm(x.data(), x.data(), rms_final_, D);
  logits.resize(c.vocab_size);
  matvec(logits.data(), x.data(), wcls_, c.vocab_size, D);
}

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int32_t vocab_size) {
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open tokenizer '" << path << "'");
  int32_t max_len = 0;
  KVT_CHECK(f.read(reinterpret_cast<char*>(&max_len), 4) && max_len > 0 && max_len < 4096, BAD_MODEL,
            "'" << path << "' is not a llama2.c tokenizer");
  for (int32_t i = 0; i < vocab_size; ++i) {
    float score;
    int32_t len;
    KVT_CHECK(f.read(reinterpret_cast<char*>(&score), 4) && f.read(reinterpret_cast<char*>(&len), 4) && len >= 0 &&
                  len <= max_len,
              BAD_MODEL, "tokenizer '" << path << "' is truncated or malformed at token " << i);
    std::string s(static_cast<size_t>(len), '\0');
    KVT_CHECK(f.read(s.data(), len), BAD_MODEL, "tokenizer '" << path << "' is truncated at token " << i);
    vocab_.push_back(std::move(s));
    scores_.push_back(score);
  }
  for (int32_t i = 0; i < vocab_size; ++i) sorted_.emplace_back(vocab_[i], i);
  std::sort(sorted_.begin(), sorted_.end());
}

int32_t Llama2cTokenizer::lookup(const std::string& s) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::make_pair(s, INT32_MIN));
  return it != sorted_.end() && it->first == s ? it->second : -1;
}

std::vector<int32_t> Llama2cTokenizer::encode(const std::string& text, bool bos) const {
  std::vector<int32_t> t;
  if (bos) t.push_back(1);
  if (!text.empty()) {
    int32_t sp = lookup(" ");
    if (sp >= 0) t.push_back(sp);
  }
  std::string cp;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char ch = static_cast<unsigned char>(text[i]);
    if ((ch & 0xC0) != 0x80) cp.clear();
    cp.push_back(static_cast<char>(ch));
    bool next_cont = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80 && cp.size() < 4;
    if (next_cont) continue;
    int32_t id = lookup(cp);
    if (id >= 0) {
      t.push_back(id);
    } else {
      for (unsigned char b : cp) t.push_back(static_cast<int32_t>(b) + 3);
    }
    cp.clear();
  }
  size_t start = bos ? 1 : 0;
  while (true) {
    float best = -1e10f;
    int32_t best_id = -1;
    size_t best_i = 0;
    for (size_t i = start; i + 1 < t.size(); ++i) {
      int32_t id = lookup(vocab_[t[i]] + vocab_[t[i + 1]]);
      if (id >= 0 && scores_[id] > best) {
        best = scores_[id];
        best_id = id;
        best_i = i;
      }
    }
    if (best_id < 0) break;
    t[best_i] = best_id;
    t.erase(t.begin() + static_cast<std::ptrdiff_t>(best_i) + 1);
  }
  return t;
}

std::string Llama2cTokenizer::decode(int32_t prev, int32_t token) const {
  if (token < 0 || token >= static_cast<int32_t>(vocab_.size())) return {};
  std::string piece = vocab_[token];
  if (prev == 1 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  unsigned int byte;
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%02X>", &byte) == 1)
    return std::string(1, static_cast<char>(byte));
  return piece;
}

}  // namespace kvtool
