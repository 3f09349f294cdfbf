// kvtool dump --llama2c M.bin [--tokenizer T.bin] [--prompt TEXT] --tokens N [--queries] [--dtype D] -o OUT.h5
#include <iostream>

#include "commands.h"
#include "kvtool/llama2c.h"
#include "kvtool/producers.h"

namespace kvtool::cmd {

cli::Command register_dump(CLI::App& app, Flags& flags) {
  struct Args {
    ModelDumpOptions model;
    std::string out, dtype = "f32";
    IdentityOptions ident;
    bool force = false;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "dump", "Run a llama2.c checkpoint (BOS, prompt, greedy decoding) and dump post-RoPE K/V (and Q)");
  sub->add_option("--llama2c", a->model.model_path, "llama2.c legacy-format checkpoint (.bin)")->required();
  sub->add_option("--tokenizer", a->model.tokenizer_path,
                  "llama2.c tokenizer (.bin); needed for --prompt and for the text");
  sub->add_option("--prompt", a->model.prompt, "prompt text, teacher-forced after BOS (cut if longer than --tokens)");
  sub->add_option("--tokens", a->model.tokens, "positions in total, BOS and prompt included")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--queries", a->model.queries, "also write the post-RoPE queries of every position to /kv/q");
  sub->add_option("--dtype", a->dtype, "f32 | f16 | bf16")->capture_default_str();
  add_dump_output_options(sub, a->out, a->force, a->ident, flags);
  return {sub, [a, &flags] {
            DType t = parse_dtype(a->dtype);
            ModelDumpResult r = dump_llama2c(a->model, t, a->ident, a->out, a->force);
            json j{{"schema_version", kJsonSchemaVersion},
                   {"ok", true},
                   {"output", a->out},
                   {"tokens", r.tokens},
                   {"text", r.text},
                   {"dtype", dtype_name(t)}};
            return emit(flags, j, [&] {
              std::cout << "wrote " << a->out << " (" << r.tokens.size() << " tokens, " << dtype_name(t) << ")\n"
                        << r.text << "\n";
            });
          }};
}

}  // namespace kvtool::cmd
