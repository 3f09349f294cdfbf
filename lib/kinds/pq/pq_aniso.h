// Score-aware (anisotropic) product quantization of keys (formats/kinds-v1.md, "pq", loss
// "anisotropic"). For a key x with reconstruction x~ and residual r = x - x~, the loss is
//   L(x) = |r|^2 + (eta - 1) * (r . u)^2,   u = x / |x|  (u = 0 for x = 0),
// i.e. h_perp = 1 and h_par = eta: the error along the key, which moves every inner-product score
// q . x in proportion to q . u, costs eta times the orthogonal error. The subspaces couple through
// r . u = sum_j r_j . u_j, so encoding is coordinate descent over subspaces and the codebook update
// is one dsub x dsub least-squares system per codeword. Every step minimizes L exactly over its
// block, so the loss never increases.
#pragma once
#include <cstdint>
#include <vector>

namespace kvtool::pq {

struct AnisoProblem {
  const float* x;  // [n, d] rows
  int64_t n, d, m, k;
  double eta;  // h_par / h_perp; > 0 (1: plain L2)
  int64_t dsub() const { return d / m; }
};

// Sum of L over the rows for codebooks [m, k, dsub] and codes [n, m].
double aniso_loss(const AnisoProblem& p, const float* centroids, const std::vector<int32_t>& codes);

// Coordinate descent over subspaces from the given codes, at most `passes` sweeps (stops when a
// sweep changes nothing); a code moves only to a strictly lower loss.
void aniso_encode(const AnisoProblem& p, const float* centroids, int64_t passes, std::vector<int32_t>& codes);

// Each subspace in turn, each codeword: the exact minimizer of L over its rows given the other
// subspaces' residuals. Codewords without rows keep their value.
void aniso_update(const AnisoProblem& p, const std::vector<int32_t>& codes, float* centroids);

inline constexpr int64_t kEncodePasses = 4;  // coordinate-descent sweeps per encode (a fixed count)

// `iters` rounds of update then encode, from the given (L2) codebooks and codes.
void aniso_train(const AnisoProblem& p, int64_t iters, float* centroids, std::vector<int32_t>& codes);

// eta of the paper's indicator weight I(q . x >= T) for queries uniform on the sphere, written with
// the cosine threshold t = T / |x| (formats/kinds-v1.md, "pq"): (d - 1) t^2 / (1 - t^2).
double eta_of_cosine(int64_t d, double t);

}  // namespace kvtool::pq
