// What the prefix store's two halves share (private to kvtool_runtime): store_refs.cpp (keys, refs
// and trust as text, the answers' JSON) and store.cpp (the store on disk). The contract is
// kvtool/store.h; the layout formats/store-v1.md.
#pragma once
#include <algorithm>
#include <string>

#include "kvtool/signing.h"

namespace kvtool::store_internal {

// One key part (--tenant, --model, ...): required parts must be present, any present part must
// follow the rule dumps and the store share (key_part_problem). BAD_STORE_KEY otherwise.
void check_key_part(const std::string& v, const char* name, bool required);

// Refuses nesting deeper than `max_depth` before a recursive JSON parser sees the text.
void check_nesting(const std::string& text, int max_depth, const char* what);

inline bool is_hex64(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The all-zero encoding is a small-order point: admission refuses it as a signer before any trust
// check, so a policy trusting only this key trusts no signer at all.
inline const PublicKeyRaw kNoKey{};

}  // namespace kvtool::store_internal
