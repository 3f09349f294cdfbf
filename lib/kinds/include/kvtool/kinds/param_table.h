// The parameter tables of the kinds: lib/kinds/include/kvtool/kinds/KIND_params.def holds one row per
// build parameter of KIND, and every place that names a parameter is expanded from it (X-macros, as
// kvtool/kinds.def and reasons.def): the KindParams struct (kvtool/kinds/KIND.h), the builder from
// JSON (lib/kinds/KIND/KIND_params.cpp), the manifest params the builder records (KIND_build.cpp),
// the command line's options and help (tools/common/kind_options/KIND.cpp) and the parameter list of
// the Python kvtool.build docstring (python/src/kind_params.cpp). docs/adding-a-kind.md, "The
// parameter table", walks through a row.
//
// A row is one of
//   KVTOOL_PARAM(kind, name, type, default, bounds, manifest, cli, flag, help)
//   KVTOOL_PARAM_TEXT(kind, name, type, default, text_default, source, bounds, manifest, cli, flag, help)
// kind          the kind (the table's own name): text parsers are kind_parse_name
// name          the JSON parameter, the manifest params key and the struct field (`--` + name with
//               '-' for '_' is the usual flag)
// type          the field's C++ type; default its initial value
// bounds        the values the builder accepts, for the documentation and the `range` check:
//               KVTOOL_RANGE(lo, hi) (inclusive), KVTOOL_MIN(lo), KVTOOL_ABOVE(lo, hi) (lo < x <= hi),
//               KVTOOL_ONE_OF("a", "b") or KVTOOL_NOTE("free text"). The builder's check() says
//               the same in its own words (tests/unit/test_param_tables.cpp holds them together)
// manifest      recorded: the builder's params() writes the field as it is; custom: its params()
//               writes it by hand (a conditional key, a name for an enum, ...)
// cli           show_default (the help shows the default), positive (CLI::PositiveNumber), range
//               (CLI::Range of the bounds) or plain (neither)
// flag, help    CLI11's option names ("--bits,-K") and help text
// A text row's field is not read as it is but parsed from text by
//   type kind_parse_name(const std::string& text, const std::string& what)
// (declared below, defined by the kind); text_default is the command line's text before any option
// (shown by show_default; a text row with an empty one is parsed only when given), and source how
// the text arrives in JSON: text (a string), list (a list of numbers or a string,
// BuildParams::get_list_text) or bytes (JSON binary; on the command line the option names a file
// the tool reads).
//
// An expansion site defines the row macro(s) it needs and includes the table, which expands an
// undefined one to nothing and undefines both at its end:
//   #define KVTOOL_PARAM_TEXT KVTOOL_PARAM_TEXT_PARSER
//   #include "kvtool/kinds/KIND_params.def"
#pragma once
#include <string>

// Declares the fields of a KindParams struct, one per row.
#define KVTOOL_PARAM_FIELD(kind, name, type, def, ...) type name = def;
// Declares the parser of a text row.
#define KVTOOL_PARAM_TEXT_PARSER(kind, name, type, ...) \
  type kind##_parse_##name(const std::string& text, const std::string& what);
