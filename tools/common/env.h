// What the command-line tools read from the process environment. The library reads none of it:
// it takes explicit values (BuildOptions::threads, shard index and count), which these provide.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace kvtool::cli {

// CPUs this process may use: affinity mask, cgroup v2/v1 CPU quota, SLURM_CPUS_PER_TASK (smallest
// wins; at least 1).
int default_threads();

// Reads one environment variable (nullptr when unset); std::getenv unless a test supplies another.
using EnvLookup = std::function<const char*(const char*)>;
const char* process_env(const char* name);

// This task's place among the shards of a scheduler's job, for `--shard auto`. In this order (the
// first whose index variable is set wins, so one job never mixes two schedulers' variables):
//   1. a Slurm job array: SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT;
//   2. a Kubernetes indexed Job: JOB_COMPLETION_INDEX of `count_flag` (--shard-count) when > 0,
//      else of KVTOOL_SHARD_COUNT (Kubernetes does not put the completion count in the pod's env).
// USAGE, naming what is missing, outside both or without a count.
void scheduler_shard(int64_t& index, int64_t& count, int64_t count_flag = 0, const EnvLookup& env = process_env);

// KVTOOL_READ_BUDGET (bytes with an optional K/M/G/T suffix; USAGE when malformed), when set,
// becomes the process's default artifact read budget (kvtool/artifact.h, default_read_budget).
void apply_read_budget_from_env();

// The path a program `name` has next to the running executable (`name` alone when that is unknown).
std::string sibling_program(const std::string& name);

}  // namespace kvtool::cli
