// JSON helpers: kvtool uses nlohmann::json for the tree and its own serialiser for the canonical
// form (formats/kvi-v1.md §Manifest): keys sorted by bytes, no insignificant whitespace, integers
// as integers, other numbers in the shortest form that reads back as the same double.
#pragma once
#include <string>
#include <string_view>

#include "kvtool/error.h"

namespace kvtool {
// nlohmann's precondition checks (JSON_ASSERT) are `assert`s, compiled out in release builds, where
// a broken precondition — above all the const operator[] of a member a hostile document lacks — is
// undefined behaviour. kvtool makes each one a thrown BAD_MANIFEST error instead.
[[noreturn]] void json_precondition_failed(const char* condition);
}  // namespace kvtool
#define JSON_ASSERT(x) ((x) ? static_cast<void>(0) : ::kvtool::json_precondition_failed(#x))
#include <nlohmann/json.hpp>

namespace kvtool {
using json = nlohmann::json;
inline constexpr int kJsonSchemaVersion = 1;  // schema_version of every --json output

// Nesting limit (arrays and objects together) of JSON read from files. kvtool's own documents
// nest at most 6 deep; the limit keeps a hostile document from exhausting the stack of the
// (recursive) parser, serialiser and destructor.
inline constexpr size_t kJsonMaxDepth = 64;
// Size limit of JSON read from files, the kvi manifest limit (formats/kvi-v1.md).
inline constexpr size_t kJsonMaxBytes = 64ull << 20;

// JSON text for people and programs to read (--json, Python's reports): bytes that are not UTF-8 —
// a path or a file's string may hold any — become U+FFFD instead of failing the serialiser.
std::string json_text(const json& j, int indent = -1);

// Canonical form. Floats use the shortest round-trip digits (std::to_chars) laid out as nlohmann's
// serialiser lays them out: positional with ".0" for an integral value when the decimal exponent
// is in [-4, 15), otherwise "d.ddde+XX"; non-finite numbers become null.
std::string canonical_json(const json& j);
// The canonical form kvtool 0.1.0 wrote (nlohmann's Grisu2 digits, not always the shortest). It
// differs from canonical_json() only in the digits of some floats; readers accept it for
// manifests written before the change (formats/kvi-v1.md, version note).
std::string legacy_canonical_json(const json& j);

// Throws Error(reason) when `text` is longer than `max_bytes` or nests arrays/objects deeper than
// `max_depth`. A linear scan that skips string contents (escapes included); no recursion.
void check_json_limits(std::string_view text, const std::string& what, Reason reason, size_t max_depth = kJsonMaxDepth,
                       size_t max_bytes = kJsonMaxBytes);
// Parses JSON from an untrusted source: the limits above first, then the parser. Every failure is
// Error(reason) with a sentence naming `what`.
json parse_untrusted_json(std::string_view text, const std::string& what, Reason reason,
                          size_t max_depth = kJsonMaxDepth, size_t max_bytes = kJsonMaxBytes);
// Parses; throws Error(reason) when the text is not JSON. Applies the limits of
// parse_untrusted_json.
json parse_json(const std::string& text, Reason reason, const std::string& what);
}  // namespace kvtool
