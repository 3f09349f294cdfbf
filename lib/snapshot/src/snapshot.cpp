// The snapshot registry (kvtool/snapshot.h): every reader kvtool has, one line each. Adding a
// format is one reader file and one line here (docs/adding-a-format.md).
#include "kvtool/snapshot.h"

#include "impl/readers.h"
#include "kvtool/error.h"

namespace kvtool {

void KvSnapshot::read_q(int64_t layer, std::vector<float>&) {
  KVT_THROW(INTERNAL, "read_q(" << layer << ") of a snapshot without queries");
}

std::string KvSnapshot::label(char what, int64_t) const { return std::string(1, what); }

void KvSnapshot::complete_meta(json&) const {}

namespace {

bool is_llama_state(const std::vector<std::string>& inputs) {
  return inputs.size() == 1 && looks_like_llama_state(inputs[0]);
}

bool anything(const std::vector<std::string>&) { return true; }

// A chunk format is never guessed: raw chunks have no header to recognise.
template <const char* Name>
std::unique_ptr<KvSnapshot> open_chunks(const SnapshotRequest& r) {
  SnapshotRequest named = r;
  named.chunks.format = Name;
  return open_chunk_snapshot(named);
}

constexpr char kLmcacheRaw[] = "lmcache-raw", kLmcacheFs[] = "lmcache-fs", kLmcacheV0[] = "lmcache-v0",
               kSglangPage[] = "sglang-page";

}  // namespace

const std::vector<SnapshotFormat>& snapshot_formats() {
  static const std::vector<SnapshotFormat> formats = {
      {"llama-state", "llama.cpp sequence-state (ggsq) and session (ggsn) files (formats/llama-state.md)",
       is_llama_state, open_llama_state_snapshot},
      {kLmcacheRaw, "LMCache v1 local-disk chunks, headerless (formats/lmcache.md)", nullptr, open_chunks<kLmcacheRaw>},
      {kLmcacheFs, "LMCache v1 FS-connector chunks, 28-byte header (formats/lmcache.md)", nullptr,
       open_chunks<kLmcacheFs>},
      {kLmcacheV0, "LMCache v0 safetensors chunks (formats/lmcache.md)", nullptr, open_chunks<kLmcacheV0>},
      {kSglangPage, "SGLang HiCache file-backend pages (formats/sglang-hicache.md)", nullptr, open_chunks<kSglangPage>},
      {"tensors", ".npy / .npz / safetensors tensors through --layout (man/kvtool-import.1)", anything,
       open_tensor_snapshot},
  };
  return formats;
}

const SnapshotFormat& snapshot_format_for(const SnapshotRequest& r) {
  const auto& all = snapshot_formats();
  if (r.format.empty()) {
    for (const SnapshotFormat& f : all)
      if (f.probe && f.probe(r.inputs)) return f;
  }
  std::string names;
  for (const SnapshotFormat& f : all) {
    if (r.format == f.name) return f;
    names += (names.empty() ? "" : ", ") + std::string(f.name);
  }
  KVT_THROW(USAGE, "format '" << excerpt(r.format) << "': expected one of " << names);
}

std::unique_ptr<KvSnapshot> open_snapshot(const SnapshotRequest& r) { return snapshot_format_for(r).open(r); }

}  // namespace kvtool
