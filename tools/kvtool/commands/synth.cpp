// kvtool synth --layers L --kv-heads H --q-heads Hq --head-dim d --tokens T --seed S [--dtype D] -o OUT.h5
#include <iostream>

#include "commands.h"
#include "env.h"
#include "kvtool/producers.h"

namespace kvtool::cmd {

cli::Command register_synth(CLI::App& app, Flags& flags) {
  struct Args {
    SynthOptions opt;
    std::string out, dtype = "f16";
    IdentityOptions ident;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  SynthOptions& o = a->opt;
  auto* sub = app.add_subcommand(
      "synth", "Write a deterministic synthetic dump of any size (RoPE, outlier channels, a sink row)");
  sub->add_option("--layers", o.layers, "layers L")->required()->check(CLI::PositiveNumber);
  sub->add_option("--kv-heads", o.kv_heads, "KV heads H_kv")->required()->check(CLI::PositiveNumber);
  sub->add_option("--q-heads", o.q_heads, "query heads H_q (multiple of H_kv)")->required()->check(CLI::PositiveNumber);
  sub->add_option("--head-dim", o.head_dim, "head dimension d (even)")->required()->check(CLI::PositiveNumber);
  sub->add_option("--tokens", o.tokens, "rows T")->required()->check(CLI::PositiveNumber);
  sub->add_option("--seed", o.seed, "seed")->required();
  sub->add_option("--dtype", a->dtype, "f16 | bf16 | f32")->capture_default_str();
  sub->add_option("--query-count", o.query_count, "queries of the last N positions written to /kv/q")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--threads", o.threads, "worker threads (default: the CPUs this process may use); same file for any")
      ->check(CLI::NonNegativeNumber)
      ->envname("KVTOOL_THREADS");
  add_dump_output_options(sub, a->out, a->force, a->ident, flags);
  return {sub, [a, &flags] {
            a->opt.dtype = parse_dtype(a->dtype);
            if (a->opt.threads == 0) a->opt.threads = cli::default_threads();
            synth_dump(a->opt, a->ident, a->out, a->force, flags.quiet || flags.json);
            json j{{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"output", a->out}, {"synthetic", true}};
            return emit(flags, j, [&] { std::cout << "wrote synthetic dump " << a->out << "\n"; });
          }};
}

}  // namespace kvtool::cmd
