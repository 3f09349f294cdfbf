// kvtool-testgen: test-only helper. Writes a "container-test" artifact bound to a dump, used to
// make the committed fixtures and by the CLI tests before the index kinds exist.
#include "cli.h"
#include "kvtool/signing.h"
#include "test_util.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtool-testgen: write a container-test artifact (tests and fixtures only)"};
  std::string dump, out, key;
  int64_t coverage = -1;
  int level = 3;
  app.add_option("DUMP", dump)->required();
  app.add_option("-o,--output", out)->required();
  app.add_option("--coverage", coverage);
  app.add_option("--zstd-level", level);
  app.add_option("--sign-key", key);
  return kvtool::cli::run("kvtool-testgen", app, argc, argv, nullptr, [&] {
    if (key.empty()) {
      kvtool::test::write_test_artifact(dump, out, nullptr, coverage, level);
    } else {
      auto k = kvtool::SigningKey::load(key);
      kvtool::test::write_test_artifact(dump, out, &k, coverage, level);
    }
    return 0;
  });
}
