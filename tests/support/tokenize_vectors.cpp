// llama.cpp's tokenizer test vectors (tests/test-tokenizer-0.cpp of the llama.cpp source
// node-llama-cpp ships) through kvtool's GGUF tokenizer: VOCAB.gguf, its .inp (texts separated by
// "\n__ggml_vocab_test__\n") and .out (the token ids llama.cpp gives each text, add_special off,
// one line per text). Prints the kind, how many passed, and every failure; exits 1 on any.
//   kvtool_tokenize_vectors VOCAB.gguf
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/gguf_tokenizer.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t from = 0, at;
  while ((at = s.find(sep, from)) != std::string::npos) {
    out.push_back(s.substr(from, at - from));
    from = at + sep.size();
  }
  out.push_back(s.substr(from));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: kvtool_tokenize_vectors VOCAB.gguf\n";
    return 2;
  }
  const std::string vocab = argv[1];
  try {
    const kvtool::GgufTokenizer tok(vocab);
    // test-tokenizer-0.cpp: the .inp's texts split at the separator, the last one ending at the file's
    // end without it; the .out's lines, one per text.
    std::vector<std::string> texts = split(slurp(vocab + ".inp"), "\n__ggml_vocab_test__\n");
    std::vector<std::string> outs = split(slurp(vocab + ".out"), "\n");
    if (!texts.empty() && texts.back().empty()) texts.pop_back();
    int passed = 0, failed = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<int32_t> want;
      std::istringstream line(i < outs.size() ? outs[i] : "");
      for (int32_t t; line >> t;) want.push_back(t);
      const std::vector<int32_t> got = tok.encode(texts[i], false);
      if (got == want) {
        ++passed;
        continue;
      }
      ++failed;
      std::cout << "FAIL text " << i << " '" << kvtool::printable(kvtool::excerpt(texts[i], 60)) << "': got";
      for (int32_t t : got) std::cout << " " << t;
      std::cout << ", llama.cpp:";
      for (int32_t t : want) std::cout << " " << t;
      std::cout << "\n";
    }
    std::cout << vocab << ": " << tok.kind() << ", " << passed << "/" << texts.size() << " test vectors\n";
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << vocab << ": " << e.what() << "\n";
    return 1;
  }
}
