// kvtool-pq build / append (= kvtool build pq). Logic: lib/kinds/pq.
#include <iostream>

#include "kind_commands.h"
#include "kvtool/kinds/pq.h"

namespace kvtool::cli {

void add_pq_commands(CLI::App& app, std::vector<Command>& cmds, bool& as_json) {
  auto p = std::make_shared<PqParams>();
  cmds.push_back(add_build_command(
      app,
      {"Train per-(layer, kv head, subspace) codebooks with FAISS k-means and encode the key rows", "kvdump v1 file",
       [p](CLI::App* c) {
         c->add_option("--subspaces,-m", p->subspaces,
                       "m contiguous subvectors per key; must divide the head dim (default: chosen with -b from "
                       "the indexed rows n and head dim d: the most code bits m*b whose bytes fit in those of "
                       "m 2, b 6 with f32 codebooks; many subspaces for short prefixes, m 2 for long ones)")
             ->check(CLI::PositiveNumber);
         c->add_option("--bits,-b", p->bits,
                       "bits per code (2^b centroids per subspace), 1..16 (default: chosen with -m, as above)")
             ->check(CLI::Range(1, 16));
         c->add_option("--iters", p->iters, "Lloyd iterations per subspace (fixed count)")->capture_default_str();
         c->add_option("--max-points-per-centroid", p->max_points_per_centroid,
                       "k-means training sample cap per centroid")
             ->capture_default_str();
         c->add_option("--loss", p->loss,
                       "codebook loss: l2 (k-means) or anisotropic (score-aware: error along the key costs "
                       "--anisotropic-eta times the orthogonal error; --iters more rounds after k-means)")
             ->capture_default_str();
         c->add_option(
              "--anisotropic-eta", p->anisotropic_eta,
              "h_par / h_perp of --loss anisotropic (> 0; 1 = L2); 0: derived per (layer, kv head) from the dump's "
              "queries before the coverage end")
             ->capture_default_str();
         c->add_option("--codebook-dtype", p->codebook_dtype,
                       "stored codebooks: f32, or f16 (half the codebook bytes; codes and LUT scores from the "
                       "f16-rounded codebooks; with one more --bits, the bytes of f32)")
             ->capture_default_str();
       },
       [p] { return make_builder(*p); }},
      as_json));
  cmds.push_back(add_append_command<PqAppendSummary>(
      app,
      {{"Encode rows past the old coverage end with the existing codebooks (new index generation)",
        "existing pq artifact", "dump whose rows [0, old coverage end) are those the artifact was built from",
        "new coverage end (default: the dump's committed frontier)", nullptr},
       [](const AppendArgs& a, bool quiet) {
         return pq_append(a.artifact, a.dump, a.output, a.prefix, a.sign_key, quiet);
       },
       [](const AppendArgs& a, const PqAppendSummary& s) {
         std::cout << "wrote " << a.output << ": index generation " << s.append.index_generation << ", coverage [0, "
                   << s.append.coverage_end << ")\n";
       }},
      as_json));
}

}  // namespace kvtool::cli
