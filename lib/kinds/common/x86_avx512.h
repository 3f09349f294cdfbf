// What the kinds' AVX-512 paths share: the intrinsics header, and a bracket that silences GCC 12's
// false -Wmaybe-uninitialized / -Wuninitialized inside avx512fintrin.h (its own temporaries, not a
// use of uninitialized data) around the functions that call those intrinsics. Clang, which the
// sanitizer and fuzz builds use with warnings as errors, keeps every warning.
#pragma once

#include "kvtool/cpu_features.h"

// The kinds' name for KVTOOL_X86_TARGETS (kvtool/cpu_features.h), kept for their #if lines.
#if KVTOOL_X86_TARGETS
#define KVTOOL_KINDS_X86 1
#include <immintrin.h>
#else
#define KVTOOL_KINDS_X86 0
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define KVTOOL_AVX512_WARNINGS_OFF                                                           \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define KVTOOL_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")
#else
#define KVTOOL_AVX512_WARNINGS_OFF
#define KVTOOL_AVX512_WARNINGS_ON
#endif

#if KVTOOL_KINDS_X86
namespace kvtool {
// Whether this CPU runs AVX-512F: the kinds' callers keep this name; the probe is cpu_features()'s.
inline bool cpu_has_avx512f() { return cpu_features().avx512f; }
}  // namespace kvtool
#endif
