// What the command-line tools read from the process environment. The library reads none of it:
// it takes explicit values (BuildOptions::threads, shard index and count), which these provide.
#pragma once
#include <cstdint>
#include <string>

namespace kvtool::cli {

// CPUs this process may use: affinity mask, cgroup v2/v1 CPU quota, SLURM_CPUS_PER_TASK (smallest
// wins; at least 1).
int default_threads();

// This task's place in a Slurm job array: SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN of
// SLURM_ARRAY_TASK_COUNT. USAGE outside a job array.
void slurm_array_shard(int64_t& index, int64_t& count);

// KVTOOL_READ_BUDGET (bytes with an optional K/M/G/T suffix; USAGE when malformed), when set,
// becomes the process's default artifact read budget (kvtool/artifact.h, default_read_budget).
void apply_read_budget_from_env();

// The path a program `name` has next to the running executable (`name` alone when that is unknown).
std::string sibling_program(const std::string& name);

}  // namespace kvtool::cli
