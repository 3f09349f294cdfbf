// Parsers of command-line values: integers, shards, layer ranges, byte sizes and durations. Each
// throws a USAGE error naming the value on bad input.
#pragma once
#include <cstdint>
#include <string>

namespace kvtool::cli {

// A whole decimal integer; `what` names it in the error.
int64_t parse_int(const std::string& s, const char* what);
// "I/N" or "auto" (a scheduler's job: scheduler_shard in env.h, `count_flag` = --shard-count);
// needs 0 <= I < N.
void parse_shard(const std::string& spec, int64_t& index, int64_t& count, int64_t count_flag = 0);
// "A-B" or "A" (inclusive), as --layers: kvtool::parse_layer_range (kvtool/layers.h).
void parse_layers(const std::string& spec, int64_t& first, int64_t& last);
// "4096", "512K", "64M", "8G", "1T" (binary units; "B"/"iB" suffixes accepted).
int64_t parse_bytes(const std::string& s);
// Seconds from "90", "90s", "15m", "2h", "7d", "1w".
int64_t parse_duration(const std::string& s);

}  // namespace kvtool::cli
