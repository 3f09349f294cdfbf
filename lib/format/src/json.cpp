#include "kvtool/json.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>

#include "kvtool/error.h"

namespace kvtool {

void json_precondition_failed(const char* condition) {
  KVT_THROW(BAD_MANIFEST, "a JSON document lacks a member or element its reader needs (" << condition << ")");
}

namespace {

std::string dump_leaf(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

// nlohmann's layout (detail::dtoa_impl::format_buffer with min_exp -4, max_exp 15) applied to the
// shortest digits: `digits` (no leading or trailing zeros) times 10^(n - len(digits)).
void layout_float(std::string& out, const std::string& digits, int n) {
  const int k = static_cast<int>(digits.size());
  constexpr int kMinExp = -4, kMaxExp = 15;
  if (k <= n && n <= kMaxExp) {  // digits[000].0
    out += digits;
    out.append(static_cast<size_t>(n - k), '0');
    out += ".0";
  } else if (0 < n && n <= kMaxExp) {  // dig.its
    out.append(digits, 0, static_cast<size_t>(n));
    out += '.';
    out.append(digits, static_cast<size_t>(n), std::string::npos);
  } else if (kMinExp < n && n <= 0) {  // 0.[000]digits
    out += "0.";
    out.append(static_cast<size_t>(-n), '0');
    out += digits;
  } else {  // d[.igits]e+XX, at least two exponent digits
    out += digits[0];
    if (k > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    int e = n - 1;
    out += e < 0 ? "e-" : "e+";
    e = std::abs(e);
    if (e < 10) out += '0';
    out += std::to_string(e);
  }
}

void write_float(std::string& out, double x) {
  if (!std::isfinite(x)) {  // what nlohmann writes; JSON has no NaN/Inf
    out += "null";
    return;
  }
  if (std::signbit(x)) {
    out += '-';
    x = -x;
  }
  if (x == 0) {
    out += "0.0";
    return;
  }
  char buf[64];
  // Shortest round-trip digits in scientific form: d[.ddd]e±XX.
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  KVT_CHECK(r.ec == std::errc(), INTERNAL, "cannot format a double");
  const char* e = static_cast<const char*>(std::memchr(buf, 'e', static_cast<size_t>(r.ptr - buf)));
  KVT_CHECK(e, INTERNAL, "unexpected double format");
  std::string digits;
  for (const char* p = buf; p < e; ++p)
    if (*p != '.') digits += *p;
  int exp10 = 0;
  const char* ep = e + 1 + (e[1] == '+');  // from_chars takes '-' but not '+'
  KVT_CHECK(std::from_chars(ep, r.ptr, exp10).ec == std::errc(), INTERNAL, "unexpected double exponent");
  layout_float(out, digits, exp10 + 1);
}

void write_canonical(std::string& out, const json& j) {
  switch (j.type()) {
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {  // std::map: keys in byte order
        if (!first) out += ',';
        first = false;
        out += dump_leaf(json(it.key()));
        out += ':';
        write_canonical(out, it.value());
      }
      out += '}';
      break;
    }
    case json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += ',';
        write_canonical(out, j[i]);
      }
      out += ']';
      break;
    }
    case json::value_t::number_float:
      write_float(out, j.get<double>());
      break;
    default:  // null, booleans, integers and strings (escaping, UTF-8 checks) as nlohmann writes them
      out += dump_leaf(j);
  }
}

}  // namespace

std::string json_text(const json& j, int indent) {
  const std::string raw = j.dump(indent, ' ', false, json::error_handler_t::replace);
  // The dump is valid UTF-8 and escapes C0; what a terminal still acts on (DEL, C1, bidirectional
  // controls, line separators) can only sit inside strings, where \uXXXX means the same.
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    uint32_t cp = 0;
    const size_t n = std::max<size_t>(1, utf8_decode(raw, i, cp));
    if (is_terminal_control(cp)) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(cp));
      out += esc;
    } else {
      out.append(raw, i, n);
    }
    i += n;
  }
  return out;
}

std::string canonical_json(const json& j) {
  std::string out;
  write_canonical(out, j);
  return out;
}

std::string legacy_canonical_json(const json& j) { return dump_leaf(j); }

void check_json_limits(std::string_view text, const std::string& what, Reason reason, size_t max_depth,
                       size_t max_bytes) {
  KVT_CHECK(text.size() <= max_bytes, reason,
            what << " is " << text.size() << " bytes; at most " << max_bytes << " are accepted");
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      KVT_CHECK(++depth <= max_depth, reason,
                what << " nests arrays and objects more than " << max_depth << " levels deep (at byte " << i
                     << "); kvtool refuses such documents");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // an unbalanced closer is the parser's to report
    }
  }
}

json parse_untrusted_json(std::string_view text, const std::string& what, Reason reason, size_t max_depth,
                          size_t max_bytes) {
  check_json_limits(text, what, reason, max_depth, max_bytes);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    KVT_THROW(reason, what << " is not valid JSON: " << e.what());
  }
}

json parse_json(const std::string& text, Reason reason, const std::string& what) {
  return parse_untrusted_json(text, what, reason);
}

}  // namespace kvtool
