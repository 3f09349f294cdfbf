// The k-means options shared by the clustering kinds' build commands (clusterkv, squeeze):
// --kmeans, --kmeans-branching, --kmeans-leaf-clusters (kvtool/kinds/kmeans_options.h).
#pragma once
#include <string>

#include "cli.h"
#include "kvtool/kinds/kmeans_options.h"

namespace kvtool::cli {

// Adds the options; `method` receives the --kmeans text (parse_kmeans_method when building).
inline void add_kmeans_options(CLI::App* c, std::string& method, KmeansOptions& o) {
  c->add_option("--kmeans", method,
                "clustering: flat (k-means over all rows), tree (balanced k-means tree, cost ~linear in rows) "
                "or auto (tree when the cost model says it is cheaper)")
      ->capture_default_str();
  c->add_option("--kmeans-branching", o.branching, "tree: most children of a node")->capture_default_str();
  c->add_option("--kmeans-leaf-clusters", o.leaf_clusters,
                "tree: a node of at most this many clusters is a leaf (flat k-means inside)")
      ->capture_default_str();
}

}  // namespace kvtool::cli
