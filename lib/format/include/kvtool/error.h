// Error model of libkvtool: every failure carries a stable reason code (kvtool/reasons.def, one
// table for the enum, `kvtool reasons`, the man page and the C API) and the exit code the
// command-line tools map it to. Reason names are stable across versions and are what JSON carries.
#pragma once
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvtool {

enum class ExitCode : int { ok = 0, invalid = 1, usage = 2, io = 3, internal = 4 };

enum class Reason : int {
#define KVT_REASON(NAME, EXIT, MEANING) NAME,
#include "kvtool/reasons.def"
#undef KVT_REASON
};

struct ReasonInfo {
  Reason reason;
  const char* code;
  ExitCode exit;
  const char* meaning;
};

// Every reason in table order (`kvtool reasons` prints it).
const std::vector<ReasonInfo>& all_reasons();
const ReasonInfo& reason_info(Reason r);
inline const char* reason_name(Reason r) { return reason_info(r).code; }
inline ExitCode exit_code_for(Reason r) { return reason_info(r).exit; }
std::optional<Reason> reason_from_name(std::string_view name);

class Error : public std::runtime_error {
 public:
  Error(Reason reason, const std::string& message) : std::runtime_error(message), reason_(reason) {}
  Reason reason() const { return reason_; }
  const char* reason_name() const { return kvtool::reason_name(reason_); }
  ExitCode exit_code() const { return exit_code_for(reason_); }

 private:
  Reason reason_;
};

// Each reason as a constant, so that KVT_CHECK/KVT_THROW take a bare name (or an expression of
// names, e.g. `n == 0 ? TRUNCATED : BAD_MAGIC`) and a misspelt name does not compile.
namespace reason_names {
#define KVT_REASON(NAME, EXIT, MEANING) inline constexpr Reason NAME = Reason::NAME;
#include "kvtool/reasons.def"
#undef KVT_REASON
}  // namespace reason_names

// A value quoted in an error message, cut to `max` bytes with the full size named: a hostile
// attribute of a megabyte must not become a megabyte of stderr.
inline std::string excerpt(std::string_view s, size_t max = 200) {
  if (s.size() <= max) return std::string(s);
  return std::string(s.substr(0, max)) + "... (" + std::to_string(s.size()) + " bytes)";
}

// Text from input as a terminal may show it: control characters (C0 but newline and tab, DEL, C1
// such as U+009B CSI, the bidirectional overrides and isolates, the line and paragraph separators)
// and bytes that are not UTF-8 become '?', so a file's or a path's bytes cannot move the cursor,
// recolour the screen or reorder what is shown. The one rule for every message and string kvtool
// prints from input.
std::string printable(std::string_view s);
// The length of the valid UTF-8 sequence at s[i] (1 to 4) and its code point; 0 when the bytes
// there are not UTF-8 (overlong forms, surrogates, above U+10FFFF, cut short).
size_t utf8_decode(std::string_view s, size_t i, uint32_t& code_point);
// Whether printable() replaces this code point (what json_text() escapes as \uXXXX as well).
bool is_terminal_control(uint32_t code_point);

// The one mapping of any exception to an Error (tools and the C API alike): an Error as it is,
// std::bad_alloc as OUT_OF_MEMORY, anything else as INTERNAL.
Error error_from_exception(std::exception_ptr e);

}  // namespace kvtool

// Throwing check macros in the FAISS style: the reason is a Reason enumerator name (a typo does
// not compile) and the message is built with a stream expression.
#define KVT_THROW(REASON, MSG)                      \
  do {                                              \
    using namespace ::kvtool::reason_names;         \
    std::ostringstream kvt_os_;                     \
    kvt_os_ << MSG;                                 \
    throw ::kvtool::Error((REASON), kvt_os_.str()); \
  } while (0)

#define KVT_CHECK(COND, REASON, MSG)     \
  do {                                   \
    if (!(COND)) KVT_THROW(REASON, MSG); \
  } while (0)
