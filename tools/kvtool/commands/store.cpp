// kvtool store put|get|ls|rm|gc --store DIR ... (formats/store-v1.md)
#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "kvtool/store.h"
#include "parse.h"

namespace kvtool::cmd {

namespace {

struct StoreArgs {
  std::string dir, art, grace = "1h", ls_tenant;
  TrustArgs put_trust, get_trust;  // one each: a TrustArgs knows its own --trusted-keys option
  bool all_tenants = false, group_shared = false;
  int64_t keep = 0;
  StoreKey key;
  CLI::App *put = nullptr, *get = nullptr, *ls = nullptr, *rm = nullptr, *gc = nullptr;
};

void add_key_options(CLI::App* c, StoreKey& k) {
  c->add_option("--tenant", k.tenant, "tenant namespace")->required()->envname("KVTOOL_TENANT");
  c->add_option("--model", k.model, "model artifact SHA-256")->required();
  c->add_option("--adapter", k.adapter, "adapter-set SHA-256")->required();
  c->add_option("--prefix-hash", k.prefix_hash, "prefix-token hash (the artifact's source.prefix_tokens_sha256)")
      ->required();
  c->add_option("--kind", k.kind, "index kind")->required();
  c->add_option("--params-digest", k.params_digest, "params digest (needed when several params are stored)");
  c->add_option("--position-contract", k.position_contract, "position contract (optional filter)");
}

// Names and paths from the store directory, printed so that no byte of theirs acts on the terminal
// or reorders the line: controls, DEL and every non-ASCII byte as \xNN (bidi overrides included).
std::string shown(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

void print_warnings(const std::vector<StoreWarning>& w) {
  for (const auto& x : w)
    std::cerr << "kvtool: warning [" << x.reason << "]: " << shown(x.path) << ": " << shown(x.message)
              << " (skipped)\n";
}

void print_refs(const StoreListing& l) {
  for (const auto& r : l.refs)
    std::cout << shown(r.key.tenant) << "  " << shown(r.key.kind) << "  prefix "
              << shown(r.key.prefix_hash.substr(0, 12)) << "  model " << shown(r.key.model.substr(0, 12)) << "  -> "
              << r.object.substr(0, 16) << (r.signer.empty() ? "  unsigned" : "  signer " + r.signer.substr(0, 12))
              << "\n";
}

// Runs one subcommand; `warnings` go to stderr in text mode (they are in the JSON otherwise).
template <typename Result, typename Text>
int finish(const Flags& flags, const Result& res, Text text) {
  if (!flags.json) print_warnings(res.warnings);
  return emit(flags, res.to_json(), [&] { text(res); });
}

int run_store(const StoreArgs& a, const Flags& flags) {
  StoreTrust trust;
  if (*a.put || *a.get) trust = load_trust(*a.put ? a.put_trust : a.get_trust);
  if (*a.put) {
    StoreCreateOptions co;
    co.group_shared = a.group_shared;
    return finish(flags, Store(a.dir, true, co).put(a.art, trust), [&](const StorePutResult& r) {
      std::cout << "stored " << a.art << " as object " << r.object << (r.object_written ? "" : " (already stored)")
                << "\n";
    });
  }
  if (*a.get)
    return finish(flags, Store(a.dir).get(a.key, trust), [](const StoreGetResult& r) { std::cout << r.path << "\n"; });
  if (*a.ls) {
    // KVTOOL_TENANT (environment or config file) stands in for --tenant unless --all-tenants is given.
    const char* env_tenant = std::getenv("KVTOOL_TENANT");
    const std::string tenant = !a.ls_tenant.empty() || a.all_tenants || !env_tenant ? a.ls_tenant : env_tenant;
    KVT_CHECK(a.all_tenants != !tenant.empty(), USAGE, "store ls needs --tenant T or --all-tenants (not both)");
    return finish(flags, Store(a.dir).ls(tenant), [](const StoreListing& l) { print_refs(l); });
  }
  if (*a.rm)
    return finish(flags, Store(a.dir).rm(a.key),
                  [](const StoreRmResult& r) { std::cout << "removed " << r.refs_removed << " ref(s)\n"; });
  return finish(flags, Store(a.dir).gc(a.keep, cli::parse_duration(a.grace)), [](const StoreGcResult& r) {
    std::cout << "removed " << r.refs_removed << " ref(s), " << r.objects_removed << " object(s) and "
              << r.temps_removed << " temporary file(s) older than " << r.grace_seconds << " s\n";
  });
}

}  // namespace

cli::Command register_store(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<StoreArgs>();
  auto* sub = app.add_subcommand("store", "Content-addressed prefix store: put, get, ls, rm, gc (formats/store-v1.md)");
  sub->require_subcommand(1);
  a->put = sub->add_subcommand("put", "Verify an artifact and store it under the key its manifest binds");
  a->put->add_option("ART", a->art, "artifact")->required();
  a->put->add_flag("--group-shared", a->group_shared,
                   "when this put creates the store: files 0640 and directories 0750 (group may read)");
  add_trust_options(a->put, a->put_trust, "refuse unsigned artifacts (needs --pubkey or --trusted-keys)");
  a->get = sub->add_subcommand("get", "Print the path of the verified artifact stored for a key");
  add_key_options(a->get, a->key);
  add_trust_options(a->get, a->get_trust, "refuse unsigned artifacts (needs --pubkey or --trusted-keys)");
  a->ls = sub->add_subcommand("ls", "List the refs of one tenant (--tenant) or of all (--all-tenants)");
  a->ls->add_option("--tenant", a->ls_tenant, "list this tenant's refs (default: KVTOOL_TENANT, unless --all-tenants)");
  a->ls->add_flag("--all-tenants", a->all_tenants, "list every tenant's refs");
  a->rm = sub->add_subcommand("rm", "Remove the refs of a key (objects go at the next gc)");
  add_key_options(a->rm, a->key);
  a->gc =
      sub->add_subcommand("gc", "Drop old refs (--keep-last), unreferenced objects and temporaries older than --grace");
  a->gc
      ->add_option("--keep-last", a->keep,
                   "keep the newest N refs per (tenant, model, adapter, prefix, kind); 0 keeps all")
      ->capture_default_str();
  a->gc->add_option("--grace", a->grace, "only remove objects and temporaries older than this (s, m, h, d, w)")
      ->capture_default_str();
  for (auto* c : {a->put, a->get, a->ls, a->rm, a->gc}) {
    c->add_option("--store", a->dir, "store directory")->required()->envname("KVTOOL_STORE");
    c->add_flag("--json", flags.json, "machine-readable output");
  }
  return {sub, [a, &flags] { return run_store(*a, flags); }};
}

}  // namespace kvtool::cmd
