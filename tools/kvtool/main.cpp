// kvtool: inspect, verify, export, keygen, sign, dump, synth, demo, reasons.
// Argument parsing and printing only; all logic lives in libkvtool.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include <iomanip>
#include <iostream>

#include "cli.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/loader.h"
#include "kvtool/builder.h"
#include "kvtool/producers.h"
#include "kvtool/eval.h"
#include "kvtool/query.h"
#include "squeeze/squeeze.h"
#include "pq/pq.h"
#include "kvtool/report.h"
#include "kvtool/source_binding.h"
#include "query_input.h"
#include "kvtool/signing.h"
#include "kvtool/store.h"
#ifdef KVTOOL_WITH_CUDA
#include "kvtool/cuda_backend.h"
#endif

using namespace kvtool;

#ifdef KVTOOL_WITH_CUDA
#define KVTOOL_CUDA_NOTE ""
#else
#define KVTOOL_CUDA_NOTE " (this kvtool was built without CUDA)"
#endif

namespace {

std::vector<PublicKeyRaw> trusted_keys(const std::vector<std::string>& pubkeys, const std::string& dir) {
  std::vector<PublicKeyRaw> keys;
  for (const auto& p : pubkeys) keys.push_back(load_public_key(p));
  if (!dir.empty()) {
    auto more = load_trusted_keys(dir);
    KVT_CHECK(!more.empty(), USAGE, "--trusted-keys directory '" << dir << "' holds no *.pem keys");
    keys.insert(keys.end(), more.begin(), more.end());
  }
  return keys;
}

void require_file(const std::string& p, const char* what) {
  struct stat st {};
  KVT_CHECK(stat(p.c_str(), &st) == 0, IO_ERROR, what << " '" << p << "' does not exist");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kvtool: offline retrieval indexes over dumped attention K/V caches.\n"
      "Dumps are kvdump v1 (HDF5); artifacts are signed kvi v1 containers. See kvtool(1)."};
  app.set_version_flag("--version", std::string("kvtool ") + KVTOOL_VERSION);
  app.require_subcommand(1);
  bool as_json = false, quiet = false;

  // inspect
  std::string inspect_path;
  int top_channels = 3;
  auto* inspect = app.add_subcommand("inspect", "Show shapes, identity, byte ledger and health of a dump, or the manifest, sections and signature of an artifact");
  inspect->add_option("FILE", inspect_path, "dump (.h5) or artifact (.kvi); detected by content")->required();
  inspect->add_option("--top-channels", top_channels, "outlier channels listed per (layer, head)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  inspect->add_flag("--json", as_json, "machine-readable output");

  // verify
  std::string verify_path;
  VerifyOptions vopt;
  std::vector<std::string> pubkeys;
  std::string trusted_dir;
  auto* verify = app.add_subcommand("verify", "Check structure, every digest, the signature and (with --source) the binding to a dump");
  verify->add_option("FILE", verify_path, "dump or artifact")->required();
  verify->add_option("--source", vopt.source, "dump the artifact must have been built from (content digest of its covered range)");
  verify->add_flag("--strict-snapshot", vopt.strict_snapshot, "also require the dump's snapshot digest (generations, frontier) to match");
  verify->add_option("--pubkey", pubkeys, "trusted Ed25519 public key (PEM); may be repeated");
  verify->add_option("--trusted-keys", trusted_dir, "directory of trusted public keys (*.pem)");
  verify->add_flag("--require-signature", vopt.require_signature, "fail unsigned artifacts");
  verify->add_flag("--json", as_json, "machine-readable output");

  // export
  std::string export_in, export_out;
  auto* exp = app.add_subcommand("export", "Write every section of an artifact as an HDF5 dataset (manifest as an attribute)");
  exp->add_option("ART", export_in, "artifact (.kvi)")->required();
  exp->add_option("-o,--output", export_out, "output HDF5 file")->required();
  exp->add_flag("--json", as_json, "machine-readable output");

  // keygen
  std::string keygen_out;
  auto* keygen = app.add_subcommand("keygen", "Create an Ed25519 signing key (KEY.pem, mode 0600) and KEY.pub.pem; never overwrites");
  keygen->add_option("-o,--output", keygen_out, "private key path, e.g. key.pem")->required();
  keygen->add_flag("--json", as_json, "machine-readable output");

  // sign
  std::string sign_path, sign_key;
  auto* sign = app.add_subcommand("sign", "Sign (or re-sign) an artifact's manifest in place, atomically");
  sign->add_option("ART", sign_path, "artifact (.kvi)")->required();
  sign->add_option("--key", sign_key, "Ed25519 private key (PEM)")->required();
  sign->add_flag("--json", as_json, "machine-readable output");

  // dump
  ModelDumpOptions mopt;
  std::string dump_out, dump_dtype = "f32";
  IdentityOptions ident;
  auto* dump = app.add_subcommand("dump", "Run a llama2.c checkpoint (BOS, prompt, greedy decoding) and dump post-RoPE K/V (and Q)");
  dump->add_option("--llama2c", mopt.model_path, "llama2.c legacy-format checkpoint (.bin)")->required();
  dump->add_option("--tokenizer", mopt.tokenizer_path, "llama2.c tokenizer (.bin); needed for --prompt and for the text");
  dump->add_option("--prompt", mopt.prompt, "prompt text, teacher-forced after BOS (cut if longer than --tokens)");
  dump->add_option("--tokens", mopt.tokens, "positions in total, BOS and prompt included")->required()->check(CLI::PositiveNumber);
  dump->add_flag("--queries", mopt.queries, "also write the post-RoPE queries of every position to /kv/q");
  dump->add_option("--dtype", dump_dtype, "f32 | f16 | bf16")->capture_default_str();
  dump->add_option("-o,--output", dump_out, "output dump (.h5)")->required();
  cli::add_identity_options(dump, ident);
  dump->add_flag("--json", as_json, "machine-readable summary");
  dump->add_flag("-q,--quiet", quiet, "print nothing on success");

  // synth
  SynthOptions sopt;
  std::string synth_out, synth_dtype = "f16";
  IdentityOptions sident;
  auto* synth = app.add_subcommand("synth", "Write a deterministic synthetic dump of any size (RoPE, outlier channels, a sink row)");
  synth->add_option("--layers", sopt.layers, "layers L")->required()->check(CLI::PositiveNumber);
  synth->add_option("--kv-heads", sopt.kv_heads, "KV heads H_kv")->required()->check(CLI::PositiveNumber);
  synth->add_option("--q-heads", sopt.q_heads, "query heads H_q (multiple of H_kv)")->required()->check(CLI::PositiveNumber);
  synth->add_option("--head-dim", sopt.head_dim, "head dimension d (even)")->required()->check(CLI::PositiveNumber);
  synth->add_option("--tokens", sopt.tokens, "rows T")->required()->check(CLI::PositiveNumber);
  synth->add_option("--seed", sopt.seed, "seed")->required();
  synth->add_option("--dtype", synth_dtype, "f16 | bf16 | f32")->capture_default_str();
  synth->add_option("--query-count", sopt.query_count, "queries of the last N positions written to /kv/q")->capture_default_str()->check(CLI::NonNegativeNumber);
  synth->add_option("-o,--output", synth_out, "output dump (.h5)")->required();
  cli::add_identity_options(synth, sident);
  synth->add_flag("--json", as_json, "machine-readable summary");
  synth->add_flag("-q,--quiet", quiet, "print nothing on success");

  // demo
  std::string demo_dir = "kvtool-demo", demo_model, demo_tok;
  auto* demo = app.add_subcommand("demo", "Make a dump from a real model (or a synthetic one), inspect it and verify it");
  demo->add_option("--dir", demo_dir, "working directory for the demo files")->capture_default_str();
  demo->add_option("--model", demo_model, "llama2.c checkpoint (default: ../shared/models/stories260K.bin when present)");
  demo->add_option("--tokenizer", demo_tok, "tokenizer for --model (default: tok512.bin next to it)");

  // query
  std::string q_art, q_src, q_vec, q_budget = "0.1";
  int64_t q_layer = 0, q_head = 0, q_pos = -1;
  auto* query = app.add_subcommand("query", "Candidate rows of one (layer, query head) for a dumped query position or a given vector");
  query->add_option("ART", q_art, "artifact (.kvi)")->required();
  query->add_option("--source", q_src, "dump the artifact was built from (checked by content digest)")->required();
  query->add_option("--layer", q_layer, "layer")->required();
  query->add_option("--q-head", q_head, "query head (its kv head comes from q_to_kv_head)")->required();
  auto* qp = query->add_option("--position", q_pos, "use the dumped query at this position (>= coverage end - 1)");
  auto* qv = query->add_option("--vector", q_vec, "query vector file: d numbers as text, or raw float32 (.f32/.bin)");
  qp->excludes(qv);
  query->add_option("--budget", q_budget, "index-chosen rows: a fraction of the indexed rows (0.1, 10%) or a count (64)")->capture_default_str();
  int64_t q_min_coll = 2;
  query->add_option("--min-collisions", q_min_coll, "lsh: emit rows colliding in at least c tables")->capture_default_str();
  double q_quantile = -1;
  bool q_flat = false;
  query->add_option("--quantile", q_quantile, "squeeze: calibrated quantile whose threshold to apply (default: the first calibrated)");
  query->add_flag("--flat", q_flat, "squeeze: score every fine centroid (the reference's lookup) instead of the two-level pass");
  query->add_flag("--json", as_json, "machine-readable receipt");

  // eval
  std::string e_art, e_src, e_csv, e_plot;
  std::vector<std::string> e_budgets;
  auto* eval = app.add_subcommand("eval", "Retained attention mass, recall, output error and bytes against dense attention");
  eval->add_option("ART", e_art, "artifact (.kvi)")->required();
  eval->add_option("--source", e_src, "dump with /kv/q queries at positions >= the coverage end")->required();
  eval->add_option("--budget", e_budgets, "budget(s); several give a curve (default 0.1)");
  std::vector<int64_t> e_min_coll;
  eval->add_option("--min-collisions", e_min_coll, "lsh: collision threshold(s) c (default 2)");
  std::vector<double> e_quantiles;
  eval->add_option("--quantile", e_quantiles, "squeeze: quantile(s) to evaluate, hierarchical and flat (default: all calibrated)");
  eval->add_option("--csv", e_csv, "write one row per (budget, layer, query head, position)");
  eval->add_option("--plot", e_plot, "write an SVG of retained mass vs selected fraction");
  eval->add_flag("--json", as_json, "machine-readable output");
  eval->add_flag("-q,--quiet", quiet, "no progress");

  // merge
  std::vector<std::string> m_in;
  std::string m_out, m_key;
  auto* merge = app.add_subcommand("merge", "Combine shard artifacts (same source, kind, params) into the artifact an unsharded build gives");
  merge->add_option("SHARDS", m_in, "shard artifacts")->required();
  merge->add_option("-o,--output", m_out, "merged artifact")->required();
  merge->add_option("--sign-key", m_key, "Ed25519 private key (PEM) to sign the merged artifact");
  merge->add_flag("--json", as_json, "machine-readable summary");
  merge->add_flag("-q,--quiet", quiet, "no progress");

  // build → kvtool-KIND build
  std::string b_kind;
  auto* build = app.add_subcommand("build", "Run the builder of an index kind: kvtool build KIND ARGS... = kvtool-KIND build ARGS...");
  build->add_option("KIND", b_kind, "pq | clusterkv | lsh | squeeze")->required();
  build->prefix_command();

  // store
  std::string st_dir, st_art, st_grace = "1h";
  int64_t st_keep = 0;
  StoreKey st_key;
  auto* store = app.add_subcommand("store", "Content-addressed prefix store: put, get, ls, rm, gc (formats/store-v1.md)");
  store->require_subcommand(1);
  auto add_key = [&](CLI::App* c, bool params_required) {
    c->add_option("--tenant", st_key.tenant, "tenant namespace")->required();
    c->add_option("--model", st_key.model, "model artifact SHA-256")->required();
    c->add_option("--adapter", st_key.adapter, "adapter-set SHA-256")->required();
    c->add_option("--prefix-hash", st_key.prefix_hash, "prefix-token hash (the artifact's source.prefix_tokens_sha256)")->required();
    c->add_option("--kind", st_key.kind, "index kind")->required();
    auto* pd = c->add_option("--params-digest", st_key.params_digest, "params digest (needed when several params are stored)");
    if (params_required) pd->required();
    c->add_option("--position-contract", st_key.position_contract, "position contract (optional filter)");
  };
  auto* st_put = store->add_subcommand("put", "Verify an artifact and store it under the key its manifest binds");
  st_put->add_option("ART", st_art, "artifact")->required();
  auto* st_get = store->add_subcommand("get", "Print the path of the verified artifact stored for a key");
  add_key(st_get, false);
  auto* st_ls = store->add_subcommand("ls", "List the refs");
  auto* st_rm = store->add_subcommand("rm", "Remove the refs of a key (objects go at the next gc)");
  add_key(st_rm, false);
  auto* st_gc = store->add_subcommand("gc", "Drop old refs (--keep-last) and unreferenced objects older than --grace");
  st_gc->add_option("--keep-last", st_keep, "keep the newest N refs per (tenant, model, adapter, prefix, kind); 0 keeps all")->capture_default_str();
  st_gc->add_option("--grace", st_grace, "only remove unreferenced objects older than this (s, m, h, d)")->capture_default_str();
  for (auto* c : {st_put, st_get, st_ls, st_rm, st_gc}) {
    c->add_option("--store", st_dir, "store directory")->required();
    c->add_flag("--json", as_json, "machine-readable output");
  }

  // load
  LoadOptions lo;
  std::string ld_device = "auto", ld_host_budget = "8G", ld_device_budget = "4G", ld_budget = "0.1", ld_trusted;
  std::vector<std::string> ld_pubkeys;
  auto* load = app.add_subcommand("load", "Publish artifacts into a runtime pool (host/GPU), run every dumped query through it and "
                                          "check the answers against kvtool query; print receipts, bytes per tier, publish "
                                          "bandwidth and query latency");
  load->add_option("ART", lo.artifacts, "artifacts (.kvi) to publish, each under its path as the pool key");
  load->add_option("--source", lo.source, "dump the artifacts were built from: binding checked, its queries replayed");
  load->add_option("--store", lo.store_dir, "prefix store directory: also publish the artifact stored for the key below");
  load->add_option("--tenant", lo.store_key.tenant, "tenant: the store key's, and the tenant every artifact must belong to");
  load->add_option("--model", lo.store_key.model, "store key: model artifact SHA-256");
  load->add_option("--adapter", lo.store_key.adapter, "store key: adapter-set SHA-256");
  load->add_option("--prefix-hash", lo.store_key.prefix_hash, "store key: prefix-token hash");
  load->add_option("--kind", lo.store_key.kind, "store key: index kind");
  load->add_option("--params-digest", lo.store_key.params_digest, "store key: params digest (when several are stored)");
  load->add_option("--position-contract", lo.store_key.position_contract, "store key: position contract (optional)");
  load->add_option("--device", ld_device, "auto (a GPU when one is usable), cpu (host tier only) or cuda (require a GPU)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  load->add_option("--host-budget", ld_host_budget, "host tier byte budget (K/M/G/T binary suffixes)")->capture_default_str();
  load->add_option("--device-budget", ld_device_budget, "device tier byte budget")->capture_default_str();
  load->add_option("--budget", ld_budget, "index-chosen rows per query: a fraction (0.1, 10%) or a count (64)")->capture_default_str();
  load->add_option("--min-collisions", lo.min_collisions, "lsh: rows colliding in at least c tables")->capture_default_str();
  load->add_option("--pubkey", ld_pubkeys, "trusted Ed25519 public key (PEM); may be repeated");
  load->add_option("--trusted-keys", ld_trusted, "directory of trusted public keys (*.pem)");
  load->add_flag("--require-signature", lo.trust.require_signature, "refuse unsigned artifacts");
  load->add_flag("--json", as_json, "machine-readable output");

  // reasons
  auto* reasons = app.add_subcommand("reasons", "List every reason code with its exit code");
  reasons->add_flag("--json", as_json, "machine-readable output");

  return cli::run("kvtool", app, argc, argv, &as_json, [&]() -> int {
    if (*inspect) {
      FileKind k = detect_file_kind(inspect_path);
      KVT_CHECK(k != FileKind::unknown, UNKNOWN_FILE_TYPE,
                "'" << inspect_path << "' is neither a kvdump (HDF5) nor a kvi artifact");
      json j = k == FileKind::dump ? inspect_dump(inspect_path, top_channels) : inspect_artifact(inspect_path);
      if (as_json)
        cli::print_json(j);
      else if (k == FileKind::dump)
        cli::print_dump_inspection(j);
      else
        cli::print_artifact_inspection(j);
      return 0;
    }
    if (*verify) {
      FileKind k = detect_file_kind(verify_path);
      KVT_CHECK(k != FileKind::unknown, UNKNOWN_FILE_TYPE,
                "'" << verify_path << "' is neither a kvdump (HDF5) nor a kvi artifact");
      vopt.trusted_keys = trusted_keys(pubkeys, trusted_dir);
      if (!vopt.source.empty()) require_file(vopt.source, "source dump");
      json j;
      if (k == FileKind::dump) {
        KVT_CHECK(vopt.source.empty() && vopt.trusted_keys.empty() && !vopt.require_signature && !vopt.strict_snapshot,
                  USAGE, "--source, --strict-snapshot and signature options apply to artifacts, not to dumps");
        j = verify_dump(verify_path);
      } else {
        j = verify_artifact(verify_path, vopt);
      }
      if (as_json)
        cli::print_json(j);
      else
        cli::print_verify_result(j);
      return 0;
    }
    if (*exp) {
      json j = export_artifact(export_in, export_out);
      if (as_json) cli::print_json(j);
      else std::cout << "wrote " << j["sections"] << " sections of " << export_in << " to " << export_out << "\n";
      return 0;
    }
    if (*keygen) {
      std::string pub = generate_keypair(keygen_out);
      PublicKeyRaw raw = load_public_key(pub);
      json j{{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"private_key", keygen_out}, {"public_key", pub}, {"key_id", key_id(raw)}};
      if (as_json) cli::print_json(j);
      else std::cout << "wrote " << keygen_out << " (private, mode 0600) and " << pub << "\nkey id " << key_id(raw) << "\n";
      return 0;
    }
    if (*sign) {
      SigningKey key = SigningKey::load(sign_key);
      sign_artifact(sign_path, key);
      json j{{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"artifact", sign_path}, {"key_id", key_id(key.public_key())}};
      if (as_json) cli::print_json(j);
      else std::cout << "signed " << sign_path << " with key " << key_id(key.public_key()) << "\n";
      return 0;
    }
    if (*dump) {
      DType t = parse_dtype(dump_dtype);
      ModelDumpResult r = dump_llama2c(mopt, t, ident, dump_out);
      json j{{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"output", dump_out}, {"tokens", r.tokens}, {"text", r.text}, {"dtype", dtype_name(t)}};
      if (as_json) cli::print_json(j);
      else if (!quiet) std::cout << "wrote " << dump_out << " (" << r.tokens.size() << " tokens, " << dtype_name(t) << ")\n" << r.text << "\n";
      return 0;
    }
    if (*synth) {
      sopt.dtype = parse_dtype(synth_dtype);
      synth_dump(sopt, sident, synth_out, true, quiet || as_json);
      json j{{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"output", synth_out}, {"synthetic", true}};
      if (as_json) cli::print_json(j);
      else if (!quiet) std::cout << "wrote synthetic dump " << synth_out << "\n";
      return 0;
    }
    if (*demo) {
      if (demo_model.empty()) {
        struct stat st {};
        if (stat("../shared/models/stories260K.bin", &st) == 0) {
          demo_model = "../shared/models/stories260K.bin";
          if (demo_tok.empty()) demo_tok = "../shared/models/tok512.bin";
        }
      }
      mkdir(demo_dir.c_str(), 0755);
      std::string path = demo_dir + "/demo.h5";
      if (!demo_model.empty()) {
        ModelDumpOptions o;
        o.model_path = demo_model;
        o.tokenizer_path = demo_tok;
        o.tokens = 256;
        o.queries = true;
        std::cout << "== kvtool dump --llama2c " << demo_model << " --tokens 256 --queries -o " << path << "\n";
        ModelDumpResult r = dump_llama2c(o, DType::f32, IdentityOptions{}, path);
        std::cout << "greedy text: " << r.text << "\n\n";
      } else {
        SynthOptions o;
        o.layers = 2; o.kv_heads = 2; o.q_heads = 4; o.head_dim = 32; o.tokens = 256; o.seed = 1; o.query_count = 64;
        std::cout << "== kvtool synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 32 --tokens 256 --seed 1 -o " << path << "\n";
        synth_dump(o, IdentityOptions{}, path);
      }
      std::cout << "== kvtool inspect " << path << "\n";
      cli::print_dump_inspection(inspect_dump(path));
      std::cout << "\n== kvtool verify " << path << "\n";
      cli::print_verify_result(verify_dump(path));
      std::string art = demo_dir + "/demo.pq.kvi";
      std::cout << "\n== kvtool build pq " << path << " --prefix 192 -o " << art << "\n";
      BuildOptions bo;
      bo.output = art;
      bo.prefix = 192;
      bo.quiet = true;
      cli::print_build_summary(build_artifact(path, bo, PqBuilder(PqParams{})));
      std::cout << "\n== kvtool verify " << art << " --source " << path << "\n";
      VerifyOptions vo;
      vo.source = path;
      cli::print_verify_result(verify_artifact(art, vo));
      std::cout << "\n== kvtool eval " << art << " --source " << path << " --budget 0.05 --budget 0.1 --budget 0.2\n";
      ArtifactReader ar(art);
      DumpReader dr(path);
      EvalOptions eo;
      eo.budgets = {Budget::parse("0.05"), Budget::parse("0.1"), Budget::parse("0.2")};
      cli::print_eval(evaluate(ar, dr, eo));
      // The shared-prompt flow: index the prefix once, store it by content address, fetch it back.
      std::string sq = demo_dir + "/demo.sq.kvi", store_dir = demo_dir + "/store";
      std::cout << "\n== kvtool build squeeze " << path << " --prefix 192 --observation-window 32 -o " << sq << "\n";
      SqueezeParams sp;
      sp.observation_window = 32;
      sp.percent_clusters = 10;
      bo.output = sq;
      cli::print_build_summary(build_artifact(path, bo, SqueezeBuilder(sp)));
      Store st(store_dir, true);
      json put = st.put(sq);
      std::cout << "\n== kvtool store put " << sq << " --store " << store_dir << "\nstored as object " << put["object"].get<std::string>() << "\n";
      StoreKey key;
      const json& k = put["key"];
      key.tenant = k["tenant"];
      key.model = k["model"];
      key.adapter = k["adapter"];
      key.prefix_hash = k["prefix_hash"];
      key.kind = k["kind"];
      std::string got = st.get(key)["path"];
      std::cout << "\n== kvtool store get --store " << store_dir << " --tenant " << key.tenant << " --model " << key.model.substr(0, 12)
                << "... --adapter " << key.adapter.substr(0, 12) << "... --prefix-hash " << key.prefix_hash.substr(0, 12)
                << "... --kind squeeze\n" << got << "\n";
      vo.source = path;
      std::cout << "\n== kvtool verify " << got << " --source " << path << "\n";
      cli::print_verify_result(verify_artifact(got, vo));
      ArtifactReader sr(got);
      EvalOptions se;
      se.quantiles = {0.8};
      std::cout << "\n== kvtool eval " << got << " --source " << path << " --quantile 0.8\n";
      cli::print_eval(evaluate(sr, dr, se));
      // A decode runtime's view: both artifacts published into a pool, every dumped query replayed.
      LoadOptions dl;
      dl.artifacts = {art, got};
      dl.source = path;
      std::cout << "\n== kvtool load " << art << " " << got << " --source " << path << " --device cpu\n";
      cli::print_load(load_artifacts(dl));
      return 0;
    }
    if (*query) {
      ArtifactReader r(q_art);
      r.verify_sections();
      DumpReader d(q_src);
      check_source(r.source(), d, false);
      std::vector<float> qv_data;
      int64_t position = q_pos;
      const int64_t dim = r.source().geo.head_dim;
      if (!q_vec.empty()) {
        qv_data = cli::read_query_vector(q_vec, dim);
        if (position < 0) position = r.source().coverage_end - 1;
      } else {
        KVT_CHECK(qp->count() > 0, USAGE, "give --position (a dumped query) or --vector FILE");
        KVT_CHECK(d.info().has_q, NO_QUERIES, "the dump has no /kv/q; use --vector or dump with --queries");
        auto qpos = d.q_positions();
        auto it = std::find(qpos.begin(), qpos.end(), position);
        KVT_CHECK(it != qpos.end(), NO_QUERIES, "the dump has no query at position " << position);
        KVT_CHECK(q_head >= 0 && q_head < d.info().geo.q_heads && q_layer >= 0 && q_layer < d.info().geo.layers, USAGE,
                  "--layer/--q-head out of range");
        std::vector<float> all(static_cast<size_t>(d.info().geo.q_tokens * dim));
        d.read_q(q_layer, q_head, all.data());
        qv_data.assign(all.begin() + (it - qpos.begin()) * dim, all.begin() + (it - qpos.begin() + 1) * dim);
      }
      SelectorSet sel(r);
      KVT_CHECK(q_head >= 0 && q_head < r.source().geo.q_heads, USAGE, "--q-head " << q_head << " is outside 0-" << r.source().geo.q_heads - 1);
      KVT_CHECK(q_layer >= 0 && q_layer < r.source().geo.layers, USAGE, "--layer " << q_layer << " is outside 0-" << r.source().geo.layers - 1);
      std::vector<float> krows;
      KeyRows keys;
      if (sel.needs_keys()) {  // lsh receipts carry inclusion probabilities computed from the full keys
        const int64_t E = r.source().coverage_end;
        krows.resize(static_cast<size_t>(E * dim));
        d.read_k(q_layer, r.source().id.q_to_kv_head[static_cast<size_t>(q_head)], 0, E, krows.data());
        keys = KeyRows{krows.data(), E, dim};
      }
      CandidateReceipt rc = sel.query(q_layer, q_head, qv_data.data(), position, Budget::parse(q_budget), q_min_coll,
                                      sel.needs_keys() ? &keys : nullptr, q_quantile, q_flat);
      if (as_json) {
        cli::print_json(rc.to_json());
      } else {
        std::cout << "kind " << rc.kind << ", index generation " << rc.index_generation << ", content digest "
                  << rc.content_digest.substr(0, 16) << "…\n";
        std::cout << "layer " << rc.layer << ", query head " << rc.q_head << " (kv head " << rc.kv_head << "), position "
                  << rc.position << ": " << rc.candidates.size() << " candidates of " << rc.indexed_rows
                  << " indexed rows, " << rc.always_included.size() << " always included\n";
        if (rc.centroids_scored >= 0) std::cout << "centroids scored: " << rc.centroids_scored << "\n";
        if (!rc.inclusion.empty()) {
          std::cout << "inclusion probabilities:";
          for (double u : rc.inclusion) std::printf(" %.4g", u);
          std::cout << "\n";
        }
        std::cout << "candidates:";
        for (size_t i = 0; i < rc.candidates.size(); ++i) std::cout << " " << rc.candidates[i];
        std::cout << "\nalways included:";
        for (int64_t id : rc.always_included) std::cout << " " << id;
        std::cout << "\n";
      }
      return 0;
    }
    if (*eval) {
      ArtifactReader r(e_art);
      r.verify_sections();
      DumpReader d(e_src);
      EvalOptions eo;
      if (!e_budgets.empty()) {
        eo.budgets.clear();
        for (const auto& b : e_budgets) eo.budgets.push_back(Budget::parse(b));
      }
      if (!e_min_coll.empty()) eo.min_collisions = e_min_coll;
      eo.quantiles = e_quantiles;
      eo.csv_path = e_csv;
      eo.plot_path = e_plot;
      eo.quiet = quiet || as_json;
      json j = evaluate(r, d, eo);
      if (as_json) cli::print_json(j);
      else cli::print_eval(j);
      return 0;
    }
    if (*merge) {
      json j = merge_artifacts(m_in, m_out, m_key, quiet || as_json);
      if (as_json) cli::print_json(j);
      else if (!quiet) std::cout << "merged " << j["shards"] << " shards (" << j["parts_total"] << " parts) into " << m_out << "\n";
      return 0;
    }
    if (*build) {
      char self[PATH_MAX];
      ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
      KVT_CHECK(n > 0, INTERNAL, "cannot locate the kvtool binary");
      self[n] = 0;
      std::string dir(self);
      dir = dir.substr(0, dir.find_last_of('/'));
      KVT_CHECK(b_kind.find('/') == std::string::npos && !b_kind.empty(), USAGE, "bad kind '" << b_kind << "'");
      std::string tool = dir + "/kvtool-" + b_kind;
      KVT_CHECK(access(tool.c_str(), X_OK) == 0, USAGE,
                "unknown index kind '" << b_kind << "': no " << tool << " (kinds: pq, clusterkv, lsh, squeeze)");
      std::vector<std::string> args = {tool, "build"};
      for (const auto& a : build->remaining()) args.push_back(a);
      std::vector<char*> av;
      for (auto& a : args) av.push_back(a.data());
      av.push_back(nullptr);
      std::cout.flush();
      execv(tool.c_str(), av.data());
      KVT_THROW(IO_ERROR, "cannot run " << tool << ": " << std::strerror(errno));
    }
    if (*store) {
      json j;
      if (*st_put) j = Store(st_dir, true).put(st_art);
      else if (*st_get) j = Store(st_dir).get(st_key);
      else if (*st_ls) j = Store(st_dir).ls();
      else if (*st_rm) j = Store(st_dir).rm(st_key);
      else j = Store(st_dir).gc(st_keep, parse_duration(st_grace));
      if (as_json) cli::print_json(j);
      else if (*st_get) std::cout << j["path"].get<std::string>() << "\n";
      else if (*st_put) std::cout << "stored " << st_art << " as object " << j["object"].get<std::string>() << "\n";
      else if (*st_ls)
        for (const auto& r : j["refs"])
          std::cout << r["key"]["tenant"].get<std::string>() << "  " << r["key"]["kind"].get<std::string>() << "  prefix "
                    << r["key"]["prefix_hash"].get<std::string>().substr(0, 12) << "  model "
                    << r["key"]["model"].get<std::string>().substr(0, 12) << "  -> " << r["object"].get<std::string>().substr(0, 16) << "\n";
      else cli::print_json(j);
      return 0;
    }
    if (*load) {
      lo.pool.host_budget = parse_bytes(ld_host_budget);
      lo.pool.device_budget = parse_bytes(ld_device_budget);
      lo.budget = Budget::parse(ld_budget);
      lo.tenant = lo.store_key.tenant;
      lo.trust.trusted = trusted_keys(ld_pubkeys, ld_trusted);
      if (!lo.store_dir.empty()) {
        check_store_key(lo.store_key, false);
      } else {
        KVT_CHECK(lo.store_key.model.empty() && lo.store_key.kind.empty() && lo.store_key.prefix_hash.empty(), USAGE,
                  "store key options need --store");
      }
      if (ld_device != "cpu") {
#ifdef KVTOOL_WITH_CUDA
        lo.pool.device = cuda::make_backend();
#endif
        KVT_CHECK(lo.pool.device || ld_device == "auto", DEVICE_UNAVAILABLE,
                  "--device cuda: no usable CUDA device" KVTOOL_CUDA_NOTE);
      }
      json j = load_artifacts(lo);
      if (as_json) {
        cli::print_json(j);
        return 0;
      }
      cli::print_load(j);
      return 0;
    }
    if (*reasons) {
      json arr = json::array();
      for (const auto& r : all_reasons()) arr.push_back({{"reason", r.code}, {"exit_code", static_cast<int>(r.exit)}, {"meaning", r.meaning}});
      if (as_json) cli::print_json({{"schema_version", kJsonSchemaVersion}, {"reasons", arr}});
      else
        for (const auto& r : all_reasons()) std::printf("%-28s %d  %s\n", r.code, static_cast<int>(r.exit), r.meaning);
      return 0;
    }
    return 2;
  });
}
