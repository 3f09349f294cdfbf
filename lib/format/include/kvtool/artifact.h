// kvi v1 artifact container (formats/kvi-v1.md): streaming atomic writer and a hardened,
// mmap-based reader that bounds-checks every offset and size before touching data.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtool/atomic_file.h"
#include "kvtool/json.h"
#include "kvtool/sha256.h"
#include "kvtool/signing.h"
#include "kvtool/identity.h"

namespace kvtool {

inline constexpr uint16_t kKviMajor = 1;
inline constexpr uint16_t kKviMinor = 0;
inline constexpr uint64_t kKviHeaderSize = 64;
inline constexpr uint64_t kKviFooterSize = 80;
inline constexpr uint64_t kKviAlign = 64;
inline constexpr uint64_t kKviSignatureSize = 104;
inline constexpr uint64_t kKviMaxManifest = 64ull << 20;
// Largest zstd window a section frame may use (2^24 = 16 MiB; kvtool's levels 1..19 use at most
// 2^23): streaming verification needs no more memory than this, whatever a section claims.
inline constexpr int kKviMaxWindowLog = 24;
inline constexpr const char* kBuilderVersion = "0.1.0";

// Element size of a section dtype name ("u8", "i8", "u16", "u32", "u64", "i32", "i64", "f16", "f32");
// 0 for an unknown name.
size_t section_dtype_size(const std::string& dtype);

struct SectionEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string codec;  // "none" | "zstd" | "zstd-delta" (formats/kvi-v1.md)
  uint64_t offset = 0, stored_size = 0, raw_size = 0;
  std::string sha256;                // of the raw (uncompressed) bytes
  int64_t layer = -1, kv_head = -1;  // -1: not bound to one part
  json to_json() const;
};

// What a builder supplies for the manifest; the writer adds format, sections and digests.
struct ManifestCore {
  std::string kind;
  json params = json::object();
  SourceBinding source;
  int64_t index_generation = 1;
  int64_t selector_generation = 1;
  json kind_data = json::object();  // kind-specific, signed metadata (e.g. generation windows)
};

// How a writer prepares a section for zstd: `delta` stores element-wise differences (codec
// "zstd-delta"; unsigned dtypes only), for sorted ids and running offsets.
enum class SectionFilter { none, delta };

class ArtifactWriter {
 public:
  // zstd_level 0 stores sections uncompressed; 1..19 compresses (kept only when smaller).
  ArtifactWriter(const std::string& path, int zstd_level = 3, bool overwrite = true);
  ~ArtifactWriter();
  void add_section(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                   const void* data, size_t bytes, int64_t layer = -1, int64_t kv_head = -1,
                   SectionFilter filter = SectionFilter::none);
  // Copies a section exactly as stored in another artifact (same codec and bytes; used by merge).
  void add_stored_section(const SectionEntry& entry, const uint8_t* stored);
  // Writes manifest, optional signature and footer, then renames into place. Returns the manifest digest.
  Digest finish(const ManifestCore& core, const SigningKey* key = nullptr);

 private:
  void pad_to_alignment();
  std::unique_ptr<AtomicOutput> out_;
  int level_;
  uint64_t pos_ = 0;
  std::vector<SectionEntry> sections_;
  bool finished_ = false;
};

// The default memory budget of a new reader's materializing reads (read_section): what
// set_default_read_budget() set for this process (the command-line tools set it from
// KVTOOL_READ_BUDGET; the library reads no environment), otherwise half the physical memory.
uint64_t default_read_budget();
void set_default_read_budget(uint64_t bytes);

class ArtifactReader {
 public:
  // Maps the file read-only and checks header, footer, bounds, manifest digest and schema.
  // Section digests are checked lazily by read_section() and all at once by verify_sections().
  explicit ArtifactReader(const std::string& path);
  // Reads an artifact image already in memory (the runtime pool's copy); the bytes are not owned
  // and must outlive the reader. `name` is used in messages.
  ArtifactReader(const uint8_t* data, uint64_t size, std::string name);
  ~ArtifactReader();
  ArtifactReader(const ArtifactReader&) = delete;
  ArtifactReader& operator=(const ArtifactReader&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint16_t minor_version() const { return minor_; }
  const json& manifest() const { return manifest_; }
  const std::string& manifest_text() const { return manifest_text_; }
  const Digest& manifest_digest() const { return manifest_digest_; }
  uint64_t manifest_end() const { return manifest_off_ + manifest_size_; }
  const std::string& kind() const { return kind_; }
  const SourceBinding& source() const { return source_; }
  const std::vector<SectionEntry>& sections() const { return sections_; }
  const SectionEntry* find(const std::string& name, int64_t layer = -1, int64_t kv_head = -1) const;
  bool is_signed() const { return signer_.has_value(); }
  const std::optional<PublicKeyRaw>& signer() const { return signer_; }
  const SignatureRaw& signature() const { return signature_; }
  const uint8_t* data() const { return data_; }

  // Raw bytes of one section: decompressed, size- and SHA-256-checked. Refused with OUT_OF_MEMORY
  // before anything is allocated when the artifact's total raw section bytes exceed the memory
  // budget (a bound on what a caller that materializes every section can hold).
  std::vector<uint8_t> read_section(const SectionEntry& s) const;
  // The same bytes without a copy where this reader already holds them digest-checked (a retained
  // section, or an uncompressed one of a verified in-memory image, in place); otherwise
  // read_section() into `scratch`. Valid until release_sections() or the next use of `scratch`.
  std::span<const uint8_t> section_view(const SectionEntry& s, std::vector<uint8_t>& scratch) const;
  // Every section digest, in bounded memory: compressed sections are streamed through a fixed
  // buffer into an incremental SHA-256, never materialized; the budget does not apply (except in
  // the retaining mode below).
  void verify_sections() const;
  // Opt-in for in-memory readers (the runtime pool's private copy): the next verify_sections()
  // decompresses each zstd section whole, once, checks its digest and keeps the raw bytes, and
  // read_section() then serves a copy of them instead of decompressing again. Only when
  // raw_total() fits the memory budget (checked before anything is allocated); otherwise, and
  // always for file-backed readers, verify_sections() streams in bounded memory as above.
  void retain_sections() { retain_ = true; }
  // Frees the retained raw bytes and leaves the mode; later reads decompress again.
  void release_sections();
  // zstd decompressions (streamed or whole) this reader has run: lets tests and benches see that
  // a section is decompressed once.
  uint64_t zstd_decompressions() const { return decompressions_.load(std::memory_order_relaxed); }
  // Checks the signature against the embedded key (BAD_SIGNATURE: also small-order or non-canonical
  // keys and signatures), then trust (UNTRUSTED_KEY). Uses only the footer's manifest digest, so it
  // can (and in admission does) run before any section is read.
  void verify_signature(const std::vector<PublicKeyRaw>& trusted, bool require) const;
  // Sum of the raw sizes the manifest claims for all sections (saturating).
  uint64_t raw_total() const { return raw_total_; }
  uint64_t memory_budget() const { return budget_; }
  void set_memory_budget(uint64_t bytes) { budget_ = bytes; }

 private:
  void parse();
  void parse_header();
  void parse_footer();
  void parse_manifest();
  SectionEntry parse_section(const json& js) const;
  void release();
  void check_frame(const SectionEntry& s) const;
  Digest hash_zstd_section(const SectionEntry& s) const;
  std::vector<uint8_t> decompress_zstd(const SectionEntry& s) const;
  const std::vector<uint8_t>* retained(const SectionEntry& s) const;
  void check_digest(const SectionEntry& s, const Digest& d) const;
  void check_budget(const SectionEntry& s) const;
  mutable bool verified_ = false;
  bool retain_ = false;
  // Raw bytes of the digest-checked zstd sections, by section index (empty: not retained).
  mutable std::vector<std::vector<uint8_t>> retained_;
  mutable std::atomic<uint64_t> decompressions_{0};
  uint64_t raw_total_ = 0;
  uint64_t budget_ = default_read_budget();
  std::string path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint16_t minor_ = 0;
  uint64_t manifest_off_ = 0, manifest_size_ = 0;
  std::string manifest_text_;
  Digest manifest_digest_{};
  json manifest_;
  std::string kind_;
  SourceBinding source_;
  std::vector<SectionEntry> sections_;
  std::optional<PublicKeyRaw> signer_;
  SignatureRaw signature_{};
};

// True when the file starts with the kvi magic.
bool looks_like_artifact(const std::string& path);
// Adds (or replaces) the signature of an artifact, atomically; the manifest is unchanged.
void sign_artifact(const std::string& path, const SigningKey& key);

}  // namespace kvtool
