// The readers behind the registry of kvtool/snapshot.h (src/snapshot.cpp): one open function per
// reader file, and the probes that recognise a format by content. Internal to lib/snapshot.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kvtool/snapshot.h"

namespace kvtool {

// tensor_layout.cpp: .npy / .npz / safetensors files through --layout.
std::unique_ptr<KvSnapshot> open_tensor_snapshot(const SnapshotRequest& r);

// llama_state.cpp: a llama.cpp ggsq / ggsn file with its model's GGUF (request.gguf).
std::unique_ptr<KvSnapshot> open_llama_state_snapshot(const SnapshotRequest& r);

// chunk_files.cpp: LMCache and SGLang chunk / page files of format r.chunks.format.
std::unique_ptr<KvSnapshot> open_chunk_snapshot(const SnapshotRequest& r);

}  // namespace kvtool
