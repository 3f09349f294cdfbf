// The k-means choices of the clustering kinds (clusterkv, squeeze) that a caller sets: the method and
// the tree's shape (the k-means itself is internal, lib/kinds/common/kmeans.h).
#pragma once
#include <cstdint>
#include <string>

namespace kvtool {

// How a part's rows are clustered: flat k-means over every row (cost ~ n·k per iteration), a
// balanced tree of small k-means splits with flat k-means in its leaves (cost ~ n·leaf per
// iteration), or automatic: the tree when the cost model says it is cheaper (kmeans_tree_cost).
enum class KmeansMethod { flat, tree, automatic };

struct KmeansOptions {
  KmeansMethod method = KmeansMethod::automatic;
  int64_t branching = 16;      // most children of a tree node
  int64_t leaf_clusters = 64;  // a node with at most this many clusters is a leaf (flat k-means)
};

KmeansMethod parse_kmeans_method(const std::string& s);  // "flat" | "tree" | "auto"; USAGE otherwise
const char* kmeans_method_name(KmeansMethod m);

}  // namespace kvtool
