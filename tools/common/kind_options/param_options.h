// A kind's build options expanded from its parameter table (kvtool/kinds/KIND_params.def, format in
// kvtool/kinds/param_table.h): one CLI11 option per row, bound to the params struct (`p`) or, for a
// text row, to its text in the kind's Texts struct (`t`), which finish_text_params parses into `p`.
// In a kind's options file:
//
//   struct Texts {                       // the text rows' texts
//   #define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_FIELD
//   #include "kvtool/kinds/KIND_params.def"
//   ...
//   };
//   // with CLI::App* c, KindParams& p and Texts& t in scope: the options, in the table's order
//   #define KVTOOL_PARAM KVTOOL_CLI_OPTION
//   #define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_OPTION
//   // once the command line is parsed: each given text parsed into p
//   #define KVTOOL_PARAM_TEXT KVTOOL_CLI_TEXT_PARSE
#pragma once
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "cli.h"
#include "kvtool/error.h"
#include "kvtool/kinds/param_table.h"

namespace kvtool::cli {

// The bytes of the file a bytes row's option names; IO_ERROR naming the parameter ("calibration
// queries": the name with spaces) when it cannot be opened.
inline std::string read_param_file(const std::string& path, std::string name) {
  for (char& ch : name)
    if (ch == '_') ch = ' ';
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open " << name << " '" << path << "'");
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace kvtool::cli

// The table's `cli` column: what the option shows and checks besides its help.
#define KVTOOL_CLI_show_default(opt, bounds) (opt)->capture_default_str()
#define KVTOOL_CLI_positive(opt, bounds) (opt)->check(CLI::PositiveNumber)
#define KVTOOL_CLI_range(opt, bounds) (opt)->check(bounds)
#define KVTOOL_CLI_plain(opt, bounds) (opt)
#define KVTOOL_RANGE(lo, hi) CLI::Range(lo, hi)

#define KVTOOL_CLI_OPTION(kind, name, type, def, bounds, manifest, cli, flag, help) \
  KVTOOL_CLI_##cli(c->add_option(flag, p.name, help), bounds);
#define KVTOOL_CLI_TEXT_FIELD(kind, name, type, def, text_def, ...) std::string name = text_def;
#define KVTOOL_CLI_TEXT_OPTION(kind, name, type, def, text_def, source, bounds, manifest, cli, flag, help) \
  KVTOOL_CLI_##cli(c->add_option(flag, t.name, help), bounds);
// A text is parsed when given, or always when the row has a default text (which is then checked as
// a given one: --centroid "" is refused, --quantiles "" keeps the default).
#define KVTOOL_CLI_TEXT_PARSE(kind, name, type, def, text_def, source, bounds, manifest, cli, flag, help) \
  if (!t.name.empty() || !std::string_view(text_def).empty()) p.name = KVTOOL_CLI_TEXT_##source(kind, name, flag);
#define KVTOOL_CLI_TEXT_text(kind, name, flag) kind##_parse_##name(t.name, flag)
#define KVTOOL_CLI_TEXT_list(kind, name, flag) kind##_parse_##name(t.name, flag)
#define KVTOOL_CLI_TEXT_bytes(kind, name, flag) kind##_parse_##name(kvtool::cli::read_param_file(t.name, #name), t.name)
