// kvtool demo [--dir D] [--model M.bin] [--tokenizer T.bin]: dump, inspect, verify, build pq, eval,
// build squeeze, store put/get, load — each step printed as the command that does it.
#include <sys/stat.h>

#include <iostream>

#include "commands.h"
#include "env.h"
#include "kvtool/eval.h"
#include "kvtool/llama2c.h"
#include "kvtool/loader.h"
#include "kvtool/producers.h"
#include "kvtool/report.h"
#include "kvtool/store.h"
#include "kvtool/kinds/pq.h"
#include "kvtool/kinds/squeeze.h"

namespace kvtool::cmd {

namespace {

struct DemoArgs {
  std::string dir = "kvtool-demo", model, tokenizer;
};

// The dump: a real model's when one is given (--model, else KVTOOL_DEMO_MODEL), else a synthetic
// one. The tokenizer defaults to tok512.bin beside the model (llama2.c's layout), when there.
void make_dump(DemoArgs& a, const std::string& path) {
  if (a.model.empty() && cli::process_env("KVTOOL_DEMO_MODEL")) a.model = cli::process_env("KVTOOL_DEMO_MODEL");
  if (!a.model.empty() && a.tokenizer.empty()) {
    const size_t slash = a.model.find_last_of('/');
    const std::string beside = (slash == std::string::npos ? "" : a.model.substr(0, slash + 1)) + "tok512.bin";
    struct stat st {};
    if (stat(beside.c_str(), &st) == 0) a.tokenizer = beside;
  }
  if (!a.model.empty()) {
    ModelDumpOptions o;
    o.model_path = a.model;
    o.tokenizer_path = a.tokenizer;
    o.tokens = 256;
    o.queries = true;
    std::cout << "== kvtool dump --llama2c " << a.model << (a.tokenizer.empty() ? "" : " --tokenizer " + a.tokenizer)
              << " --tokens 256 --queries --force -o " << path << "\n";
    ModelDumpResult r = dump_llama2c(o, DType::f32, IdentityOptions{}, path);
    std::cout << "greedy text: " << r.text << "\n\n";
  } else {
    SynthOptions o;
    o.layers = 2;
    o.kv_heads = 2;
    o.q_heads = 4;
    o.head_dim = 32;
    o.tokens = 256;
    o.seed = 1;
    o.query_count = 64;
    std::cout << "== kvtool synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 256 --seed 1 --force -o "
              << path << "\n";
    synth_dump(o, IdentityOptions{}, path);
  }
}

void verify_and_eval(const std::string& art, const std::string& dump, const EvalOptions& eo,
                     const std::string& eval_args) {
  VerifyOptions vo;
  vo.source = dump;
  std::cout << "\n== kvtool verify " << art << " --source " << dump << "\n";
  cli::print_verify_result(verify_artifact(art, vo));
  std::cout << "\n== kvtool eval " << art << " --source " << dump << eval_args << "\n";
  cli::print_eval(evaluate(ArtifactReader(art), DumpReader(dump), eo));
}

// The shared-prompt flow: index the prefix once, store it by content address, fetch it back.
// Returns the path the store gives back.
std::string squeeze_store_flow(const DemoArgs& a, const std::string& dump, BuildOptions bo) {
  std::string sq = a.dir + "/demo.sq.kvi", store_dir = a.dir + "/store";
  std::cout << "\n== kvtool build squeeze " << dump
            << " --prefix 192 --observation-window 32 --percent-clusters 10 --force -o " << sq << "\n";
  SqueezeParams sp;
  sp.observation_window = 32;
  sp.percent_clusters = 10;
  bo.output = sq;
  cli::print_build_summary(build_artifact(dump, bo, *make_builder(sp)));
  Store st(store_dir, true);
  const StorePutResult put = st.put(sq, StoreTrust{});
  std::cout << "\n== kvtool store put " << sq << " --store " << store_dir << "\nstored as object " << put.object
            << "\n";
  StoreKey key = put.key;
  key.params_digest.clear();
  key.position_contract.clear();
  std::string got = st.get(key, StoreTrust{}).path;
  // Printed in full, so every echoed command can be pasted back as it is.
  std::cout << "\n== kvtool store get --store " << store_dir << " --tenant " << key.tenant << " --model " << key.model
            << " --adapter " << key.adapter << " --prefix-hash " << key.prefix_hash << " --kind squeeze\n"
            << got << "\n";
  EvalOptions se;
  se.sweep = {{"quantile", {"0.8"}}};
  verify_and_eval(got, dump, se, " --quantile 0.8");
  return got;
}

int run_demo(DemoArgs& a) {
  mkdir(a.dir.c_str(), 0755);
  const std::string path = a.dir + "/demo.h5";
  make_dump(a, path);
  std::cout << "== kvtool inspect " << path << "\n";
  cli::print_dump_inspection(inspect_dump(path));
  std::cout << "\n== kvtool verify " << path << "\n";
  cli::print_verify_result(verify_dump(path));
  const std::string art = a.dir + "/demo.pq.kvi";
  std::cout << "\n== kvtool build pq " << path << " --prefix 192 --force -o " << art << "\n";
  BuildOptions bo;
  bo.output = art;
  bo.prefix = 192;
  bo.threads = cli::default_threads();
  bo.quiet = true;
  cli::print_build_summary(build_artifact(path, bo, *make_builder(PqParams{})));
  EvalOptions eo;
  eo.sweep = {{"budget", {"0.05", "0.1", "0.2"}}};
  verify_and_eval(art, path, eo, " --budget 0.05 --budget 0.1 --budget 0.2");
  const std::string got = squeeze_store_flow(a, path, bo);
  // A decode runtime's view: both artifacts published into a pool, every dumped query replayed.
  LoadOptions dl;
  dl.artifacts = {art, got};
  dl.source = path;
  std::cout << "\n== kvtool load " << art << " " << got << " --source " << path << " --device cpu\n";
  cli::print_load(load_artifacts(dl));
  return 0;
}

}  // namespace

cli::Command register_demo(CLI::App& app, Flags&) {
  auto a = std::make_shared<DemoArgs>();
  auto* sub =
      app.add_subcommand("demo",
                         "A tour in --dir: dump a real model (or a synthetic one), inspect, verify, build pq, eval, "
                         "build squeeze, store put/get, load; each step printed as the command that does it");
  sub->add_option("--dir", a->dir, "working directory for the demo files")->capture_default_str();
  sub->add_option("--model", a->model,
                  "llama2.c checkpoint for a real forward pass (default: $KVTOOL_DEMO_MODEL; neither: a synthetic "
                  "dump)");
  sub->add_option("--tokenizer", a->tokenizer, "tokenizer for --model (default: tok512.bin next to it)");
  return {sub, [a] { return run_demo(*a); }};
}

}  // namespace kvtool::cmd
