// kind "lsh": its builder from JSON parameters (kvtool/kind_builders.h), the names, types and
// defaults of its table (kvtool/kinds/lsh_params.def), as `kvtool build lsh`'s long options
// (--bits = -K, --tables = -L).
#include "common/param_json.h"
#include "kvtool/kind_builders.h"
#include "lsh/lsh_builder.h"

namespace kvtool {

std::unique_ptr<KindBuilder> make_lsh_builder(const json& params) {
  BuildParams in("lsh", params);
  LshParams p;
#define KVTOOL_PARAM KVTOOL_JSON_GET
#include "kvtool/kinds/lsh_params.def"
  in.finish();
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const LshParams& p) { return std::make_unique<LshBuilder>(p); }

}  // namespace kvtool
