// A faiss::IndexFlatL2 and a faiss::IndexFlatIP for the k-means trainings of the kinds (pq
// codebooks, squeeze's L2 levels; the cosine k-means of clusterkv and squeeze): the same answers,
// bit for bit. The L2 one computes the training rows' squared norms once per training instead of at
// every iteration (FAISS recomputes them in every search; in this Debian build that is a scalar
// loop, about a tenth of a pq build). Both size their product block to the search instead of
// FAISS' fixed 16 MiB per search (a tree k-means searches thousands of times). Offline half only.
#pragma once
#include <faiss/IndexFlat.h>

#include <vector>

namespace kvtool {

// For ONE faiss::Clustering::train (or one search): the norms are cached by the address and count
// of the rows searched, which FAISS keeps fixed over a training's iterations. A new training needs
// a new object, as the rows of another one may reuse that address.
class TrainingIndexL2 : public faiss::IndexFlatL2 {
 public:
  explicit TrainingIndexL2(idx_t d) : faiss::IndexFlatL2(d) {}
  // k = 1 without search parameters, from FAISS' BLAS threshold of rows up: FAISS' own blocked
  // sgemm, distance and first-minimum rule (knn_L2sqr with its single-best handler); any other
  // search is FAISS'.
  void search(idx_t n, const float* x, idx_t k, float* distances, idx_t* labels,
              const faiss::SearchParameters* params = nullptr) const override;

 private:
  mutable const float* norms_of_ = nullptr;
  mutable idx_t norms_count_ = 0;
  mutable std::vector<float> x_norms_, y_norms_, ip_;
};

// The same for inner products (the spherical k-means): any TrainingIndexIP may train any number of
// times (it caches nothing but its block buffer).
class TrainingIndexIP : public faiss::IndexFlatIP {
 public:
  explicit TrainingIndexIP(idx_t d) : faiss::IndexFlatIP(d) {}
  // k = 1 without search parameters, from FAISS' BLAS threshold of rows up: FAISS' own blocked
  // sgemm and first-maximum rule (knn_inner_product with a one-entry heap); any other search is
  // FAISS'.
  void search(idx_t n, const float* x, idx_t k, float* distances, idx_t* labels,
              const faiss::SearchParameters* params = nullptr) const override;

 private:
  mutable std::vector<float> ip_;
};

}  // namespace kvtool
