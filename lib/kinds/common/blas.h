// The BLAS calls the kinds make directly: Fortran BLAS (OpenBLAS through FAISS's link), the same
// entry point FAISS itself calls, declared once here.
#pragma once

extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                      const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                      const float* beta, float* c, const int* ldc);
