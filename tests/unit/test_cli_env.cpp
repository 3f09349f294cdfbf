// What the command-line tools take from the environment (tools/common/env.h, parse.h): the shard
// of a scheduler's job for --shard auto, and durations.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "config.h"
#include "env.h"
#include "parse.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
using kvtool::cli::EnvLookup;
using kvtool::cli::scheduler_shard;

namespace {

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::pair<int64_t, int64_t> shard_of(const std::map<std::string, std::string>& vars, int64_t count_flag = 0) {
  int64_t index = -1, count = -1;
  scheduler_shard(index, count, count_flag, fake_env(vars));
  return {index, count};
}

}  // namespace

TEST_CASE("cli env: --shard auto, a Slurm job array's task id counts from SLURM_ARRAY_TASK_MIN") {
  CHECK(shard_of({{"SLURM_ARRAY_TASK_ID", "11"}, {"SLURM_ARRAY_TASK_MIN", "10"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}) ==
        std::pair<int64_t, int64_t>{1, 4});
  CHECK(shard_of({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}) == std::pair<int64_t, int64_t>{3, 4});
  CHECK(reason_of([] { shard_of({{"SLURM_ARRAY_TASK_ID", "3"}}); }) == "USAGE");
  CHECK(reason_of([] { shard_of({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}); }) == "USAGE");
}

TEST_CASE(
    "cli env: --shard auto, a Kubernetes indexed Job's JOB_COMPLETION_INDEX with the count from the flag or env") {
  CHECK(shard_of({{"JOB_COMPLETION_INDEX", "2"}, {"KVTOOL_SHARD_COUNT", "5"}}) == std::pair<int64_t, int64_t>{2, 5});
  // --shard-count wins over KVTOOL_SHARD_COUNT.
  CHECK(shard_of({{"JOB_COMPLETION_INDEX", "2"}, {"KVTOOL_SHARD_COUNT", "5"}}, 3) == std::pair<int64_t, int64_t>{2, 3});
  CHECK(shard_of({{"JOB_COMPLETION_INDEX", "0"}}, 8) == std::pair<int64_t, int64_t>{0, 8});
  try {
    shard_of({{"JOB_COMPLETION_INDEX", "2"}});
    FAIL("a missing shard count was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.reason_name()) == "USAGE");
    CHECK(std::string(e.what()).find("KVTOOL_SHARD_COUNT") != std::string::npos);
  }
  CHECK(reason_of([] { shard_of({{"JOB_COMPLETION_INDEX", "-"}, {"KVTOOL_SHARD_COUNT", "5"}}); }) == "USAGE");
}

TEST_CASE("cli env: --shard auto, Slurm's variables take precedence over Kubernetes', neither is a usage error") {
  CHECK(shard_of({{"SLURM_ARRAY_TASK_ID", "1"},
                  {"SLURM_ARRAY_TASK_COUNT", "2"},
                  {"JOB_COMPLETION_INDEX", "7"},
                  {"KVTOOL_SHARD_COUNT", "9"}}) == std::pair<int64_t, int64_t>{1, 2});
  CHECK(reason_of([] { shard_of({}); }) == "USAGE");
  CHECK(reason_of([] { shard_of({{"KVTOOL_SHARD_COUNT", "4"}}); }) == "USAGE");
}

TEST_CASE("cli env: --shard I/N is range-checked and --shard-count goes with auto only") {
  int64_t i = -1, n = -1;
  cli::parse_shard("1/4", i, n);
  CHECK((i == 1 && n == 4));
  CHECK(reason_of([&] { cli::parse_shard("4/4", i, n); }) == "USAGE");
  CHECK(reason_of([&] { cli::parse_shard("1/4", i, n, 4); }) == "USAGE");
}

TEST_CASE("cli env: durations take s, m, h, d and w") {
  CHECK(cli::parse_duration("1w") == 7 * 86400);
  CHECK(cli::parse_duration("3d") == 3 * 86400);
  CHECK(cli::parse_duration("90") == 90);
  CHECK(reason_of([] { cli::parse_duration("1y"); }) == "USAGE");
  CHECK(reason_of([] { cli::parse_duration("-1w"); }) == "USAGE");
}

TEST_CASE("cli env: config files are key = value lines with known keys only") {
  auto c = cli::parse_config("# defaults\nstore = /data/st\n\n  tenant=acme  \nthreads = 4\n", "cfg");
  CHECK(c.size() == 3);
  CHECK(c.at("store") == "/data/st");
  CHECK(c.at("tenant") == "acme");
  CHECK(cli::config_keys().at("trusted-keys") == "KVTOOL_TRUSTED_KEYS");
  for (const char* bad : {"store /data", "colour = red", "store =", "store = a\nstore = b"}) {
    INFO(bad);
    try {
      cli::parse_config(bad, "cfg");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.reason_name()) == "USAGE");
      CHECK(std::string(e.what()).rfind("cfg:", 0) == 0);  // names the file and line
    }
  }
}
