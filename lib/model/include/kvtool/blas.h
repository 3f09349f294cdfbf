// The BLAS calls kvtool makes directly (the kinds, the GGUF forward pass): Fortran BLAS (OpenBLAS), the same
// entry point FAISS itself calls, declared once here.
#pragma once

extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                      const float* beta, float* c, const int* ldc);

namespace kvtool {

// Sets how many threads the BLAS kvtool runs on uses for one call, where that BLAS has such a
// setting (OpenBLAS, BLIS); false where it has none (reference BLAS runs on one thread). The setting
// is the process's: front ends call it for their --threads. The library changes it only while a
// GGUF forward pass runs its products on its own threads (one BLAS thread, then the setting as it
// was: threads of both kinds at once made OpenBLAS's workers spin in sched_yield, and the BLAS's
// own split moved the last bits with its thread count, docs/models.md).
bool set_blas_threads(int threads);
// The setting set_blas_threads changes; 0 where the BLAS has none.
int blas_threads();

}  // namespace kvtool
