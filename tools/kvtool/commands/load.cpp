// kvtool load ART... [--source DUMP] [--store DIR + key] [--device auto|cpu|cuda] [budgets] [--json]
#include "commands.h"
#include "kvtool/loader.h"
#include "kvtool/device.h"
#include "parse.h"

namespace kvtool::cmd {

namespace {

struct LoadArgs {
  LoadOptions lo;
  std::string device = "auto", host_budget = "8G", device_budget = "4G", budget = "0.1";
  int64_t min_collisions = 2;
  std::vector<std::string> options;
  TrustArgs trust;
};

void add_store_key_options(CLI::App* c, StoreKey& k) {
  c->add_option("--tenant", k.tenant, "tenant: the store key's, and the tenant every artifact must belong to");
  c->add_option("--model", k.model, "store key: model artifact SHA-256");
  c->add_option("--adapter", k.adapter, "store key: adapter-set SHA-256");
  c->add_option("--prefix-hash", k.prefix_hash, "store key: prefix-token hash");
  c->add_option("--kind", k.kind, "store key: index kind");
  c->add_option("--params-digest", k.params_digest, "store key: params digest (when several are stored)");
  c->add_option("--position-contract", k.position_contract, "store key: position contract (optional)");
}

int run_load(LoadArgs& a, const Flags& flags) {
  LoadOptions& lo = a.lo;
  lo.pool.host_budget = cli::parse_bytes(a.host_budget);
  lo.pool.device_budget = cli::parse_bytes(a.device_budget);
  Budget::parse(a.budget);  // USAGE for a bad --budget whatever the kinds, as before
  lo.settings = {{"budget", a.budget}, {"min_collisions", std::to_string(a.min_collisions)}};
  for (const auto& o : a.options)  // each artifact takes the ones its kind has
    for (const auto& [name, value] : parse_query_settings(o)) lo.settings[name] = value;
  lo.tenant = lo.store_key.tenant;
  lo.trust = load_trust(a.trust);
  if (!lo.store_dir.empty()) {
    check_store_key(lo.store_key, false);
  } else {
    KVT_CHECK(lo.store_key.model.empty() && lo.store_key.kind.empty() && lo.store_key.prefix_hash.empty(), USAGE,
              "store key options need --store");
  }
  if (a.device != "cpu") {
    lo.pool.device = make_device_backend();  // registered by cuda/ when this kvtool was built with it
    KVT_CHECK(lo.pool.device || a.device == "auto", DEVICE_UNAVAILABLE,
              "--device cuda: no usable CUDA device"
                  << (device_backend_registered() ? "" : " (this kvtool was built without CUDA)"));
  }
  const LoadReport rep = load_artifacts(lo);
  return emit(flags, rep.to_json(), [&] { cli::print_load(rep); });
}

}  // namespace

cli::Command register_load(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<LoadArgs>();
  auto* sub =
      app.add_subcommand("load",
                         "Publish artifacts into a runtime pool (host/GPU), run every dumped query through it and "
                         "check that the pool answers equal the file query path (kvtool query); print receipts, "
                         "bytes per tier, publish bandwidth and query latency");
  sub->add_option("ART", a->lo.artifacts, "artifacts (.kvi) to publish, each under its path as the pool key");
  sub->add_option("--source", a->lo.source,
                  "dump the artifacts were built from: binding checked, its queries replayed");
  sub->add_option("--store", a->lo.store_dir,
                  "prefix store directory: also publish the artifact stored for the key below");
  add_store_key_options(sub, a->lo.store_key);
  sub->add_option("--device", a->device,
                  "auto (a GPU when one is usable), cpu (host tier only) or cuda (require a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--host-budget", a->host_budget, "host tier byte budget (K/M/G/T binary suffixes)")
      ->capture_default_str();
  sub->add_option("--device-budget", a->device_budget, "device tier byte budget")->capture_default_str();
  sub->add_option("--budget", a->budget, "index-chosen rows per query: a fraction (0.1, 10%) or a count (64)")
      ->capture_default_str();
  sub->add_option("--min-collisions", a->min_collisions, "lsh: rows colliding in at least c tables")
      ->capture_default_str();
  sub->add_option("-o,--option", a->options,
                  "query options for the replay as NAME=VALUE; each artifact takes its kind's");
  add_trust_options(sub, a->trust, "refuse unsigned artifacts (needs --pubkey or --trusted-keys)");
  sub->add_flag("--json", flags.json, "machine-readable output");
  return {sub, [a, &flags] { return run_load(*a, flags); }};
}

}  // namespace kvtool::cmd
