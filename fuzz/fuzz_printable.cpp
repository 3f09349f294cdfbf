// fuzz_printable: any bytes as text from input (a path, a file's string, a message quoting them)
// through the two rules every command prints by (docs/threat-model.md): printable() for the
// terminal and json_text() for --json. printable's result is valid UTF-8 with no terminal control
// (C0 but newline and tab, DEL, C1, bidirectional controls, line separators), is a fixed point, and
// keeps text that has none; json_text's is valid UTF-8 JSON with no raw control that parses back
// to the same string wherever the input was already valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include "kvtool/json.h"

namespace {

void finding(const char* what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what);
  std::abort();
}

// Whether `s` is valid UTF-8 and, when `no_controls`, holds no terminal control.
bool clean(std::string_view s, bool no_controls, bool* valid = nullptr) {
  bool ok = true, utf8 = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = kvtool::utf8_decode(s, i, cp);
    if (n == 0) {
      utf8 = ok = false;
      ++i;
      continue;
    }
    if (no_controls && kvtool::is_terminal_control(cp)) ok = false;
    i += n;
  }
  if (valid) *valid = utf8;
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    const std::string p = kvtool::printable(in);
    if (!clean(p, true)) finding("printable() left a control or a byte that is not UTF-8");
    if (kvtool::printable(p) != p) finding("printable() is not a fixed point");
    bool valid = false;
    if (clean(in, true, &valid) && p != in) finding("printable() changed clean text");
    const std::string j = kvtool::json_text(kvtool::json{{"message", std::string(in)}}, 2);
    if (!clean(j, true)) finding("json_text() left a raw control or a byte that is not UTF-8");
    const kvtool::json back = kvtool::json::parse(j);
    if (valid && back["message"].get<std::string>() != in) finding("json_text() changed valid UTF-8");
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
