#include "env.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "parse.h"

namespace kvtool::cli {

namespace {

int cgroup_cpu_limit() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota, period;
  if (v2 >> quota >> period && quota != "max") {
    double q = std::atof(quota.c_str()), p = std::atof(period.c_str());
    if (q > 0 && p > 0) return std::max(1, static_cast<int>(std::ceil(q / p)));
  }
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long long q = -1, p = -1;
  if (q1 >> q && p1 >> p && q > 0 && p > 0) return std::max(1, static_cast<int>((q + p - 1) / p));
  return 0;
}

}  // namespace

int default_threads() {
  int n = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (int c = cgroup_cpu_limit(); c > 0) n = std::min(n, c);
  if (const char* s = std::getenv("SLURM_CPUS_PER_TASK")) {
    int v = std::atoi(s);
    if (v > 0) n = std::min(n, v);
  }
  return std::max(1, n);
}

const char* process_env(const char* name) { return std::getenv(name); }

void scheduler_shard(int64_t& index, int64_t& count, int64_t count_flag, const EnvLookup& env) {
  if (const char* id = env("SLURM_ARRAY_TASK_ID")) {
    const char* cnt = env("SLURM_ARRAY_TASK_COUNT");
    KVT_CHECK(cnt, USAGE, "--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not");
    const char* mn = env("SLURM_ARRAY_TASK_MIN");
    index = parse_int(id, "SLURM_ARRAY_TASK_ID") - (mn ? parse_int(mn, "SLURM_ARRAY_TASK_MIN") : 0);
    count = parse_int(cnt, "SLURM_ARRAY_TASK_COUNT");
    return;
  }
  if (const char* id = env("JOB_COMPLETION_INDEX")) {
    index = parse_int(id, "JOB_COMPLETION_INDEX");
    if (count_flag > 0) {
      count = count_flag;
      return;
    }
    const char* cnt = env("KVTOOL_SHARD_COUNT");
    KVT_CHECK(cnt, USAGE,
              "--shard auto in a Kubernetes indexed Job (JOB_COMPLETION_INDEX="
                  << id
                  << ") needs the shard count: "
                     "--shard-count N or KVTOOL_SHARD_COUNT=N (the Job's spec.completions)");
    count = parse_int(cnt, "KVTOOL_SHARD_COUNT");
    return;
  }
  KVT_THROW(USAGE,
            "--shard auto needs a scheduler's shard index: SLURM_ARRAY_TASK_ID (a Slurm job array) or "
            "JOB_COMPLETION_INDEX (a Kubernetes indexed Job); neither is set");
}

std::string sibling_program(const std::string& name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (self.parent_path() / name).string();
}

}  // namespace kvtool::cli

namespace kvtool::cli {

void apply_read_budget_from_env() {
  const char* env = std::getenv("KVTOOL_READ_BUDGET");
  if (!env) return;
  try {
    const int64_t b = parse_bytes(env);
    KVT_CHECK(b > 0, USAGE, "zero");
    set_default_read_budget(static_cast<uint64_t>(b));
  } catch (const Error&) {
    KVT_THROW(USAGE, "KVTOOL_READ_BUDGET='" << env << "' is not a byte count (examples: 512M, 8G)");
  }
}

}  // namespace kvtool::cli
