// Settings that save repeating the same options on every call. Precedence, highest first:
//   command-line flag > environment variable (KVTOOL_STORE, ...) > config file.
// The config file is `--config FILE` (anywhere on the command line), else $KVTOOL_CONFIG, else
// $XDG_CONFIG_HOME/kvtool/config (default ~/.config/kvtool/config) when it exists. It holds
// `key = value` lines (`#` comments); each key stands for one environment variable (config_keys()),
// and a value is applied only where that variable is unset — so the options' environment names
// (CLI11 envname) give the precedence above. man kvtool(1), ENVIRONMENT and FILES.
#pragma once
#include <map>
#include <string>

namespace kvtool::cli {

// key in the file -> environment variable it stands for.
const std::map<std::string, std::string>& config_keys();

// Parses a config file's text; USAGE naming `origin`:line for malformed lines or unknown keys.
std::map<std::string, std::string> parse_config(const std::string& text, const std::string& origin);

// Finds the config file for this command line (see above) and sets every variable it names that
// the environment does not already set. An explicit --config / KVTOOL_CONFIG file that cannot be
// read is IO_ERROR; the default location is optional. Files over 64 KiB are refused (USAGE).
// Returns the file applied ("" when none).
std::string apply_config_file(int argc, char** argv);

}  // namespace kvtool::cli
