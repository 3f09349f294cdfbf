// Reading kvi containers (formats/kvi-v1.md): ArtifactReader checks every byte of the layout, the
// manifest, the section digests and the signature. The writer is artifact_writer.cpp; what both
// share artifact_internal.h.
#include "kvtool/artifact.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "artifact_internal.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

using namespace kvi_internal;  // the internals this file shares (declared in its private header)

constexpr uint32_t kZstdMagic = 0xFD2FB528u;

bool all_zero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

std::string section_label(const SectionEntry& s) {
  std::ostringstream os;
  os << "section '" << s.name << "' (layer " << s.layer << ", kv head " << s.kv_head << ")";
  return os.str();
}

std::string req_str(const json& j, const char* k, const std::string& where) {
  KVT_CHECK(j.contains(k) && j[k].is_string(), BAD_MANIFEST,
            where << " field '" << k << "' is missing or not a string");
  return j[k].get<std::string>();
}
uint64_t req_u64(const json& j, const char* k, const std::string& where) {
  KVT_CHECK(j.contains(k) && j[k].is_number_unsigned(), BAD_MANIFEST,
            where << " field '" << k << "' is missing or not a non-negative integer");
  return j[k].get<uint64_t>();
}
int64_t req_i64(const json& j, const char* k, const std::string& where) {
  KVT_CHECK(j.contains(k) && j[k].is_number_integer(), BAD_MANIFEST,
            where << " field '" << k << "' is missing or not an integer");
  return j[k].get<int64_t>();
}

}  // namespace

size_t section_dtype_size(const std::string& t) {
  if (t == "u8" || t == "i8") return 1;
  if (t == "u16" || t == "f16") return 2;
  if (t == "u32" || t == "i32" || t == "f32") return 4;
  if (t == "u64" || t == "i64") return 8;
  return 0;
}

json SectionEntry::to_json() const {
  return json{{"name", name},         {"dtype", dtype},   {"shape", shape},
              {"codec", codec},       {"offset", offset}, {"stored_size", stored_size},
              {"raw_size", raw_size}, {"sha256", sha256}, {"layer", layer},
              {"kv_head", kv_head}};
}

bool looks_like_artifact(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[4] = {};
  f.read(m, 4);
  return f.gcount() == 4 && std::memcmp(m, "KVI1", 4) == 0;
}

namespace {
std::atomic<uint64_t> g_read_budget{0};  // 0: not set, half the physical memory
}  // namespace

uint64_t default_read_budget() {
  if (uint64_t b = g_read_budget.load()) return b;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 4ull << 30;
  return static_cast<uint64_t>(pages) / 2 * static_cast<uint64_t>(page);
}

void set_default_read_budget(uint64_t bytes) { g_read_budget.store(bytes); }

ArtifactReader::ArtifactReader(const std::string& path) : path_(path) {
  fd_ = open(path.c_str(), O_RDONLY);
  KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot open '" << path << "': " << std::strerror(errno));
  struct stat st {};
  KVT_CHECK(fstat(fd_, &st) == 0 && S_ISREG(st.st_mode), IO_ERROR, "'" << path << "' is not a regular file");
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    KVT_CHECK(p != MAP_FAILED, IO_ERROR, "cannot map '" << path << "': " << std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  }
  try {
    parse();
  } catch (...) {
    release();
    throw;
  }
}

ArtifactReader::ArtifactReader(const uint8_t* data, uint64_t size, std::string name) : path_(std::move(name)) {
  data_ = data;
  size_ = size;
  parse();
}

// Header (formats/kvi-v1.md §Header): every byte is checked, so one artifact is one byte string.
void ArtifactReader::parse_header() {
  const std::string& path = path_;
  if (size_ < 4) {
    KVT_CHECK(size_ == 0 ? false : std::memcmp(data_, "KVI1", size_) != 0, TRUNCATED,
              "'" << path << "' is truncated (" << size_ << " bytes)");
    KVT_THROW(size_ == 0 ? TRUNCATED : BAD_MAGIC, "'" << path << "' is not a kvi artifact");
  }
  KVT_CHECK(std::memcmp(data_, "KVI1", 4) == 0, BAD_MAGIC, "'" << path << "' does not start with the kvi magic 'KVI1'");
  KVT_CHECK(size_ >= kKviHeaderSize, TRUNCATED, "'" << path << "' is truncated inside the header");
  uint16_t major = get_u16(data_ + 4);
  minor_ = get_u16(data_ + 6);
  KVT_CHECK(major == kKviMajor && minor_ == kKviMinor, UNSUPPORTED_VERSION,
            "'" << path << "' is kvi format version " << major << "." << minor_ << "; this kvtool reads version "
                << kKviMajor << "." << kKviMinor << " only");
  KVT_CHECK(get_u32(data_ + 8) == 0, BAD_LAYOUT, "the header flags of '" << path << "' are not 0");
  KVT_CHECK(get_u32(data_ + 12) == kKviHeaderSize, BAD_LAYOUT, "header size field is not " << kKviHeaderSize);
  KVT_CHECK(all_zero(data_ + 24, 40), BAD_LAYOUT, "the reserved header bytes 24-63 of '" << path << "' are not zero");
  uint64_t recorded = get_u64(data_ + 16);
  KVT_CHECK(size_ >= recorded, TRUNCATED,
            "'" << path << "' is truncated: " << size_ << " bytes of " << recorded << " recorded in the header");
  KVT_CHECK(size_ == recorded, BAD_LAYOUT,
            "'" << path << "' has " << size_ - recorded << " bytes beyond the size recorded in its header");
  KVT_CHECK(size_ >= kKviHeaderSize + kKviFooterSize, TRUNCATED, "'" << path << "' is too short for a footer");
}

// Footer, manifest and signature placement: each part starts at the first 64-byte boundary after
// the previous one, the footer right after the last; padding is zero.
void ArtifactReader::parse_footer() {
  const std::string& path = path_;
  const uint8_t* f = data_ + size_ - kKviFooterSize;
  KVT_CHECK(std::memcmp(f + 76, "KVI1", 4) == 0, BAD_MAGIC, "the footer of '" << path << "' does not end with 'KVI1'");
  KVT_CHECK(get_u32(f + 64) == kKviFooterSize, BAD_LAYOUT, "footer size field is not " << kKviFooterSize);
  KVT_CHECK(get_u16(f + 68) == kKviMajor && get_u16(f + 70) == minor_, UNSUPPORTED_VERSION,
            "footer and header disagree on the format version");
  KVT_CHECK(all_zero(f + 72, 4), BAD_LAYOUT, "the reserved footer bytes 72-75 of '" << path << "' are not zero");
  manifest_off_ = get_u64(f);
  manifest_size_ = get_u64(f + 8);
  uint64_t soff = get_u64(f + 16), ssize = get_u64(f + 24);
  uint64_t footer_start = size_ - kKviFooterSize;
  KVT_CHECK(manifest_off_ >= kKviHeaderSize && manifest_off_ % kKviAlign == 0 && manifest_size_ > 0 &&
                manifest_size_ <= kKviMaxManifest && manifest_off_ <= footer_start &&
                manifest_size_ <= footer_start - manifest_off_,
            BAD_LAYOUT, "manifest offset " << manifest_off_ << " / size " << manifest_size_ << " is out of bounds");
  const uint64_t mend = manifest_off_ + manifest_size_;
  if (ssize != 0 || soff != 0) {
    KVT_CHECK(
        ssize == kKviSignatureSize && soff == align_up(mend) && soff <= footer_start && ssize == footer_start - soff,
        BAD_LAYOUT,
        "signature offset " << soff << " / size " << ssize
                            << " is not where the format puts it (next 64-byte boundary after the manifest, "
                               "followed by the footer)");
    KVT_CHECK(all_zero(data_ + mend, soff - mend), BAD_LAYOUT, "the padding before the signature is not zero");
  } else {
    KVT_CHECK(mend == footer_start, BAD_LAYOUT,
              "'" << path << "' has " << footer_start - mend << " bytes between the manifest and the footer");
  }
  std::memcpy(manifest_digest_.data(), f + 32, 32);
  manifest_text_.assign(reinterpret_cast<const char*>(data_ + manifest_off_), manifest_size_);
  KVT_CHECK(sha256(manifest_text_) == manifest_digest_, MANIFEST_DIGEST,
            "the manifest of '" << path << "' does not match its SHA-256 in the footer (modified or damaged)");
  if (ssize) {
    const uint8_t* b = data_ + soff;
    KVT_CHECK(std::memcmp(b, "KVIS", 4) == 0 && get_u32(b + 4) == 1, BAD_SIGNATURE, "the signature block is malformed");
    PublicKeyRaw pub;
    std::memcpy(pub.data(), b + 8, 32);
    std::memcpy(signature_.data(), b + 40, 64);
    signer_ = pub;
  }
}

// The manifest is parsed with a nesting limit first (a recursive parser must never see a hostile
// depth) and must be in canonical form; artifacts of kvtool 0.1.0 may spell floats in its legacy
// (Grisu2) digits instead, consistently in the manifest and the params digest.
void ArtifactReader::parse_manifest() {
  manifest_ = parse_untrusted_json(manifest_text_, "the manifest of '" + path_ + "'", Reason::BAD_MANIFEST,
                                   kJsonMaxDepth, kKviMaxManifest);
  KVT_CHECK(manifest_.is_object(), BAD_MANIFEST, "the manifest is not a JSON object");
  std::string (*form)(const json&) = &canonical_json;
  try {
    if (canonical_json(manifest_) != manifest_text_) {
      KVT_CHECK(legacy_canonical_json(manifest_) == manifest_text_, BAD_MANIFEST,
                "the manifest is not in canonical JSON form");
      form = &legacy_canonical_json;
    }
  } catch (const json::exception& e) {
    KVT_THROW(BAD_MANIFEST, "the manifest cannot be written in canonical form: " << e.what());
  }
  const std::string where = "manifest";
  KVT_CHECK(req_u64(manifest_, "schema_version", where) == 1, UNSUPPORTED_VERSION, "manifest schema_version is not 1");
  KVT_CHECK(req_str(manifest_, "format", where) == "kvi", BAD_MANIFEST, "manifest format is not 'kvi'");
  kind_ = req_str(manifest_, "kind", where);
  KVT_CHECK(manifest_.contains("params") && manifest_["params"].is_object(), BAD_MANIFEST, "manifest params missing");
  KVT_CHECK(req_str(manifest_, "params_digest", where) == to_hex(sha256(form(manifest_["params"]))), PARAMS_DIGEST,
            "the params digest does not match the manifest's params");
  KVT_CHECK(manifest_.contains("source"), BAD_MANIFEST, "manifest has no source binding");
  source_ = SourceBinding::from_json(manifest_["source"]);
  KVT_CHECK(manifest_.contains("coverage") && manifest_["coverage"] == json({0, source_.coverage_end}), BAD_MANIFEST,
            "manifest coverage does not match the source binding's coverage_end");
  KVT_CHECK(req_i64(manifest_, "index_generation", where) >= 1 && req_i64(manifest_, "selector_generation", where) >= 1,
            BAD_MANIFEST, "generations must be >= 1");
  KVT_CHECK(req_str(manifest_, "semantics", where) == "candidate_ids_only", BAD_MANIFEST,
            "manifest semantics must be 'candidate_ids_only'");
  KVT_CHECK(manifest_.contains("sections") && manifest_["sections"].is_array(), BAD_MANIFEST,
            "manifest sections missing");
}

SectionEntry ArtifactReader::parse_section(const json& js) const {
  KVT_CHECK(js.is_object(), BAD_MANIFEST, "section entry is not an object");
  SectionEntry s;
  s.name = req_str(js, "name", "section");
  const std::string w = "section '" + s.name + "'";
  s.dtype = req_str(js, "dtype", w);
  s.codec = req_str(js, "codec", w);
  s.offset = req_u64(js, "offset", w);
  s.stored_size = req_u64(js, "stored_size", w);
  s.raw_size = req_u64(js, "raw_size", w);
  s.sha256 = req_str(js, "sha256", w);
  s.layer = req_i64(js, "layer", w);
  s.kv_head = req_i64(js, "kv_head", w);
  KVT_CHECK(js.contains("shape") && js["shape"].is_array(), BAD_MANIFEST, w << " has no shape");
  uint64_t n = 1;
  for (const auto& d : js["shape"]) {
    KVT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), BAD_MANIFEST,
              w << " shape entries must be non-negative integers");
    KVT_CHECK(checked_mul(n, d.get<uint64_t>(), n), SHAPE_MISMATCH, w << " shape overflows");
    s.shape.push_back(d.get<int64_t>());
  }
  size_t es = section_dtype_size(s.dtype);
  KVT_CHECK(es > 0, BAD_MANIFEST, w << " has unknown dtype '" << s.dtype << "'");
  uint64_t expect;
  KVT_CHECK(checked_mul(n, es, expect) && expect == s.raw_size, SHAPE_MISMATCH,
            w << " raw size " << s.raw_size << " does not match its shape and dtype");
  KVT_CHECK(s.codec == "none" || s.codec == "zstd" || s.codec == "zstd-delta", BAD_MANIFEST,
            w << " has unknown codec '" << s.codec << "'");
  KVT_CHECK(s.codec != "zstd-delta" || delta_dtype(s.dtype), BAD_MANIFEST,
            w << " has codec zstd-delta, which applies to unsigned integer dtypes only, but dtype " << s.dtype);
  KVT_CHECK(s.codec != "none" || s.stored_size == s.raw_size, BAD_LAYOUT, w << " is uncompressed but sizes differ");
  Digest tmp;
  KVT_CHECK(from_hex(s.sha256, tmp), BAD_MANIFEST, w << " sha256 is not 64 hex digits");
  return s;
}

void ArtifactReader::parse() {
  parse_header();
  parse_footer();
  parse_manifest();
  uint64_t prev_end = kKviHeaderSize;
  for (const auto& js : manifest_["sections"]) {
    SectionEntry s = parse_section(js);
    KVT_CHECK(s.offset == align_up(prev_end) && s.offset <= manifest_off_ && s.stored_size <= manifest_off_ - s.offset,
              BAD_LAYOUT,
              "section '" << s.name << "' at offset " << s.offset << " (" << s.stored_size
                          << " bytes) is out of bounds, overlapping or not at the next 64-byte boundary ("
                          << align_up(prev_end) << ")");
    KVT_CHECK(all_zero(data_ + prev_end, s.offset - prev_end), BAD_LAYOUT,
              "the padding before section '" << s.name << "' is not zero");
    prev_end = s.offset + s.stored_size;
    raw_total_ = raw_total_ > UINT64_MAX - s.raw_size ? UINT64_MAX : raw_total_ + s.raw_size;
    sections_.push_back(std::move(s));
  }
  KVT_CHECK(manifest_off_ == align_up(prev_end), BAD_LAYOUT,
            "the manifest at offset " << manifest_off_ << " is not at the next 64-byte boundary after the sections ("
                                      << align_up(prev_end) << ")");
  KVT_CHECK(all_zero(data_ + prev_end, manifest_off_ - prev_end), BAD_LAYOUT,
            "the padding before the manifest is not zero");
}

void ArtifactReader::release() {
  if (fd_ >= 0) {  // only a file-backed reader owns its mapping
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
    close(fd_);
  }
  fd_ = -1;
  data_ = nullptr;
}

ArtifactReader::~ArtifactReader() { release(); }

const SectionEntry* ArtifactReader::find(const std::string& name, int64_t layer, int64_t kv_head) const {
  for (const auto& s : sections_)
    if (s.name == name && s.layer == layer && s.kv_head == kv_head) return &s;
  return nullptr;
}

// A zstd section must be exactly one frame that states its content size (= raw_size) and a window
// of at most 2^kKviMaxWindowLog bytes. Reads only the frame and block headers: nothing is
// allocated or decompressed here.
void ArtifactReader::check_frame(const SectionEntry& s) const {
  const uint8_t* src = data_ + s.offset;
  // Writers keep a zstd frame only when it is smaller than the raw bytes.
  KVT_CHECK(s.stored_size < s.raw_size, DECOMPRESS_FAILED,
            section_label(s) << " is stored as zstd but is not smaller than its raw size");
  unsigned long long fcs = ZSTD_getFrameContentSize(src, s.stored_size);
  KVT_CHECK(s.stored_size >= 6 && get_u32(src) == kZstdMagic && fcs != ZSTD_CONTENTSIZE_ERROR &&
                fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs == s.raw_size,
            DECOMPRESS_FAILED,
            section_label(s) << " is not a zstd frame that states a content size of " << s.raw_size << " bytes");
  // Frame header descriptor (RFC 8878 3.1.1.1.1): single-segment frames use their content size as
  // the window; others carry a window descriptor byte. A dictionary id is never written by kvtool.
  const uint8_t fhd = src[4];
  uint64_t window = fcs;
  if (!(fhd & 0x20)) {
    const uint8_t wd = src[5];
    const uint64_t base = 1ull << (10 + (wd >> 3));
    window = base + base / 8 * (wd & 7);
  }
  KVT_CHECK(window <= (1ull << kKviMaxWindowLog) && (fhd & 3) == 0, DECOMPRESS_FAILED,
            section_label(s) << " is a zstd frame with a " << window
                             << "-byte window or a dictionary; kvi allows windows up to " << (1ull << kKviMaxWindowLog)
                             << " bytes and no dictionary");
  size_t csize = ZSTD_findFrameCompressedSize(src, s.stored_size);
  KVT_CHECK(!ZSTD_isError(csize) && csize == s.stored_size, DECOMPRESS_FAILED,
            section_label(s) << " is not exactly one zstd frame of " << s.stored_size << " bytes");
}

void ArtifactReader::check_budget(const SectionEntry& s) const {
  KVT_CHECK(s.raw_size == 0 || raw_total_ <= budget_, OUT_OF_MEMORY,
            "'" << path_ << "' holds " << raw_total_ << " raw section bytes, more than this reader's memory budget of "
                << budget_ << " bytes (the kvtool command sets it from KVTOOL_READ_BUDGET)");
}

std::vector<uint8_t> ArtifactReader::read_section(const SectionEntry& s) const {
  // Checked before anything is allocated: the reader's budget, then the frame's own claims.
  check_budget(s);
  // Retained bytes were digest-checked when they were decompressed: a copy needs no second check.
  if (const std::vector<uint8_t>* kept = retained(s)) return *kept;
  std::vector<uint8_t> out;
  if (s.codec == "none") {
    out.resize(s.raw_size);
    if (s.raw_size) std::memcpy(out.data(), data_ + s.offset, s.raw_size);
  } else {
    out = decompress_zstd(s);
  }
  if (!verified_) check_digest(s, sha256(out.data(), out.size()));
  return out;
}

std::span<const uint8_t> ArtifactReader::section_view(const SectionEntry& s, std::vector<uint8_t>& scratch) const {
  check_budget(s);  // the same refusals as read_section(), whichever way the bytes are served
  if (const std::vector<uint8_t>* kept = retained(s)) return *kept;
  // Only an entry of sections() (bounds checked at parse) is served in place, and only from bytes
  // that cannot change behind the reader once their digests were checked (an in-memory image).
  const bool own_entry = &s >= sections_.data() && &s < sections_.data() + sections_.size();
  if (verified_ && fd_ < 0 && own_entry && s.codec == "none") return {data_ + s.offset, s.raw_size};
  scratch = read_section(s);
  return scratch;
}

// The whole section in one call (check_frame bounds what is allocated to the stated raw size).
std::vector<uint8_t> ArtifactReader::decompress_zstd(const SectionEntry& s) const {
  check_frame(s);
  std::vector<uint8_t> out(s.raw_size);
  decompressions_.fetch_add(1, std::memory_order_relaxed);
  size_t r = ZSTD_decompress(out.data(), out.size(), data_ + s.offset, s.stored_size);
  KVT_CHECK(!ZSTD_isError(r) && r == s.raw_size, DECOMPRESS_FAILED,
            section_label(s) << " does not decompress: " << (ZSTD_isError(r) ? ZSTD_getErrorName(r) : "wrong size"));
  if (s.codec == "zstd-delta") {
    const size_t es = section_dtype_size(s.dtype);
    uint64_t prev = 0;
    delta_code(out.data(), out.size() / es, es, true, prev);
  }
  return out;
}

// The retained raw bytes of `s` when it is one of this reader's zstd sections, else null. Callers
// pass entries of sections(); a copy of one is matched by everything its digest check relied on.
const std::vector<uint8_t>* ArtifactReader::retained(const SectionEntry& s) const {
  if (retained_.empty() || s.codec == "none") return nullptr;
  auto same = [&](size_t i) {
    const SectionEntry& e = sections_[i];
    return !retained_[i].empty() && e.offset == s.offset && e.stored_size == s.stored_size &&
           e.raw_size == s.raw_size && e.codec == s.codec && e.sha256 == s.sha256;
  };
  if (&s >= sections_.data() && &s < sections_.data() + sections_.size()) {
    const size_t i = static_cast<size_t>(&s - sections_.data());
    return same(i) ? &retained_[i] : nullptr;
  }
  for (size_t i = 0; i < sections_.size(); ++i)
    if (same(i)) return &retained_[i];
  return nullptr;
}

void ArtifactReader::release_sections() {
  retain_ = false;
  std::vector<std::vector<uint8_t>>().swap(retained_);
}

void ArtifactReader::check_digest(const SectionEntry& s, const Digest& d) const {
  KVT_CHECK(to_hex(d) == s.sha256, SECTION_DIGEST,
            section_label(s) << " does not match its recorded SHA-256 (modified or damaged)");
}

// Decompresses through a fixed buffer into an incremental SHA-256: memory stays bounded by the
// buffer and the frame's window whatever the section claims.
Digest ArtifactReader::hash_zstd_section(const SectionEntry& s) const {
  check_frame(s);
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> ds(ZSTD_createDStream(), &ZSTD_freeDStream);
  KVT_CHECK(ds, OUT_OF_MEMORY, "cannot create a zstd decompression stream");
  KVT_CHECK(!ZSTD_isError(ZSTD_DCtx_setParameter(ds.get(), ZSTD_d_windowLogMax, kKviMaxWindowLog)), INTERNAL,
            "cannot limit the zstd window");
  // One byte short of zstd's block-sized buffer: with it, zstd-delta elements straddle every chunk
  // boundary, so the carry below runs on every section larger than a block (and is tested).
  std::vector<uint8_t> buf(ZSTD_DStreamOutSize() - 1);
  decompressions_.fetch_add(1, std::memory_order_relaxed);
  ZSTD_inBuffer in{data_ + s.offset, s.stored_size, 0};
  Sha256 h;
  uint64_t produced = 0, prev = 0;
  // zstd-delta: only whole elements are decoded and hashed; a partial one waits at the buffer's start.
  const size_t es = s.codec == "zstd-delta" ? section_dtype_size(s.dtype) : 1;
  size_t carry = 0, ret = 1;
  while (ret != 0) {
    ZSTD_outBuffer out{buf.data(), buf.size(), carry};
    ret = ZSTD_decompressStream(ds.get(), &out, &in);
    KVT_CHECK(!ZSTD_isError(ret), DECOMPRESS_FAILED,
              section_label(s) << " does not decompress: " << ZSTD_getErrorName(ret));
    produced += out.pos - carry;
    KVT_CHECK(produced <= s.raw_size && (ret == 0 || in.pos < in.size || out.pos == out.size), DECOMPRESS_FAILED,
              section_label(s) << " does not decompress to exactly " << s.raw_size << " bytes");
    const size_t whole = out.pos / es * es;
    if (es > 1) delta_code(buf.data(), whole / es, es, true, prev);
    h.update(buf.data(), whole);
    carry = out.pos - whole;
    if (carry) std::memmove(buf.data(), buf.data() + whole, carry);
  }
  KVT_CHECK(produced == s.raw_size && in.pos == in.size, DECOMPRESS_FAILED,
            section_label(s) << " does not decompress to exactly " << s.raw_size << " bytes in one frame");
  return h.finish();
}

// A retaining reader keeps a zstd section whole only when its raw size is at most this multiple of
// its stored size: before the kind's structure is validated, what it holds is then bounded by the
// image's own bytes, and a decompression bomb (corpus case zstd-rle-1gib) still streams through a
// fixed buffer; such a section is decompressed again by each later read.
constexpr uint64_t kMaxRetainRatio = 16;

void ArtifactReader::verify_sections() const {
  // Retaining holds every raw byte at once, so it needs what read_section() needs: the bytes must
  // not change behind the reader (not a file mapping) and the raw total must fit the budget.
  const bool keep = retain_ && fd_ < 0 && raw_total_ <= budget_;
  if (keep) retained_.assign(sections_.size(), {});
  for (size_t i = 0; i < sections_.size(); ++i) {
    const SectionEntry& s = sections_[i];
    if (s.codec == "none") {
      check_digest(s, sha256(data_ + s.offset, s.raw_size));  // in place: no copy
    } else if (keep && s.raw_size / kMaxRetainRatio <= s.stored_size) {
      std::vector<uint8_t> raw = decompress_zstd(s);
      check_digest(s, sha256(raw.data(), raw.size()));
      retained_[i] = std::move(raw);  // only digest-checked bytes are ever served
    } else {
      check_digest(s, hash_zstd_section(s));
    }
  }
  // Bytes in memory this reader does not own cannot change behind it (the pool's private copy), so
  // later reads need not hash again; a file mapping can, so file-backed readers always re-check.
  if (fd_ < 0) verified_ = true;
}

void ArtifactReader::verify_signature(const std::vector<PublicKeyRaw>& trusted, bool require) const {
  if (!signer_) {
    KVT_CHECK(!require, SIGNATURE_REQUIRED, "'" << path_ << "' is not signed and a signature is required");
    KVT_CHECK(trusted.empty(), SIGNATURE_REQUIRED, "'" << path_ << "' is not signed but trusted keys were given");
    return;
  }
  // Needs only the manifest digest from the footer: no section is read before the signature.
  KVT_CHECK(!is_weak_public_key(*signer_), BAD_SIGNATURE,
            "the signature of '" << path_ << "' names a small-order or non-canonical Ed25519 public key (key id "
                                 << key_id(*signer_) << "), which any manifest can be made to verify under");
  KVT_CHECK(is_canonical_signature(signature_), BAD_SIGNATURE,
            "the signature of '" << path_ << "' is not a canonical Ed25519 signature (small-order R or S >= L)");
  KVT_CHECK(kvtool::verify_signature(*signer_, dsse_pae(manifest_digest_), signature_), BAD_SIGNATURE,
            "the signature of '" << path_ << "' does not verify (key id " << key_id(*signer_) << ")");
  if (!trusted.empty()) {
    bool ok = false;
    for (const auto& k : trusted) ok = ok || k == *signer_;
    KVT_CHECK(ok, UNTRUSTED_KEY, "'" << path_ << "' is signed by key " << key_id(*signer_) << ", which is not trusted");
  }
}

}  // namespace kvtool
