// kind "lsh": its builder from JSON parameters (kvtool/kind_builders.h), the same names as
// `kvtool build lsh`'s long options (--bits = -K, --tables = -L).
#include "kvtool/kind_builders.h"
#include "lsh/lsh_builder.h"

namespace kvtool {

std::unique_ptr<KindBuilder> make_lsh_builder(const json& params) {
  BuildParams in("lsh", params);
  LshParams p;
  in.get("bits", p.bits);
  in.get("tables", p.tables);
  in.finish();
  return make_builder(p);
}

std::unique_ptr<KindBuilder> make_builder(const LshParams& p) { return std::make_unique<LshBuilder>(p); }

}  // namespace kvtool
