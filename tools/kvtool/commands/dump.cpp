// kvtool dump --llama2c M.bin [--tokenizer T.bin] [--prompt TEXT] --tokens N [--queries] [--dtype D] -o OUT.h5
// kvtool dump --gguf M.gguf (--prompt TEXT | --prompt-file F | --token-ids F.json | --tokens-from DUMP|STATE)
// [--tokens N] [--queries] [--dtype D] -o OUT.h5
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "env.h"
#include "kvtool/blas.h"
#include "kvtool/gguf_tokenizer.h"
#include "kvtool/llama2c.h"
#include "kvtool/producers.h"

namespace kvtool::cmd {

namespace {

struct DumpArgs {
  ModelDumpOptions model;
  std::string gguf, token_ids, tokens_from, prompt_file, out, dtype = "f32", activations = "exact";
  int threads = 0;
  IdentityOptions ident;
  bool force = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open prompt file '" << path << "'");
  std::stringstream ss;
  ss << f.rdbuf();
  KVT_CHECK(ss.str().size() <= (size_t(1) << 30), USAGE, "prompt file '" << path << "' is larger than 1 GiB");
  return ss.str();
}

ModelDumpResult run_dump(DumpArgs& a, DType t) {
  if (a.gguf.empty()) {
    KVT_CHECK(!a.model.model_path.empty(), USAGE, "give the model: --llama2c M.bin or --gguf M.gguf");
    KVT_CHECK(a.token_ids.empty() && a.tokens_from.empty(), USAGE,
              "--token-ids and --tokens-from are for --gguf; a llama2.c dump takes --prompt");
    KVT_CHECK(a.model.tokens > 0, USAGE, "--llama2c needs --tokens N (positions in total)");
    return dump_llama2c(a.model, t, a.ident, a.out, a.force);
  }
  KVT_CHECK(a.model.tokenizer_path.empty(), USAGE, "--tokenizer is a llama2.c tokenizer; a GGUF carries its own");
  const int sources = !a.model.prompt.empty() + !a.prompt_file.empty() + !a.token_ids.empty() + !a.tokens_from.empty();
  KVT_CHECK(sources == 1, USAGE,
            "--gguf needs its prompt from exactly one of --prompt, --prompt-file, --token-ids and --tokens-from");
  GgufDumpOptions o;
  o.model_path = a.gguf;
  if (!a.token_ids.empty()) {
    o.prompt = read_token_ids(a.token_ids);
  } else if (!a.tokens_from.empty()) {
    o.prompt = tokens_from(a.tokens_from, a.gguf);
  } else {  // the GGUF's own tokenizer, BOS as the GGUF says (llama_tokenize with add_special)
    const std::string text = a.prompt_file.empty() ? a.model.prompt : read_text_file(a.prompt_file);
    o.prompt = GgufTokenizer(a.gguf).encode(text, true);
  }
  o.tokens = a.model.tokens;
  o.queries = a.model.queries;
  o.threads = a.threads > 0 ? a.threads : cli::default_threads();
  set_blas_threads(o.threads);
  o.llama_cpp_activations = a.activations == "llama.cpp";
  return dump_gguf(o, t, a.ident, a.out, a.force);
}

}  // namespace

cli::Command register_dump(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<DumpArgs>();
  auto* sub = app.add_subcommand("dump",
                                 "Run a model (llama2.c checkpoint or GGUF llama/qwen2) over a prompt, then greedy "
                                 "decoding, and dump post-RoPE K/V (and Q)");
  auto* l2c = sub->add_option("--llama2c", a->model.model_path, "llama2.c legacy-format checkpoint (.bin)");
  auto* gguf = sub->add_option("--gguf", a->gguf,
                               "GGUF model, architecture llama or qwen2 (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                               "q5_1, q4_K, q6_K weights; docs/models.md): its prompt is prefilled in one batch");
  l2c->excludes(gguf);
  sub->add_option("--tokenizer", a->model.tokenizer_path,
                  "llama2.c tokenizer (.bin); needed for --prompt and for the text");
  sub->add_option("--prompt", a->model.prompt,
                  "prompt text, teacher-forced after BOS (cut if longer than --tokens); --gguf: tokenized by the "
                  "GGUF's tokenizer (SentencePiece, or BPE llama3 / qwen2 / gpt-2; docs/models.md)");
  sub->add_option("--prompt-file", a->prompt_file, "--gguf: the prompt text read from a file (UTF-8)");
  sub->add_option("--token-ids", a->token_ids, "--gguf: the prompt as a JSON array of token ids");
  sub->add_option(
      "--tokens-from", a->tokens_from,
      "--gguf: the prompt is the tokens of this dump, or of this llama.cpp state file (read with the GGUF)");
  sub->add_option("--tokens", a->model.tokens,
                  "positions in total, BOS and prompt included (--gguf: default the prompt's length; more are "
                  "greedy)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--activations", a->activations,
                  "--gguf: exact (float32 inputs to every product: the model its weights define) or llama.cpp "
                  "(each product's input rounded as llama.cpp's CPU kernels round it for the weight type: bf16, "
                  "q8_0, q8_1 or q8_K blocks; to compare with llama.cpp's own K/V)")
      ->check(CLI::IsMember({"exact", "llama.cpp"}))
      ->capture_default_str();
  sub->add_flag("--queries", a->model.queries, "also write the post-RoPE queries of every position to /kv/q");
  sub->add_option("--dtype", a->dtype, "f32 | f16 | bf16")->capture_default_str();
  sub->add_option("--threads", a->threads,
                  "--gguf: threads of the batched prefill: its attention and, where the BLAS has a "
                  "setting (OpenBLAS, BLIS), its matrix products (default: the CPUs)")
      ->check(CLI::Range(0, kMaxThreads))
      ->envname("KVTOOL_THREADS");
  add_dump_output_options(sub, a->out, a->force, a->ident, flags);
  return {sub, [a, &flags] {
            DType t = parse_dtype(a->dtype);
            ModelDumpResult r = run_dump(*a, t);
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
