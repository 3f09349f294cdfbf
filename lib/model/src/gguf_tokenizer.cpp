// kvtool/gguf_tokenizer.h: llama.cpp's SentencePiece (llm_tokenizer_spm_session) and byte-level
// BPE (llm_tokenizer_bpe_session) tokenizers, src/llama-vocab.cpp at the version formats/gguf.md
// names, with the same merge order, tie-breaks and byte fallbacks.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "kvtool/gguf_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <functional>
#include <queue>

#include "kvtool/error.h"
#include "kvtool/gguf_file.h"

namespace kvtool {

namespace {

constexpr int32_t kUserDefined = 4;  // llama.cpp's LLAMA_TOKEN_TYPE_USER_DEFINED

// The pre-tokenizers' expressions (llama_vocab::impl::load, LLAMA_VOCAB_PRE_TYPE_*).
const char* pre_regex(const std::string& pre) {
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe")
    return "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
           "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "qwen2")
    return "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
           "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "gpt-2" || pre == "gpt2" || pre == "default")
    return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
  return nullptr;
}

// unicode_len_utf8: the length a lead byte announces (1 for a continuation byte).
size_t utf8_len(uint8_t c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
std::string byte_encode(const std::string& word) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = keep ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      t[static_cast<size_t>(b)] = s;
    }
    return t;
  }();
  std::string out;
  for (unsigned char c : word) out += table[c];
  return out;
}

struct Symbol {
  int prev, next;
  size_t start, n;
};

std::vector<Symbol> split_chars(const std::string& text) {
  std::vector<Symbol> s;
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const int i = static_cast<int>(s.size());
    s.push_back({i - 1, off + n == text.size() ? -1 : i + 1, off, n});
    off += n;
  }
  return s;
}

// Merges symbol `right` into its left neighbour `left` and unlinks it (both tokenizers' merge step).
void absorb(std::vector<Symbol>& sym, int left, int right) {
  Symbol &l = sym[static_cast<size_t>(left)], &r = sym[static_cast<size_t>(right)];
  l.n += r.n;
  r.n = 0;
  l.next = r.next;
  if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = left;
}

}  // namespace

struct GgufTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

GgufTokenizer::GgufTokenizer(const std::string& path) {
  const GgufFile f(path, false, true);
  const std::string model = f.str("tokenizer.ggml.model");
  KVT_CHECK(model == "llama" || model == "gpt2", UNSUPPORTED_MODEL,
            f.what() << " has tokenizer model '" << printable(excerpt(model, 40))
                     << "'; kvtool tokenizes with llama (SentencePiece) and gpt2 (byte-level BPE) vocabularies");
  tokens_ = f.strings("tokenizer.ggml.tokens");
  KVT_CHECK(!tokens_.empty(), BAD_MODEL, f.what() << " has no tokenizer.ggml.tokens");
  for (double s : f.numbers("tokenizer.ggml.scores")) scores_.push_back(static_cast<float>(s));
  for (double t : f.numbers("tokenizer.ggml.token_type")) types_.push_back(static_cast<int32_t>(t));
  KVT_CHECK(
      (scores_.empty() || scores_.size() == tokens_.size()) && (types_.empty() || types_.size() == tokens_.size()),
      BAD_MODEL, f.what() << ": tokenizer.ggml.scores or token_type has another length than the tokens");
  for (size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = static_cast<int32_t>(i);  // the last one wins
  spm_ = model == "llama";
  auto flag = [&](const char* key, bool def) { return f.has(key) ? f.any_number(key, def ? 1 : 0) != 0 : def; };
  add_space_prefix_ = flag("tokenizer.ggml.add_space_prefix", spm_);
  add_bos_ = flag("tokenizer.ggml.add_bos_token", spm_);
  add_eos_ = flag("tokenizer.ggml.add_eos_token", false);
  auto id = [&](const char* key, int32_t def) {
    const double v = f.has(key) ? f.any_number(key, def) : def;
    return v >= 0 && v < static_cast<double>(tokens_.size()) ? static_cast<int32_t>(v) : -1;
  };
  bos_ = id("tokenizer.ggml.bos_token_id", spm_ ? 1 : 11);
  eos_ = id("tokenizer.ggml.eos_token_id", spm_ ? 2 : 11);
  for (size_t i = 0; i < types_.size(); ++i)
    if (types_[i] == kUserDefined) user_defined_.emplace_back(tokens_[i], static_cast<int32_t>(i));
  std::stable_sort(user_defined_.begin(), user_defined_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  if (spm_) {
    kind_ = "spm";
    return;
  }
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.str("tokenizer.ggml.pre") : "default";
  const char* rx = pre_regex(pre);
  KVT_CHECK(rx, UNSUPPORTED_MODEL,
            f.what() << " has BPE pre-tokenizer '" << printable(excerpt(pre, 40))
                     << "'; kvtool runs llama3 (llama-bpe), qwen2 and gpt-2");
  kind_ = "bpe " + std::string(pre == "llama-bpe" || pre == "llama-v3" ? "llama3" : pre);
  ignore_merges_ = kind_ == "bpe llama3";
  const auto& merges = f.strings("tokenizer.ggml.merges");
  for (size_t i = 0; i < merges.size(); ++i) merge_rank_.emplace(merges[i], static_cast<int32_t>(i));
  int err = 0;
  PCRE2_SIZE at = 0;
  regex_ = std::make_unique<Regex>();
  regex_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rx), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  KVT_CHECK(regex_->code, INTERNAL,
            "the " << pre << " pre-tokenizer's expression does not compile (PCRE2 " << err << ")");
}

GgufTokenizer::~GgufTokenizer() = default;

int32_t GgufTokenizer::find(const std::string& text) const {
  auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

// llama_vocab::impl::byte_to_token for SentencePiece: <0xXX>, else the byte itself.
int32_t GgufTokenizer::byte_token(uint8_t b) const {
  static const char* hex = "0123456789ABCDEF";
  const std::string s = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  const int32_t t = find(s);
  return t >= 0 ? t : find(std::string(1, static_cast<char>(b)));
}

// llm_tokenizer_spm_session::tokenize: merge the best-scoring adjacent pair that is a token (ties:
// the leftmost) until none is; pieces that are no token are resegmented, or spelt as bytes.
void GgufTokenizer::encode_spm(const std::string& text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym = split_chars(text);
  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  auto worse = [](const Bigram& l, const Bigram& r) {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  std::map<std::string, std::pair<int, int>> rev_merge;
  auto try_add = [&](int l, int r) {
    if (l == -1 || r == -1) return;
    const std::string t =
        text.substr(sym[static_cast<size_t>(l)].start, sym[static_cast<size_t>(l)].n + sym[static_cast<size_t>(r)].n);
    const int32_t id = find(t);
    if (id < 0) return;
    queue.push({l, r, scores_.empty() ? 0.f : scores_[static_cast<size_t>(id)], t.size()});
    rev_merge[t] = {l, r};
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol &l = sym[static_cast<size_t>(b.left)], &r = sym[static_cast<size_t>(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    absorb(sym, b.left, b.right);
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  std::function<void(const Symbol&)> resegment = [&](const Symbol& s) {
    const std::string t = text.substr(s.start, s.n);
    if (const int32_t id = find(t); id >= 0) return out.push_back(id);
    auto p = rev_merge.find(t);
    if (p == rev_merge.end()) {
      for (unsigned char c : t) out.push_back(byte_token(c));
      return;
    }
    resegment(sym[static_cast<size_t>(p->second.first)]);
    resegment(sym[static_cast<size_t>(p->second.second)]);
  };
  for (int i = 0; !sym.empty() && i != -1; i = sym[static_cast<size_t>(i)].next) resegment(sym[static_cast<size_t>(i)]);
}

// unicode_regex_split with one expression: the matches and the text between them, in order, each
// byte-encoded.
std::vector<std::string> GgufTokenizer::split_words(const std::string& text) const {
  std::vector<std::string> words;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  size_t off = 0, last = 0;
  while (off <= text.size()) {
    const int rc =
        pcre2_match(regex_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), off, 0, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // an empty match: step one character on
      off = ov[0] + (ov[0] < text.size() ? utf8_len(static_cast<uint8_t>(text[ov[0]])) : 1);
      continue;
    }
    if (ov[0] > last) words.push_back(text.substr(last, ov[0] - last));
    words.push_back(text.substr(ov[0], ov[1] - ov[0]));
    off = last = ov[1];
  }
  pcre2_match_data_free(md);
  if (last < text.size()) words.push_back(text.substr(last));
  for (auto& w : words) w = byte_encode(w);
  return words;
}

// llm_tokenizer_bpe_session::tokenize: per word, merge the adjacent pair of lowest merge rank
// (ties: the leftmost); llama3 takes a word that is a token whole (ignore_merges).
void GgufTokenizer::encode_bpe(const std::string& text, std::vector<int32_t>& out) const {
  for (const std::string& word : split_words(text)) {
    if (ignore_merges_ && find(word) >= 0) {
      out.push_back(find(word));
      continue;
    }
    std::vector<Symbol> sym = split_chars(word);
    struct Bigram {
      int left, right, rank;
      std::string text;
    };
    auto worse = [](const Bigram& l, const Bigram& r) {
      return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto piece = [&](int i) { return word.substr(sym[static_cast<size_t>(i)].start, sym[static_cast<size_t>(i)].n); };
    auto add = [&](int l, int r) {
      if (l == -1 || r == -1) return;
      auto it = merge_rank_.find(piece(l) + " " + piece(r));
      if (it != merge_rank_.end()) queue.push({l, r, it->second, piece(l) + piece(r)});
    };
    for (int i = 1; i < static_cast<int>(sym.size()); ++i) add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol &l = sym[static_cast<size_t>(b.left)], &r = sym[static_cast<size_t>(b.right)];
      if (l.n == 0 || r.n == 0 || piece(b.left) + piece(b.right) != b.text) continue;
      absorb(sym, b.left, b.right);
      add(l.prev, b.left);
      add(b.left, l.next);
    }
    for (const Symbol& s : sym) {
      if (s.n == 0) continue;
      const std::string t = word.substr(s.start, s.n);
      if (const int32_t id = find(t); id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : t)
        if (const int32_t id = find(std::string(1, c)); id >= 0) out.push_back(id);
    }
  }
}

std::vector<int32_t> GgufTokenizer::encode(const std::string& text, bool add_special) const {
  uint32_t cp = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_decode(text, i, cp);
    KVT_CHECK(n > 0, USAGE, "the prompt is not UTF-8 (byte " << i << ")");
    i += n;
  }
  // Fragments: user-defined tokens (taken whole even without parse_special, as llama.cpp's
  // tokenizer_st_partition does) and the raw text between them.
  std::vector<std::pair<std::string, int32_t>> frags;
  if (!text.empty()) frags.emplace_back(text, -1);  // no fragment at all for empty text
  for (const auto& [piece, id] : user_defined_) {
    std::vector<std::pair<std::string, int32_t>> next;
    for (const auto& f : frags) {
      if (f.second >= 0) {
        next.push_back(f);
        continue;
      }
      size_t from = 0, at;
      while ((at = f.first.find(piece, from)) != std::string::npos) {
        if (at > from) next.emplace_back(f.first.substr(from, at - from), -1);
        next.emplace_back(piece, id);
        from = at + piece.size();
      }
      if (from < f.first.size()) next.emplace_back(f.first.substr(from), -1);
    }
    frags = std::move(next);
  }
  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  bool prev_special = true;
  for (const auto& [raw, id] : frags) {
    if (id >= 0) {
      out.push_back(id);
      prev_special = true;
      continue;
    }
    if (!spm_) {
      encode_bpe(raw, out);
      continue;
    }
    std::string t = add_space_prefix_ && prev_special ? " " + raw : raw;
    std::string escaped;  // llama_escape_whitespace: ' ' as U+2581
    for (char c : t) escaped += c == ' ' ? std::string("\xe2\x96\x81") : std::string(1, c);
    encode_spm(escaped, out);
    prev_special = false;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

}  // namespace kvtool
