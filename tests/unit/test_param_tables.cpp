// The kinds' parameter tables (kvtool/kinds/KIND_params.def) against the builders: every bound a
// row documents (and the command line's range check uses) is what the builder's check() accepts,
// and a row's default is always accepted.
#include <catch2/catch.hpp>

#include <string>
#include <type_traits>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/kinds/clusterkv.h"
#include "kvtool/kinds/lsh.h"
#include "kvtool/kinds/pq.h"
#include "kvtool/kinds/squeeze.h"

using namespace kvtool;

namespace {

struct Bounds {
  enum Kind { range, min, above, one_of, note } kind;
  double lo = 0, hi = 0;
  std::vector<std::string> choices = {};
};

constexpr int64_t kHeadDim = 64;  // every subspace count of the bounds' ends divides it

template <typename P, typename T>
void check_row(const char* name, T P::*field, const Bounds& b) {
  INFO("parameter " << name);
  auto accepts = [&](T v) {
    P p;
    p.*field = v;
    try {
      make_builder(p)->check(kHeadDim);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  CHECK(accepts(P{}.*field));
  if constexpr (std::is_arithmetic_v<T>) {
    if (b.kind == Bounds::one_of || b.kind == Bounds::note) return;
    const T lo = static_cast<T>(b.lo), hi = static_cast<T>(b.hi);
    if (b.kind == Bounds::above) {
      CHECK_FALSE(accepts(lo));
    } else {
      CHECK(accepts(lo));
      CHECK_FALSE(accepts(lo - 1 == P{}.*field ? lo - 2 : lo - 1));  // a default below the bounds means "chosen"
    }
    if (b.kind == Bounds::min) return;
    CHECK(accepts(hi));
    CHECK_FALSE(accepts(hi + 1));
  } else {
    if (b.kind != Bounds::one_of) return;
    for (const std::string& c : b.choices) CHECK(accepts(c));
    CHECK_FALSE(accepts("bogus"));
  }
}

template <typename Parse>
void check_text_row(const char* name, Parse parse, const Bounds& b) {
  INFO("parameter " << name);
  if (b.kind != Bounds::one_of) return;
  for (const std::string& c : b.choices) CHECK_NOTHROW(parse(c));
  CHECK_THROWS_AS(parse("bogus"), Error);
}

}  // namespace

#define KVTOOL_RANGE(lo, hi) \
  Bounds { Bounds::range, lo, hi }
#define KVTOOL_MIN(lo) \
  Bounds { Bounds::min, lo }
#define KVTOOL_ABOVE(lo, hi) \
  Bounds { Bounds::above, lo, hi }
#define KVTOOL_ONE_OF(...)                \
  Bounds {                                \
    Bounds::one_of, 0, 0, { __VA_ARGS__ } \
  }
#define KVTOOL_NOTE(text) \
  Bounds { Bounds::note }
#define CHECK_PARAM(kind, name, type, def, bounds, ...) check_row<P, type>(#name, &P::name, bounds);
#define CHECK_TEXT(kind, name, type, def, text_def, source, bounds, ...) \
  check_text_row(                                                        \
      #name, [](const std::string& t) { return kind##_parse_##name(t, #name); }, bounds);

TEST_CASE("pq's parameter table: the builder accepts its bounds and defaults") {
  using P = PqParams;
#define KVTOOL_PARAM CHECK_PARAM
#define KVTOOL_PARAM_TEXT CHECK_TEXT
#include "kvtool/kinds/pq_params.def"
}

TEST_CASE("clusterkv's parameter table: the builder accepts its bounds and defaults") {
  using P = ClusterKvParams;
#define KVTOOL_PARAM CHECK_PARAM
#define KVTOOL_PARAM_TEXT CHECK_TEXT
#include "kvtool/kinds/clusterkv_params.def"
}

TEST_CASE("lsh's parameter table: the builder accepts its bounds and defaults") {
  using P = LshParams;
#define KVTOOL_PARAM CHECK_PARAM
#define KVTOOL_PARAM_TEXT CHECK_TEXT
#include "kvtool/kinds/lsh_params.def"
}

TEST_CASE("squeeze's parameter table: the builder accepts its bounds and defaults") {
  using P = SqueezeParams;
#define KVTOOL_PARAM CHECK_PARAM
#define KVTOOL_PARAM_TEXT CHECK_TEXT
#include "kvtool/kinds/squeeze_params.def"
}
