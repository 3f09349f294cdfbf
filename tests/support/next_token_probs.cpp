// kvtool's next-token distribution at every position of a token list (the GGUF forward pass,
// teacher forced, one position at a time as eval-decode runs it): prints {"probs": [[...], ...]}, the
// softmax of the logits after each position. For tests/llamacpp/test_gguf_forward.sh.
//   kvtool_next_token_probs M.gguf TOKENS.json [exact|llama.cpp]
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kvtool/gguf_model.h"
#include "kvtool/json.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: kvtool_next_token_probs M.gguf TOKENS.json [exact|llama.cpp]\n";
    return 2;
  }
  try {
    std::ifstream f(argv[2]);
    std::stringstream ss;
    ss << f.rdbuf();
    const kvtool::json ids = kvtool::json::parse(ss.str());
    kvtool::GgufDecoder model(argv[1], kvtool::GgufDecoderOptions{1, argc > 3 && std::string(argv[3]) == "llama.cpp"});
    std::vector<float> q, k, v, logits;
    std::cout << "{\"probs\": [";
    for (size_t p = 0; p < ids.size(); ++p) {
      model.forward(ids[p].get<int32_t>(), static_cast<int32_t>(p), q, k, v, logits);
      double mx = -INFINITY, sum = 0;
      for (float x : logits) mx = std::max(mx, static_cast<double>(x));
      for (float x : logits) sum += std::exp(x - mx);
      std::cout << (p ? "," : "") << "[";
      for (size_t i = 0; i < logits.size(); ++i) std::cout << (i ? "," : "") << std::exp(logits[i] - mx) / sum;
      std::cout << "]";
    }
    std::cout << "]}\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
