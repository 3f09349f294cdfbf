// kvtool-pq: PQCache codebooks. `build` makes an artifact from a dump, `append` encodes new rows
// with the existing codebooks. Argument parsing only; the logic is lib/src/kinds/pq.cpp.
#include <iostream>

#include "cli.h"
#include "pq/pq.h"

using namespace kvtool;

int main(int argc, char** argv) {
  CLI::App app{"kvtool-pq: PQCache product-quantization indexes over K/V dumps (see kvtool-pq(1))"};
  app.set_version_flag("--version", std::string("kvtool-pq ") + KVTOOL_VERSION);
  app.require_subcommand(1);
  bool as_json = false;

  cli::BuilderCli b;
  PqParams p;
  std::string dump;
  auto* build = app.add_subcommand("build", "Train per-(layer, kv head, subspace) codebooks with FAISS k-means and encode the key rows");
  build->add_option("DUMP", dump, "kvdump v1 file")->required();
  build->add_option("--subspaces,-m", p.subspaces, "m contiguous subvectors per key; must divide the head dim")->capture_default_str();
  build->add_option("--bits,-b", p.bits, "bits per code (2^b centroids per subspace), 1..16")->capture_default_str();
  build->add_option("--iters", p.iters, "Lloyd iterations per subspace (fixed count)")->capture_default_str();
  build->add_option("--max-points-per-centroid", p.max_points_per_centroid, "k-means training sample cap per centroid")->capture_default_str();
  cli::add_builder_options(build, b);

  std::string art, adump, aout, akey;
  int64_t aprefix = -1;
  bool aquiet = false;
  auto* append = app.add_subcommand("append", "Encode rows past the old coverage end with the existing codebooks (new index generation)");
  append->add_option("ART", art, "existing pq artifact")->required();
  append->add_option("DUMP", adump, "dump whose rows [0, old coverage end) are those the artifact was built from")->required();
  append->add_option("-o,--output", aout, "new artifact")->required();
  append->add_option("--prefix", aprefix, "new coverage end (default: the dump's committed frontier)");
  append->add_option("--sign-key", akey, "Ed25519 private key (PEM)");
  append->add_flag("--json", as_json, "JSON summary");
  append->add_flag("-q,--quiet", aquiet, "no progress");

  return cli::run("kvtool-pq", app, argc, argv, &as_json, [&]() -> int {
    if (*build) {
      as_json = b.json;
      cli::finish_builder_options(b);
      json j = build_artifact(dump, b.opt, PqBuilder(p));
      if (b.json) cli::print_json(j);
      else if (!b.opt.quiet) cli::print_build_summary(j);
      return 0;
    }
    json j = pq_append(art, adump, aout, aprefix, akey, aquiet || as_json);
    if (as_json) cli::print_json(j);
    else if (!aquiet) std::cout << "wrote " << aout << ": index generation " << j["index_generation"] << ", coverage [0, " << j["coverage"][1] << ")\n";
    return 0;
  });
}
