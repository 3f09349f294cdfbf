#include "config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvtool/error.h"

namespace kvtool::cli {

namespace {

constexpr size_t kMaxConfigBytes = 64 * 1024;

std::string trim(const std::string& s) {
  const char* ws = " \t\r";
  size_t a = s.find_first_not_of(ws), b = s.find_last_not_of(ws);
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// The file the command line names (--config F or --config=F), else $KVTOOL_CONFIG; "" when neither.
std::string explicit_config(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) break;
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--config=", 9) == 0) return argv[i] + 9;
  }
  const char* env = std::getenv("KVTOOL_CONFIG");
  return env && *env ? env : "";
}

std::string default_config() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/kvtool/config";
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.config/kvtool/config" : "";
}

std::string read_config(const std::string& path) {
  struct stat st {};
  KVT_CHECK(stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), IO_ERROR,
            "config file '" << path << "' does not exist or is not a regular file");
  KVT_CHECK(static_cast<size_t>(st.st_size) <= kMaxConfigBytes, USAGE,
            "config file '" << path << "' is " << st.st_size << " bytes; a config file is at most 64 KiB");
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot read config file '" << path << "'");
  std::string text(kMaxConfigBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  KVT_CHECK(text.size() <= kMaxConfigBytes, USAGE, "config file '" << path << "' is over 64 KiB");
  return text;
}

}  // namespace

const std::map<std::string, std::string>& config_keys() {
  static const std::map<std::string, std::string> keys{
      {"store", "KVTOOL_STORE"},     {"tenant", "KVTOOL_TENANT"},           {"trusted-keys", "KVTOOL_TRUSTED_KEYS"},
      {"threads", "KVTOOL_THREADS"}, {"read-budget", "KVTOOL_READ_BUDGET"}, {"shard-count", "KVTOOL_SHARD_COUNT"}};
  return keys;
}

std::map<std::string, std::string> parse_config(const std::string& text, const std::string& origin) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    KVT_CHECK(eq != std::string::npos, USAGE, origin << ":" << no << ": expected 'key = value', got '" << line << "'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    KVT_CHECK(config_keys().count(key), USAGE,
              origin << ":" << no << ": unknown key '" << key
                     << "' (known: store, tenant, trusted-keys, threads, read-budget, shard-count)");
    KVT_CHECK(!value.empty() && value.find('\0') == std::string::npos, USAGE,
              origin << ":" << no << ": key '" << key << "' has no value");
    KVT_CHECK(!out.count(key), USAGE, origin << ":" << no << ": key '" << key << "' is set twice");
    out[key] = value;
  }
  return out;
}

std::string apply_config_file(int argc, char** argv) {
  std::string path = explicit_config(argc, argv);
  if (path.empty()) {
    path = default_config();
    struct stat st {};
    if (path.empty() || stat(path.c_str(), &st) != 0) return "";  // the default file is optional
  }
  for (const auto& [key, value] : parse_config(read_config(path), path))
    setenv(config_keys().at(key).c_str(), value.c_str(), 0);  // 0: the environment wins
  return path;
}

}  // namespace kvtool::cli
