// Writing kvi containers (formats/kvi-v1.md): ArtifactWriter, section by section then manifest,
// signature and footer; and sign_artifact, which adds a signature to a written one. The reader is
// artifact.cpp; what both share artifact_internal.h.
#include "kvtool/artifact.h"

#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "artifact_internal.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

using namespace kvi_internal;  // the internals this file shares (declared in its private header)

void make_header(uint8_t* h, uint64_t file_size) {
  std::memset(h, 0, kKviHeaderSize);
  std::memcpy(h, "KVI1", 4);
  put_u16(h + 4, kKviMajor);
  put_u16(h + 6, kKviMinor);
  put_u32(h + 8, 0);  // flags
  put_u32(h + 12, static_cast<uint32_t>(kKviHeaderSize));
  put_u64(h + 16, file_size);
}

void make_footer(uint8_t* f, uint64_t moff, uint64_t msize, uint64_t soff, uint64_t ssize, const Digest& md) {
  std::memset(f, 0, kKviFooterSize);
  put_u64(f + 0, moff);
  put_u64(f + 8, msize);
  put_u64(f + 16, soff);
  put_u64(f + 24, ssize);
  std::memcpy(f + 32, md.data(), 32);
  put_u32(f + 64, static_cast<uint32_t>(kKviFooterSize));
  put_u16(f + 68, kKviMajor);
  put_u16(f + 70, kKviMinor);
  std::memcpy(f + 76, "KVI1", 4);
}

void make_signature_block(uint8_t* b, const PublicKeyRaw& pub, const SignatureRaw& sig) {
  std::memcpy(b, "KVIS", 4);
  put_u32(b + 4, 1);
  std::memcpy(b + 8, pub.data(), 32);
  std::memcpy(b + 40, sig.data(), 64);
}

}  // namespace

ArtifactWriter::ArtifactWriter(const std::string& path, int zstd_level, bool overwrite)
    : out_(std::make_unique<AtomicOutput>(path, overwrite)), level_(zstd_level) {
  KVT_CHECK(zstd_level >= 0 && zstd_level <= 19, USAGE, "zstd level must be in 0..19, got " << zstd_level);
  uint8_t h[kKviHeaderSize];
  make_header(h, 0);  // file size patched in finish()
  write_all(out_->fd(), h, sizeof h, out_->temp_path());
  pos_ = kKviHeaderSize;
}

ArtifactWriter::~ArtifactWriter() = default;

void ArtifactWriter::pad_to_alignment() {
  static const uint8_t zeros[kKviAlign] = {};
  uint64_t target = align_up(pos_);
  if (target > pos_) write_all(out_->fd(), zeros, target - pos_, out_->temp_path());
  pos_ = target;
}

void ArtifactWriter::add_section(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                                 const void* data, size_t bytes, int64_t layer, int64_t kv_head, SectionFilter filter) {
  KVT_CHECK(!finished_, INTERNAL, "section added after finish");
  size_t es = section_dtype_size(dtype);
  KVT_CHECK(es > 0, INTERNAL, "unknown section dtype " << dtype);
  uint64_t n = 1;
  for (auto s : shape) {
    KVT_CHECK(s >= 0 && checked_mul(n, static_cast<uint64_t>(s), n), INTERNAL, "bad section shape");
  }
  KVT_CHECK(n * es == bytes, INTERNAL, "section " << name << ": shape says " << n * es << " bytes, got " << bytes);
  SectionEntry e;
  e.name = name;
  e.dtype = dtype;
  e.shape = shape;
  e.raw_size = bytes;
  e.layer = layer;
  e.kv_head = kv_head;
  e.sha256 = to_hex(sha256(data, bytes));
  pad_to_alignment();
  e.offset = pos_;
  std::vector<uint8_t> comp;
  const bool delta = filter == SectionFilter::delta;
  KVT_CHECK(!delta || delta_dtype(dtype), INTERNAL, "section " << name << ": delta coding needs an unsigned dtype");
  if (level_ > 0 && bytes > 0) {
    std::vector<uint8_t> coded;
    if (delta) {
      coded.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
      uint64_t prev = 0;
      delta_code(coded.data(), bytes / es, es, false, prev);
    }
    comp.resize(ZSTD_compressBound(bytes));
    size_t r = ZSTD_compress(comp.data(), comp.size(), delta ? coded.data() : data, bytes, level_);
    KVT_CHECK(!ZSTD_isError(r), INTERNAL, "zstd compression failed: " << ZSTD_getErrorName(r));
    comp.resize(r);
  }
  if (!comp.empty() && comp.size() < bytes) {
    e.codec = delta ? "zstd-delta" : "zstd";
    e.stored_size = comp.size();
    write_all(out_->fd(), comp.data(), comp.size(), out_->temp_path());
  } else {
    e.codec = "none";
    e.stored_size = bytes;
    write_all(out_->fd(), data, bytes, out_->temp_path());
  }
  pos_ += e.stored_size;
  sections_.push_back(std::move(e));
}

void ArtifactWriter::add_stored_section(const SectionEntry& entry, const uint8_t* stored) {
  KVT_CHECK(!finished_, INTERNAL, "section added after finish");
  SectionEntry e = entry;
  pad_to_alignment();
  e.offset = pos_;
  write_all(out_->fd(), stored, e.stored_size, out_->temp_path());
  pos_ += e.stored_size;
  sections_.push_back(std::move(e));
}

Digest ArtifactWriter::finish(const ManifestCore& core, const SigningKey* key) {
  KVT_CHECK(!finished_, INTERNAL, "artifact finished twice");
  json m;
  m["schema_version"] = 1;
  m["format"] = "kvi";
  m["format_version"] = {kKviMajor, kKviMinor};
  m["kind"] = core.kind;
  m["params"] = core.params;
  m["params_digest"] = to_hex(sha256(canonical_json(core.params)));
  m["builder"] = {{"name", "kvtool"}, {"version", kBuilderVersion}};
  m["source"] = core.source.to_json();
  m["coverage"] = {0, core.source.coverage_end};
  m["index_generation"] = core.index_generation;
  m["selector_generation"] = core.selector_generation;
  m["semantics"] = "candidate_ids_only";
  m["kind_data"] = core.kind_data;
  json secs = json::array();
  for (const auto& s : sections_) secs.push_back(s.to_json());
  m["sections"] = secs;
  std::string text = canonical_json(m);
  KVT_CHECK(text.size() <= kKviMaxManifest, INTERNAL, "manifest too large");
  Digest md = sha256(text);

  pad_to_alignment();
  uint64_t moff = pos_;
  write_all(out_->fd(), text.data(), text.size(), out_->temp_path());
  pos_ += text.size();
  uint64_t soff = 0, ssize = 0;
  if (key) {
    pad_to_alignment();
    soff = pos_;
    ssize = kKviSignatureSize;
    uint8_t blk[kKviSignatureSize];
    make_signature_block(blk, key->public_key(), key->sign(dsse_pae(md)));
    write_all(out_->fd(), blk, sizeof blk, out_->temp_path());
    pos_ += ssize;
  }
  uint8_t f[kKviFooterSize];
  make_footer(f, moff, text.size(), soff, ssize, md);
  write_all(out_->fd(), f, sizeof f, out_->temp_path());
  pos_ += kKviFooterSize;
  uint8_t h[kKviHeaderSize];
  make_header(h, pos_);
  KVT_CHECK(pwrite(out_->fd(), h, sizeof h, 0) == static_cast<ssize_t>(sizeof h), IO_ERROR,
            "cannot write the artifact header: " << std::strerror(errno));
  out_->commit();
  finished_ = true;
  return md;
}

void sign_artifact(const std::string& path, const SigningKey& key) {
  ArtifactReader r(path);
  AtomicOutput out(path, true);
  uint64_t mend = r.manifest_end();
  write_all(out.fd(), r.data(), mend, out.temp_path());
  uint64_t pos = mend;
  uint64_t soff = align_up(pos);
  static const uint8_t zeros[kKviAlign] = {};
  write_all(out.fd(), zeros, soff - pos, out.temp_path());
  uint8_t blk[kKviSignatureSize];
  make_signature_block(blk, key.public_key(), key.sign(dsse_pae(r.manifest_digest())));
  write_all(out.fd(), blk, sizeof blk, out.temp_path());
  pos = soff + kKviSignatureSize;
  uint8_t f[kKviFooterSize];
  const uint8_t* oldf = r.data() + r.file_size() - kKviFooterSize;
  make_footer(f, get_u64(oldf), get_u64(oldf + 8), soff, kKviSignatureSize, r.manifest_digest());
  write_all(out.fd(), f, sizeof f, out.temp_path());
  pos += kKviFooterSize;
  uint8_t h[kKviHeaderSize];
  std::memcpy(h, r.data(), kKviHeaderSize);
  put_u64(h + 16, pos);
  KVT_CHECK(pwrite(out.fd(), h, sizeof h, 0) == static_cast<ssize_t>(sizeof h), IO_ERROR, "cannot write header");
  out.commit();
}

}  // namespace kvtool
