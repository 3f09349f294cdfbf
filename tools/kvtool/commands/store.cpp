// kvtool store put|get|ls|rm|gc --store DIR ... (formats/store-v1.md)
#include <iostream>

#include "commands.h"
#include "kvtool/store.h"
#include "parse.h"

namespace kvtool::cmd {

namespace {

struct Args {
  std::string dir, art, grace = "1h";
  int64_t keep = 0;
  StoreKey key;
  CLI::App *put = nullptr, *get = nullptr, *ls = nullptr, *rm = nullptr, *gc = nullptr;
};

void add_key_options(CLI::App* c, StoreKey& k) {
  c->add_option("--tenant", k.tenant, "tenant namespace")->required();
  c->add_option("--model", k.model, "model artifact SHA-256")->required();
  c->add_option("--adapter", k.adapter, "adapter-set SHA-256")->required();
  c->add_option("--prefix-hash", k.prefix_hash, "prefix-token hash (the artifact's source.prefix_tokens_sha256)")
      ->required();
  c->add_option("--kind", k.kind, "index kind")->required();
  c->add_option("--params-digest", k.params_digest, "params digest (needed when several params are stored)");
  c->add_option("--position-contract", k.position_contract, "position contract (optional filter)");
}

void print_refs(const json& j) {
  for (const auto& r : j["refs"])
    std::cout << r["key"]["tenant"].get<std::string>() << "  " << r["key"]["kind"].get<std::string>() << "  prefix "
              << r["key"]["prefix_hash"].get<std::string>().substr(0, 12) << "  model "
              << r["key"]["model"].get<std::string>().substr(0, 12) << "  -> "
              << r["object"].get<std::string>().substr(0, 16) << "\n";
}

int run(const Args& a, const Flags& flags) {
  json j;
  if (*a.put)
    j = Store(a.dir, true).put(a.art);
  else if (*a.get)
    j = Store(a.dir).get(a.key);
  else if (*a.ls)
    j = Store(a.dir).ls();
  else if (*a.rm)
    j = Store(a.dir).rm(a.key);
  else
    j = Store(a.dir).gc(a.keep, cli::parse_duration(a.grace));
  return emit(flags, j, [&] {
    if (*a.get)
      std::cout << j["path"].get<std::string>() << "\n";
    else if (*a.put)
      std::cout << "stored " << a.art << " as object " << j["object"].get<std::string>() << "\n";
    else if (*a.ls)
      print_refs(j);
    else
      cli::print_json(j);
  });
}

}  // namespace

cli::Command register_store(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("store", "Content-addressed prefix store: put, get, ls, rm, gc (formats/store-v1.md)");
  sub->require_subcommand(1);
  a->put = sub->add_subcommand("put", "Verify an artifact and store it under the key its manifest binds");
  a->put->add_option("ART", a->art, "artifact")->required();
  a->get = sub->add_subcommand("get", "Print the path of the verified artifact stored for a key");
  add_key_options(a->get, a->key);
  a->ls = sub->add_subcommand("ls", "List the refs");
  a->rm = sub->add_subcommand("rm", "Remove the refs of a key (objects go at the next gc)");
  add_key_options(a->rm, a->key);
  a->gc = sub->add_subcommand("gc", "Drop old refs (--keep-last) and unreferenced objects older than --grace");
  a->gc
      ->add_option("--keep-last", a->keep,
                   "keep the newest N refs per (tenant, model, adapter, prefix, kind); 0 keeps all")
      ->capture_default_str();
  a->gc->add_option("--grace", a->grace, "only remove unreferenced objects older than this (s, m, h, d)")
      ->capture_default_str();
  for (auto* c : {a->put, a->get, a->ls, a->rm, a->gc}) {
    c->add_option("--store", a->dir, "store directory")->required();
    c->add_flag("--json", flags.json, "machine-readable output");
  }
  return {sub, [a, &flags] { return run(*a, flags); }};
}

}  // namespace kvtool::cmd
