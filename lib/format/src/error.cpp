#include "kvtool/error.h"

#include <new>

namespace kvtool {

const std::vector<ReasonInfo>& all_reasons() {
  static const std::vector<ReasonInfo> reasons = {
#define KVT_REASON(NAME, EXIT, MEANING) {Reason::NAME, #NAME, ExitCode::EXIT, MEANING},
#include "kvtool/reasons.def"
#undef KVT_REASON
  };
  return reasons;
}

const ReasonInfo& reason_info(Reason r) {
  // The table is in enum order (both come from reasons.def), so the enum value is the index.
  return all_reasons()[static_cast<size_t>(r)];
}

std::optional<Reason> reason_from_name(std::string_view name) {
  for (const auto& r : all_reasons())
    if (name == r.code) return r.reason;
  return std::nullopt;
}

namespace {

// The length of the UTF-8 sequence at s[i] (2 to 4), or 0 when it is not one (overlong forms,
// surrogates and code points above U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) >= 0xA0) || (c == 0xF0 && b(1) < 0x90) ||
      (c == 0xF4 && b(1) >= 0x90))
    return 0;
  return n;
}

}  // namespace

size_t utf8_decode(std::string_view s, size_t i, uint32_t& code_point) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    code_point = c;
    return 1;
  }
  const size_t n = utf8_length(s, i);
  if (n == 0) return 0;
  code_point = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) code_point = (code_point << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return n;
}

bool is_terminal_control(uint32_t cp) {
  return (cp < 0x20 && cp != '\n' && cp != '\t') || (cp >= 0x7F && cp <= 0x9F) || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_decode(s, i, cp);
    if (n == 0 || is_terminal_control(cp))
      out.push_back('?');
    else
      out.append(s.substr(i, n));
    i += n ? n : 1;
  }
  return out;
}

Error error_from_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err;
  } catch (const std::bad_alloc&) {
    return Error(Reason::OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& ex) {
    return Error(Reason::INTERNAL, std::string("unexpected error: ") + ex.what());
  } catch (...) {
    return Error(Reason::INTERNAL, "unexpected error");
  }
}

}  // namespace kvtool
