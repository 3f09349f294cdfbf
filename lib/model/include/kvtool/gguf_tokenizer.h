// A GGUF model's tokenizer (docs/models.md, "Tokenizers"): llama.cpp's SentencePiece tokenizer
// ("llama" models) and its byte-level BPE ("gpt2" models) with the pre-tokenizers of llama3
// ("llama-bpe"), qwen2 and gpt-2, as src/llama-vocab.cpp of the llama.cpp version formats/gguf.md
// names runs them (the BPE pre-tokenizer's regular expression through PCRE2, Unicode-aware). Every
// vocabulary it claims reproduces llama.cpp's own test vectors (tests/llamacpp/test_tokenizer.sh);
// any other tokenizer model or pre-tokenizer is refused by name.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kvtool {

class GgufTokenizer {
 public:
  explicit GgufTokenizer(const std::string& gguf_path);
  ~GgufTokenizer();
  GgufTokenizer(const GgufTokenizer&) = delete;
  GgufTokenizer& operator=(const GgufTokenizer&) = delete;

  // llama_tokenize(text, add_special, parse_special = false): with `add_special`, BOS (and EOS)
  // as the GGUF's add_bos_token / add_eos_token say. USAGE when `text` is not UTF-8.
  std::vector<int32_t> encode(const std::string& text, bool add_special) const;
  const std::string& kind() const { return kind_; }  // "spm", "bpe llama3", "bpe qwen2", "bpe gpt-2"
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Regex;
  void encode_spm(const std::string& text, std::vector<int32_t>& out) const;
  void encode_bpe(const std::string& text, std::vector<int32_t>& out) const;
  int32_t find(const std::string& text) const;  // -1 when not a token
  int32_t byte_token(uint8_t b) const;
  std::vector<std::string> split_words(const std::string& text) const;
  std::string kind_;
  bool spm_ = true, add_space_prefix_ = true, add_bos_ = true, add_eos_ = false, ignore_merges_ = false;
  int32_t bos_ = -1, eos_ = -1;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, int32_t> merge_rank_;                  // "left right" -> rank
  std::vector<std::pair<std::string, int32_t>> user_defined_;  // partitioned out of the text, longest first
  std::unique_ptr<Regex> regex_;
};

}  // namespace kvtool
