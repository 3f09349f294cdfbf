// The one place that asks the CPU which instruction sets it runs (as zstd's lib/common/cpu.h is for
// zstd): the SIMD levels of the query arithmetic (lib/runtime/src/scoring.cpp), the F16C widening
// (half.cpp) and the kinds' AVX-512 build loops (lib/kinds/common/x86_avx512.h) all read it, so a
// CPU is probed once per process and every caller agrees on what it has.
//
// Header-only and standard-library-only on purpose: tests/gpu builds scoring.cpp standalone, with
// lib/format/include on its include path but none of lib/format's sources (docs/architecture.md).
#pragma once

// x86-64 with GCC or Clang: functions can be compiled for AVX2 / AVX-512 with
// __attribute__((target(...))) and chosen at run time from cpu_features(). Elsewhere (other
// architectures, other compilers, nvcc) only portable loops are built, and every feature reads false.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define KVTOOL_X86_TARGETS 1
#include <cpuid.h>
#else
#define KVTOOL_X86_TARGETS 0
#endif

namespace kvtool {

// What this CPU (and its operating system, which must save the wider registers) runs.
struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool f16c = false;  // with AVX: the 8-wide conversions need the YMM registers
  bool fma = false;
};

namespace cpu_detail {

#if KVTOOL_X86_TARGETS
// CPUID leaf 1 (F16C, AVX, OSXSAVE) and XGETBV (the OS saves the YMM registers) by hand: clang's
// __builtin_cpu_supports has no "f16c".
inline bool probe_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  constexpr unsigned kOsxsave = 1u << 27, kAvx = 1u << 28, kF16c = 1u << 29;
  if ((c & (kOsxsave | kAvx | kF16c)) != (kOsxsave | kAvx | kF16c)) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
}
#endif

inline CpuFeatures probe() {
  CpuFeatures f;
#if KVTOOL_X86_TARGETS
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") != 0;
  f.avx512f = __builtin_cpu_supports("avx512f") != 0;
  f.avx512bw = __builtin_cpu_supports("avx512bw") != 0;
  f.fma = __builtin_cpu_supports("fma") != 0;
  f.f16c = probe_f16c();
#endif
  return f;
}

}  // namespace cpu_detail

// This CPU's features, probed on the first call (a function-local static: thread-safe, and one
// object for the whole program however many files include this header).
inline const CpuFeatures& cpu_features() {
  static const CpuFeatures features = cpu_detail::probe();
  return features;
}

}  // namespace kvtool
