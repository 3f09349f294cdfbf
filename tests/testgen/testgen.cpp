// kvtool-testgen: test-only helper. Writes a "container-test" artifact bound to a dump (the
// committed fixtures, CLI tests), and re-packs artifacts: drops or overwrites sections and edits
// manifest members, then recomputes every digest, so that only the structure is wrong (the
// "re-packed" artifacts of the security tests: an attacker who knows formats/kvi-v1.md).
#include "cli.h"
#include "kvtool/signing.h"
#include "test_util.h"

namespace {

struct RepackArgs {
  std::string in, out;
  std::vector<std::string> drop;  // NAME@LAYER,HEAD
  std::vector<std::string> fill;  // NAME@LAYER,HEAD=BYTE
  std::vector<std::string> set;   // /json/pointer=JSON
};

void repack(const RepackArgs& a) {
  kvtool::test::Repack rp;
  rp.drop = a.drop;
  for (const auto& f : a.fill) rp.fill.emplace_back(f.substr(0, f.rfind('=')), std::stoi(f.substr(f.rfind('=') + 1)));
  for (const auto& s : a.set)
    rp.set.emplace_back(s.substr(0, s.find('=')), kvtool::json::parse(s.substr(s.find('=') + 1)));
  kvtool::test::repack_artifact(a.in, a.out, rp);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvtool-testgen: write a container-test artifact or re-pack one (tests and fixtures only)"};
  std::string dump, out, key;
  int64_t coverage = -1;
  int level = 3;
  app.add_option("DUMP", dump);
  app.add_option("-o,--output", out);
  app.add_option("--coverage", coverage);
  app.add_option("--zstd-level", level);
  app.add_option("--sign-key", key);
  RepackArgs rp;
  auto* sub = app.add_subcommand("repack", "re-pack an artifact with valid digests and a broken structure");
  sub->add_option("IN", rp.in)->required();
  sub->add_option("-o,--output", rp.out)->required();
  sub->add_option("--drop", rp.drop, "drop section NAME@LAYER,HEAD");
  sub->add_option("--fill", rp.fill, "overwrite every byte of section NAME@LAYER,HEAD=BYTE");
  sub->add_option("--set", rp.set, "set manifest member /json/pointer=JSON (params digest recomputed)");
  return kvtool::cli::run("kvtool-testgen", app, argc, argv, nullptr, [&] {
    if (sub->parsed()) {
      repack(rp);
    } else if (key.empty()) {
      kvtool::test::write_test_artifact(dump, out, nullptr, coverage, level);
    } else {
      auto k = kvtool::SigningKey::load(key);
      kvtool::test::write_test_artifact(dump, out, &k, coverage, level);
    }
    return 0;
  });
}
