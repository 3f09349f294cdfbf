// kind "pq": its builder from JSON parameters (kvtool/kind_builders.h), the names, types and
// defaults of its table (kvtool/kinds/pq_params.def), as `kvtool build pq`'s options.
#include "common/param_json.h"
#include "kvtool/kind_builders.h"
#include "pq/pq_builder.h"

namespace kvtool {

std::unique_ptr<KindBuilder> make_pq_builder(const json& params) {
  BuildParams in("pq", params);
  PqParams p;
#define KVTOOL_PARAM KVTOOL_JSON_GET
#include "kvtool/kinds/pq_params.def"
  in.finish();
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const PqParams& p) { return std::make_unique<PqBuilder>(p); }

}  // namespace kvtool
