#include "kvtool/json.h"

#include "kvtool/error.h"

namespace kvtool {

std::string canonical_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

json parse_json(const std::string& text, Reason reason, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    KVT_THROW(reason, what << " is not valid JSON: " << e.what());
  }
}

}  // namespace kvtool
