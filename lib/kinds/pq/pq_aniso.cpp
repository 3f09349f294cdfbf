// Score-aware (anisotropic) PQ training and encoding (pq_aniso.h; formats/kinds-v1.md, "pq").
#include "pq/pq_aniso.h"

#include <cmath>

namespace kvtool::pq {

namespace {

// Per-row state: the unit key u and, per subspace, the parallel residual r_j . u_j (double, so
// that the running sums are exact enough to compare candidates).
struct RowState {
  std::vector<float> u;     // [n, d]
  std::vector<double> par;  // [n, m]
  std::vector<double> sum;  // [n]: sum_j par
};

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t t = 0; t < n; ++t) s += static_cast<double>(a[t]) * b[t];
  return s;
}

const float* codeword(const AnisoProblem& p, const float* centroids, int64_t j, int64_t c) {
  return centroids + (j * p.k + c) * p.dsub();
}

// r_j . u_j for row i, subspace j and codeword c.
double parallel(const AnisoProblem& p, const RowState& s, const float* centroids, int64_t i, int64_t j, int64_t c) {
  const int64_t ds = p.dsub(), off = i * p.d + j * ds;
  const float* cw = codeword(p, centroids, j, c);
  double v = 0;
  for (int64_t t = 0; t < ds; ++t) v += (static_cast<double>(p.x[off + t]) - cw[t]) * s.u[off + t];
  return v;
}

RowState row_state(const AnisoProblem& p, const float* centroids, const std::vector<int32_t>& codes) {
  RowState s;
  s.u.assign(p.x, p.x + p.n * p.d);
  s.par.assign(static_cast<size_t>(p.n * p.m), 0.0);
  s.sum.assign(static_cast<size_t>(p.n), 0.0);
  for (int64_t i = 0; i < p.n; ++i) {
    float* u = s.u.data() + i * p.d;
    const double norm = std::sqrt(dot(u, u, p.d));
    for (int64_t t = 0; t < p.d; ++t) u[t] = norm > 0 ? static_cast<float>(u[t] / norm) : 0.f;
    for (int64_t j = 0; j < p.m; ++j) {
      s.par[i * p.m + j] = parallel(p, s, centroids, i, j, codes[i * p.m + j]);
      s.sum[i] += s.par[i * p.m + j];
    }
  }
  return s;
}

// Solves A y = b in place (A symmetric positive definite, [n, n], Cholesky); false if A is not.
bool cholesky_solve(std::vector<double>& A, std::vector<double>& b, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    double dg = A[c * n + c];
    for (int64_t t = 0; t < c; ++t) dg -= A[c * n + t] * A[c * n + t];
    if (!(dg > 0)) return false;
    dg = std::sqrt(dg);
    A[c * n + c] = dg;
    for (int64_t r = c + 1; r < n; ++r) {
      double v = A[r * n + c];
      for (int64_t t = 0; t < c; ++t) v -= A[r * n + t] * A[c * n + t];
      A[r * n + c] = v / dg;
    }
  }
  for (int64_t r = 0; r < n; ++r) {  // L z = b
    for (int64_t t = 0; t < r; ++t) b[r] -= A[r * n + t] * b[t];
    b[r] /= A[r * n + r];
  }
  for (int64_t r = n - 1; r >= 0; --r) {  // L^T y = z
    for (int64_t t = r + 1; t < n; ++t) b[r] -= A[t * n + r] * b[t];
    b[r] /= A[r * n + r];
  }
  return true;
}

// The rows of each codeword of subspace j, grouped by a counting sort (row order kept).
void rows_by_code(const AnisoProblem& p, const std::vector<int32_t>& codes, int64_t j, std::vector<int64_t>& start,
                  std::vector<int64_t>& rows) {
  start.assign(static_cast<size_t>(p.k + 1), 0);
  for (int64_t i = 0; i < p.n; ++i) ++start[codes[i * p.m + j] + 1];
  for (int64_t c = 0; c < p.k; ++c) start[c + 1] += start[c];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  rows.resize(static_cast<size_t>(p.n));
  for (int64_t i = 0; i < p.n; ++i) rows[fill[codes[i * p.m + j]]++] = i;
}

// The minimizer over codeword c of subspace j of sum_i |x_ij - c|^2 + (eta-1) (a_i - c . u_ij)^2,
// a_i = s_i + x_ij . u_ij with s_i the other subspaces' parallel residual: the normal equations
// (cnt I + (eta-1) sum u u^T) c = sum x_ij + (eta-1) sum a_i u_ij. Their matrix has eigenvalues
// >= eta * cnt > 0 (|u_ij| <= 1), so the solve fails only on non-finite input.
void update_codeword(const AnisoProblem& p, const RowState& s, int64_t j, const int64_t* rows, int64_t cnt, float* cw) {
  const int64_t ds = p.dsub();
  const double w = p.eta - 1;
  std::vector<double> A(static_cast<size_t>(ds * ds), 0.0), b(static_cast<size_t>(ds), 0.0);
  for (int64_t r = 0; r < cnt; ++r) {
    const int64_t i = rows[r], off = i * p.d + j * ds;
    const float* x = p.x + off;
    const float* u = s.u.data() + off;
    const double a = s.sum[i] - s.par[i * p.m + j] + dot(x, u, ds);
    for (int64_t t = 0; t < ds; ++t) {
      b[t] += x[t] + w * a * u[t];
      for (int64_t v = 0; v <= t; ++v) A[t * ds + v] += w * u[t] * u[v];
    }
  }
  for (int64_t t = 0; t < ds; ++t) {
    A[t * ds + t] += static_cast<double>(cnt);
    for (int64_t v = 0; v < t; ++v) A[v * ds + t] = A[t * ds + v];
  }
  if (!cholesky_solve(A, b, ds)) return;
  for (int64_t t = 0; t < ds; ++t) cw[t] = static_cast<float>(b[t]);
}

}  // namespace

double aniso_loss(const AnisoProblem& p, const float* centroids, const std::vector<int32_t>& codes) {
  const RowState s = row_state(p, centroids, codes);
  const int64_t ds = p.dsub();
  double loss = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    double r2 = 0;
    for (int64_t j = 0; j < p.m; ++j) {
      const float* cw = codeword(p, centroids, j, codes[i * p.m + j]);
      for (int64_t t = 0; t < ds; ++t) {
        const double e = static_cast<double>(p.x[i * p.d + j * ds + t]) - cw[t];
        r2 += e * e;
      }
    }
    loss += r2 + (p.eta - 1) * s.sum[i] * s.sum[i];
  }
  return loss;
}

void aniso_encode(const AnisoProblem& p, const float* centroids, int64_t passes, std::vector<int32_t>& codes) {
  RowState s = row_state(p, centroids, codes);
  const int64_t ds = p.dsub();
  const double w = p.eta - 1;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t pass = 0; pass < passes; ++pass) {
      bool changed = false;
      for (int64_t j = 0; j < p.m; ++j) {
        const double other = s.sum[i] - s.par[i * p.m + j];
        const float* x = p.x + i * p.d + j * ds;
        const float* u = s.u.data() + i * p.d + j * ds;
        int32_t& code = codes[i * p.m + j];
        auto cost = [&](int64_t c, double& par) {
          const float* cw = codeword(p, centroids, j, c);
          double r2 = 0, rp = 0;
          for (int64_t t = 0; t < ds; ++t) {
            const double e = static_cast<double>(x[t]) - cw[t];
            r2 += e * e;
            rp += e * u[t];
          }
          par = rp;
          return r2 + w * (other + rp) * (other + rp);
        };
        double best_par = 0, best = cost(code, best_par);
        for (int64_t c = 0; c < p.k; ++c) {
          double par = 0;
          const double v = cost(c, par);
          if (v < best) best = v, best_par = par, code = static_cast<int32_t>(c), changed = true;
        }
        s.par[i * p.m + j] = best_par;
        s.sum[i] = other + best_par;
      }
      if (!changed) break;
    }
  }
}

void aniso_update(const AnisoProblem& p, const std::vector<int32_t>& codes, float* centroids) {
  RowState s = row_state(p, centroids, codes);
  std::vector<int64_t> start, rows;
  for (int64_t j = 0; j < p.m; ++j) {
    rows_by_code(p, codes, j, start, rows);
    for (int64_t c = 0; c < p.k; ++c)
      if (start[c + 1] > start[c])
        update_codeword(p, s, j, rows.data() + start[c], start[c + 1] - start[c], centroids + (j * p.k + c) * p.dsub());
    for (int64_t i = 0; i < p.n; ++i) {  // the next subspace sees this one's new residuals
      const double v = parallel(p, s, centroids, i, j, codes[i * p.m + j]);
      s.sum[i] += v - s.par[i * p.m + j];
      s.par[i * p.m + j] = v;
    }
  }
}

void aniso_train(const AnisoProblem& p, int64_t iters, float* centroids, std::vector<int32_t>& codes) {
  for (int64_t it = 0; it < iters; ++it) {
    aniso_update(p, codes, centroids);
    aniso_encode(p, centroids, kEncodePasses, codes);
  }
}

double eta_of_cosine(int64_t d, double t) { return static_cast<double>(d - 1) * t * t / (1 - t * t); }

}  // namespace kvtool::pq
