#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "kvtool/error.h"
#include "kvtool/store.h"
#include "parse.h"  // tools/common: kvtool store gc --grace
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
using kvtool::cli::parse_duration;

TEST_CASE("store keys never name paths: '/', '..', NUL and control characters are refused") {
  StoreKey k;
  k.tenant = "acme";
  k.model = std::string(64, 'a');
  k.adapter = std::string(64, 'b');
  k.prefix_hash = std::string(64, 'c');
  k.kind = "squeeze";
  CHECK(reason_of([&] { check_store_key(k, false); }) == "OK");
  CHECK(reason_of([&] { check_store_key(k, true); }) == "BAD_STORE_KEY");  // params digest required
  for (std::string bad :
       {std::string("a/b"), std::string(".."), std::string("."), std::string("x\\y"), std::string("nul\0byte", 8),
        std::string("tab\there"), std::string(300, 'x'), std::string()}) {
    StoreKey b = k;
    b.tenant = bad;
    INFO("tenant of " << bad.size() << " bytes");
    CHECK(reason_of([&] { check_store_key(b, false); }) == "BAD_STORE_KEY");
    b = k;
    b.kind = bad;
    CHECK(reason_of([&] { check_store_key(b, false); }) == "BAD_STORE_KEY");
  }
  CHECK(parse_duration("15m") == 900);
  CHECK(parse_duration("2h") == 7200);
  CHECK(parse_duration("0") == 0);
  CHECK(reason_of([] { parse_duration("soon"); }) == "USAGE");
  TempDir tmp;
  CHECK(reason_of([&] { Store s(tmp.file("none")); }) == "IO_ERROR");
  Store s(tmp.file("st"), true);
  CHECK(s.ls("").refs.empty());
  CHECK(reason_of([&] { s.get(k, StoreTrust{}); }) == "STORE_MISS");
  CHECK(std::filesystem::exists(tmp.file("st/objects")));
}
