// inspect / verify / export of dumps and artifacts. Each returns a report (printed by the CLI as
// text, or with --json as the report's to_json()) and throws Error with a reason code on invalid
// input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/identity.h"
#include "kvtool/json.h"
#include "kvtool/model_check.h"
#include "kvtool/signing.h"
#include "kvtool/snapshot.h"

namespace kvtool {

// What a file is, by content, not extension (IO_ERROR if unreadable): a kvdump, a kvi artifact, or
// a cache snapshot the registry recognises (kvtool/snapshot.h; today llama.cpp state files).
enum class FileKind { dump, artifact, llama_state, unknown };
FileKind detect_file_kind(const std::string& path);

// Non-finite counts and magnitudes of one K or V slice of a dump.
struct ChannelMax {
  int64_t channel = 0;
  double max_abs = 0;
};
struct SliceHealth {
  int64_t nan = 0, inf = 0;
  int64_t nonfinite_committed = 0;       // NaN/Inf below the committed frontier (only summed in the JSON)
  double max_abs = 0;                    // over the finite values
  std::vector<ChannelMax> top_channels;  // the channels of largest max |x|, largest first
  json to_json() const;
};
struct PartHealth {
  int64_t layer = 0, kv_head = 0;
  SliceHealth k, v;
};

// What inspect_dump reports; the printers read the fields, --json is to_json().
struct DumpInspection {
  std::string path;
  bool synthetic = false;
  std::string generator;
  DumpGeometry geometry;
  DumpIdentity identity;
  int64_t committed_frontier = 0, uncommitted_rows = 0;
  bool has_q = false, has_tokens = false, has_positions = false;
  struct Bytes {
    uint64_t per_token_all_layers = 0, per_token_per_layer = 0, kv_total = 0, q_total = 0;
  } bytes;
  std::vector<PartHealth> health;  // per (layer, kv head), in that order
  struct HealthSummary {
    int64_t nan = 0, inf = 0, nonfinite_committed = 0;
    double max_abs_k = 0, max_abs_v = 0;
  } health_summary;
  json to_json() const;
};
DumpInspection inspect_dump(const std::string& path, int top_channels = 3);

// An artifact's index bytes as a fraction of the K+V bytes of the rows it covers (inspect and
// eval report it). Index bytes are all its sections (the manifest excluded): `stored` as they lie
// in the file (after their codec), `raw` decompressed. K+V bytes: for each (layer, kv head) part the
// artifact holds, rows [0, coverage_end) of K and of V, head_dim elements each, in the dump's
// stored dtype (f32 = 4 bytes per element, f16 and bf16 = 2).
struct IndexBytes {
  uint64_t stored = 0, raw = 0, kv = 0;
  int64_t parts = 0, rows = 0, head_dim = 0;
  std::string kv_dtype;
  double stored_fraction() const { return kv ? static_cast<double>(stored) / static_cast<double>(kv) : 0.0; }
  double raw_fraction() const { return kv ? static_cast<double>(raw) / static_cast<double>(kv) : 0.0; }
  json to_json() const;
};
// Parts: kind_data.parts when the manifest lists them (a shard holds only its part range), else
// every (layer, kv head) of the source geometry (an artifact-wide index).
IndexBytes index_bytes(const ArtifactReader& r);

// What inspect_artifact reports; --json is to_json().
struct ArtifactInspection {
  std::string path, kind;
  uint64_t file_bytes = 0;
  std::string manifest_sha256;
  size_t manifest_bytes = 0;
  json manifest;  // as recorded (the JSON has it whole: its params and kind_data are the kind's)
  // The manifest fields ArtifactReader checked, typed for the text output (format_version and
  // builder are not checked there: the printer reads them from `manifest`).
  int64_t index_generation = 0, selector_generation = 0;
  json params;  // the kind's parameters: an object whose keys differ per kind
  std::string params_digest, semantics;
  std::vector<SectionEntry> sections;
  uint64_t section_raw_bytes = 0, section_stored_bytes = 0;
  bool is_signed = false;
  std::string key_id;  // the signer's; "" when unsigned (the JSON's signature is null then)
  SourceBinding source;
  std::optional<json> kind_summary;  // KindSpec::summarize, for the kinds that have one: per kind, so JSON
  IndexBytes index;                  // the JSON's "index_bytes"
  json to_json() const;
};
// With `admit` (the default), the artifact first passes the admission every reader runs
// (kvtool/admission.h; no trust anchor): inspect shows only what query and load would accept.
// Without it, only the container and manifest schema are checked (looking into a refused file).
ArtifactInspection inspect_artifact(const std::string& path, bool admit = true);

struct VerifyOptions {
  std::string source;  // dump to check the content binding against ("" = none)
  bool strict_snapshot = false;
  std::vector<PublicKeyRaw> trusted_keys;
  bool require_signature = false;
  // llama.cpp state files: the model's GGUF ("" = none), the sequence and rotation, and the
  // tolerance against `source` (default: the cache types' default_state_tolerance).
  std::string gguf;
  LlamaStateOptions llama;
  std::optional<double> tolerance;
  // llama.cpp state files: run the GGUF model over the state's tokens and require its K
  // (kvtool/model_check.h; `tolerance`, when given, is this check's too).
  bool model_check = false;
  int threads = 1;
};

// What verify_dump found in a valid dump; the printers read the fields, --json is to_json().
struct DumpVerification {
  std::string path;
  int64_t committed_frontier = 0, uncommitted_rows = 0;
  std::string content_digest, snapshot_digest;  // of the committed rows [0, committed_frontier)
  json to_json() const;
};
DumpVerification verify_dump(const std::string& path);

// What verify_artifact checked in a valid artifact; --json is to_json().
struct ArtifactVerification {
  std::string path, kind, manifest_sha256;
  size_t sections_verified = 0;
  bool is_signed = false;
  std::string key_id;              // the signer's key id; "" when unsigned (and absent from the JSON)
  bool signature_trusted = false;  // signed and checked against --pubkey / --trusted-keys
  std::string content_digest;      // of the covered rows [0, coverage_end)
  int64_t coverage_end = 0;
  std::string source_checked;    // the --source dump the binding was checked against; "" = none
  bool strict_snapshot = false;  // in the JSON only when source_checked is set
  json to_json() const;
};
ArtifactVerification verify_artifact(const std::string& path, const VerifyOptions& opt);

// A snapshot (kvtool/snapshot.h) against a dump: each snapshot row's K and V against the dump's row
// at the same position (rows 0..T-1 where a side records no positions), as the largest |difference|
// relative to max|x| of that (layer, kv head) in the dump. GEOMETRY_MISMATCH when the shapes
// differ, PAYLOAD_MISMATCH when the dump lacks a position the snapshot holds.
struct SnapshotComparison {
  double max_rel_err_k = 0, max_rel_err_v = 0;
  std::vector<double> layer_rel_err;  // max over K and V per layer
};
SnapshotComparison compare_snapshot_with_dump(KvSnapshot& snapshot, const std::string& dump_path);

// verify of a llama.cpp state file: every size adds up, no trailing bytes, finite values, unique
// positions; with a source dump (which needs the model), compare_snapshot_with_dump within
// `tolerance` (default_state_tolerance of the cache types when not given).
struct LlamaStateVerification {
  LlamaStateInspection state;
  std::string source;
  double tolerance = 0, max_rel_err_k = 0, max_rel_err_v = 0;
  std::vector<double> layer_rel_err;  // max over K and V per layer, with a source
  std::optional<ModelCheckReport> model_check;
  json to_json() const;
};
LlamaStateVerification verify_llama_state(const std::string& path, const GgufModel* model, const LlamaStateOptions& o,
                                          const std::string& source_dump, std::optional<double> tolerance);

// `kvtool inspect` / `kvtool verify` of any file, one entry point each (the CLI and Python call
// these): the kind is detected by content (UNKNOWN_FILE_TYPE when it is none of them) and the one
// report of that kind is filled. Options that do not apply to the file's kind are USAGE.
struct InspectOptions {
  int top_channels = 3;     // dumps: outlier channels per (layer, head)
  bool admit = true;        // artifacts: refuse what verify refuses
  std::string gguf;         // llama.cpp state files: the model's GGUF ("" = none: per layer only)
  LlamaStateOptions llama;  // llama.cpp state files: the sequence and rotation
};
// The report of whichever kind the file is: one of the three is set, and to_json() is its JSON.
template <typename Dump, typename Artifact, typename State>
struct FileReport {
  FileKind kind = FileKind::unknown;
  std::optional<Dump> dump;
  std::optional<Artifact> artifact;
  std::optional<State> state;
  json to_json() const {
    if (dump) return dump->to_json();
    if (artifact) return artifact->to_json();
    return state ? state->to_json() : json::object();
  }
};
using FileInspection = FileReport<DumpInspection, ArtifactInspection, LlamaStateInspection>;
FileInspection inspect_file(const std::string& path, const InspectOptions& o);
using FileVerification = FileReport<DumpVerification, ArtifactVerification, LlamaStateVerification>;
FileVerification verify_file(const std::string& path, const VerifyOptions& o);

// Writes every section as an HDF5 dataset (plus the manifest as a root attribute), atomically.
json export_artifact(const std::string& artifact_path, const std::string& out_path);

}  // namespace kvtool
