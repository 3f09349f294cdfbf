/* The single-precision GEMM rate of the OpenBLAS kvtool links, on given cores: the floor of the GGUF
 * prefill bench (tests/bench/bench_gguf_prefill.sh), which divides the prefill's FLOPs by it.
 * Usage: sgemm_rate M N K THREADS REPS. Times REPS products C[M x N] = A[M x K] B[K x N] after one
 * warm-up and prints the best rate as JSON {"gflops": G}. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: sgemm_rate M N K THREADS REPS\n");
    return 2;
  }
  const int m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]), reps = atoi(argv[5]);
  if (m <= 0 || n <= 0 || k <= 0 || reps <= 0 || atoi(argv[4]) <= 0) return 2;
  openblas_set_num_threads(atoi(argv[4]));
  float* a = malloc(sizeof(float) * (size_t)m * (size_t)k);
  float* b = malloc(sizeof(float) * (size_t)k * (size_t)n);
  float* c = malloc(sizeof(float) * (size_t)m * (size_t)n);
  if (!a || !b || !c) return 3;
  for (size_t i = 0; i < (size_t)m * (size_t)k; ++i) a[i] = (float)(i % 17) * 0.01f;
  for (size_t i = 0; i < (size_t)k * (size_t)n; ++i) b[i] = (float)(i % 13) * 0.01f;
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
    const double t = now() - t0;
    if (r > 0 && t < best) best = t; /* r == 0 warms up */
  }
  printf("{\"gflops\": %.3f, \"check\": %.3f}\n", 2.0 * m * n * k / best * 1e-9, (double)c[(size_t)m * n - 1]);
  free(a);
  free(b);
  free(c);
  return 0;
}
