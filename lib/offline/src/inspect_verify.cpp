// inspect_file / verify_file (kvtool/report.h): the one entry point of `kvtool inspect` and
// `kvtool verify` (and of Python's kvtool.inspect / kvtool.verify) for every kind of file.
#include <sys/stat.h>

#include "kvtool/error.h"
#include "kvtool/report.h"

namespace kvtool {

namespace {

void require_file(const std::string& p, const char* what) {
  struct stat st {};
  KVT_CHECK(stat(p.c_str(), &st) == 0, IO_ERROR, what << " '" << p << "' does not exist");
}

FileKind known_kind(const std::string& path) {
  const FileKind k = detect_file_kind(path);
  KVT_CHECK(k != FileKind::unknown, UNKNOWN_FILE_TYPE,
            "'" << path << "' is neither a kvdump (HDF5), a kvi artifact nor a llama.cpp state file");
  return k;
}

std::optional<GgufModel> model_of(const std::string& gguf) {
  if (gguf.empty()) return std::nullopt;
  return read_gguf_model(gguf);
}

bool has_llama_options(const std::string& gguf, const LlamaStateOptions& l) {
  return !gguf.empty() || l.seq_id || l.rotation != LlamaRotation::automatic;
}

}  // namespace

FileInspection inspect_file(const std::string& path, const InspectOptions& o) {
  FileInspection r;
  r.kind = known_kind(path);
  if (r.kind == FileKind::llama_state) {
    const auto m = model_of(o.gguf);
    r.state = inspect_llama_state(path, m ? &*m : nullptr, o.llama);
    return r;
  }
  KVT_CHECK(!has_llama_options(o.gguf, o.llama), USAGE,
            "gguf, seq_id and llama_rotation apply to llama.cpp state files, not to '" << path << "'");
  if (r.kind == FileKind::dump)
    r.dump = inspect_dump(path, o.top_channels);
  else
    r.artifact = inspect_artifact(path, o.admit);
  return r;
}

FileVerification verify_file(const std::string& path, const VerifyOptions& o) {
  FileVerification r;
  r.kind = known_kind(path);
  if (!o.source.empty()) require_file(o.source, "source dump");
  const bool signature = !o.trusted_keys.empty() || o.require_signature;
  if (r.kind == FileKind::llama_state) {
    KVT_CHECK(!signature && !o.strict_snapshot, USAGE,
              "signature and snapshot options apply to artifacts, not to llama.cpp state files");
    const auto m = model_of(o.gguf);
    r.state = verify_llama_state(path, m ? &*m : nullptr, o.llama, o.source, o.tolerance);
    if (o.model_check) {
      KVT_CHECK(m, USAGE, "model_check needs gguf: the model that wrote the state");
      SnapshotRequest req;
      req.inputs = {path};
      req.format = "llama-state";
      req.llama = o.llama;
      req.gguf = o.gguf;
      const std::unique_ptr<KvSnapshot> snap = open_snapshot(req);
      r.state->model_check = check_snapshot_model(*snap, o.gguf, ModelCheckOptions{o.tolerance, o.threads});
    }
    return r;
  }
  KVT_CHECK(!has_llama_options(o.gguf, o.llama) && !o.tolerance && !o.model_check, USAGE,
            "gguf, seq_id, llama_rotation, tolerance and model_check apply to llama.cpp state files, not to '" << path
                                                                                                               << "'");
  if (r.kind == FileKind::dump) {
    KVT_CHECK(o.source.empty() && !signature && !o.strict_snapshot, USAGE,
              "source, strict_snapshot and signature options apply to artifacts, not to dumps");
    r.dump = verify_dump(path);
    return r;
  }
  r.artifact = verify_artifact(path, o);
  return r;
}

}  // namespace kvtool
