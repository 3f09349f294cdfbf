// The BLAS calls kvtool makes directly (the kinds, the GGUF forward pass): Fortran BLAS (OpenBLAS), the same
// entry point FAISS itself calls, declared once here.
#pragma once

extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                      const float* beta, float* c, const int* ldc);
