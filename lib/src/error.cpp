#include "kvtool/error.h"

namespace kvtool {

const std::vector<ReasonInfo>& all_reasons() {
  static const std::vector<ReasonInfo> reasons = {
      // usage (2)
      {"USAGE", ExitCode::usage, "bad command-line arguments or option values"},
      // input/output (3)
      {"IO_ERROR", ExitCode::io, "a file could not be read or written (missing, permissions, full disk)"},
      {"OUTPUT_EXISTS", ExitCode::io, "the output path exists and the command refuses to overwrite it"},
      {"HDF5_ERROR", ExitCode::io, "the HDF5 library could not read the file"},
      // internal (4)
      {"INTERNAL", ExitCode::internal, "a bug in kvtool; please report it"},
      // validation (1): dumps
      {"NOT_A_DUMP", ExitCode::invalid, "the file is HDF5 but has no kvdump layout"},
      {"UNKNOWN_FILE_TYPE", ExitCode::invalid, "the file is neither a kvdump (HDF5) nor a kvi artifact"},
      {"MISSING_ATTRIBUTE", ExitCode::invalid, "a required dump attribute is absent or has the wrong type"},
      {"BAD_ATTRIBUTE", ExitCode::invalid, "a dump attribute has an invalid value"},
      {"UNSUPPORTED_DTYPE", ExitCode::invalid, "a dataset has a dtype kvtool does not read"},
      {"SHAPE_MISMATCH", ExitCode::invalid, "dataset shapes or geometry disagree"},
      {"FRONTIER_BEYOND_T", ExitCode::invalid, "committed_frontier is larger than the number of rows T"},
      {"BAD_HEAD_MAP", ExitCode::invalid, "q_to_kv_head has the wrong length or an out-of-range head"},
      {"NON_FINITE", ExitCode::invalid, "NaN or Inf values in committed rows or in artifact data"},
      {"BAD_MODEL", ExitCode::invalid, "a model checkpoint or tokenizer file is malformed"},
      // validation (1): container
      {"BAD_MAGIC", ExitCode::invalid, "the file does not start or end with the kvi magic"},
      {"UNSUPPORTED_VERSION", ExitCode::invalid, "the format major version is not supported by this kvtool"},
      {"TRUNCATED", ExitCode::invalid, "the file is shorter than its own offsets and sizes say"},
      {"BAD_LAYOUT", ExitCode::invalid, "offsets, sizes or alignment in the container are inconsistent"},
      {"MANIFEST_DIGEST", ExitCode::invalid, "the manifest bytes do not match the digest in the footer"},
      {"BAD_MANIFEST", ExitCode::invalid, "the manifest is not valid canonical JSON of the expected schema"},
      {"PARAMS_DIGEST", ExitCode::invalid, "the params digest in the manifest does not match the params"},
      {"SECTION_DIGEST", ExitCode::invalid, "a section's bytes do not match its recorded SHA-256"},
      {"DECOMPRESS_FAILED", ExitCode::invalid, "a compressed section could not be decompressed to its raw size"},
      {"UNKNOWN_KIND", ExitCode::invalid, "the artifact kind is not known to this kvtool"},
      {"BAD_SIGNATURE", ExitCode::invalid, "the signature does not verify against the manifest digest"},
      {"UNTRUSTED_KEY", ExitCode::invalid, "the artifact is signed by a key that is not trusted"},
      {"SIGNATURE_REQUIRED", ExitCode::invalid, "a signature is required but the artifact is unsigned"},
      {"BAD_KEY", ExitCode::invalid, "a key file is not an Ed25519 PEM key"},
      // validation (1): source binding
      {"STALE_SOURCE", ExitCode::invalid, "the dump's content digest over the covered range differs"},
      {"SNAPSHOT_MISMATCH", ExitCode::invalid, "--strict-snapshot: the dump's snapshot digest differs"},
      {"TENANT_MISMATCH", ExitCode::invalid, "the dump belongs to another tenant namespace"},
      {"MODEL_MISMATCH", ExitCode::invalid, "the dump was produced by another model artifact"},
      {"CHECKPOINT_MISMATCH", ExitCode::invalid, "the dump has another checkpoint generation"},
      {"ADAPTER_MISMATCH", ExitCode::invalid, "the dump has another adapter set"},
      {"ROPE_MISMATCH", ExitCode::invalid, "the dump has another RoPE configuration"},
      {"POSITION_CONTRACT_MISMATCH", ExitCode::invalid, "the dump has another position contract"},
      {"REPRESENTATION_MISMATCH", ExitCode::invalid, "the dump has another K/V representation"},
      {"HEAD_MAP_MISMATCH", ExitCode::invalid, "the dump has another q->kv head mapping"},
      {"GEOMETRY_MISMATCH", ExitCode::invalid, "the dump has another geometry (layers, kv heads, head dim) or dtype"},
      {"COVERAGE_BEYOND_FRONTIER", ExitCode::invalid, "the artifact covers rows beyond the dump's committed frontier"},
      {"PREFIX_MISMATCH", ExitCode::invalid, "the token ids of the covered prefix differ"},
      {"PAYLOAD_MISMATCH", ExitCode::invalid, "the K/V rows of the covered range differ"},
      // validation (1): merge
      {"MERGE_MISMATCH", ExitCode::invalid, "shards differ in kind, parameters, generations or source"},
      {"MERGE_OVERLAP", ExitCode::invalid, "two shards contain the same part"},
      {"MERGE_INCOMPLETE", ExitCode::invalid, "some parts are in none of the shards"},
      // validation (1): prefix store
      {"BAD_STORE_KEY", ExitCode::usage, "a store key part is missing or could name a path ('/', '..', NUL)"},
      {"STORE_MISS", ExitCode::invalid, "no stored artifact matches the key"},
      {"STORE_AMBIGUOUS", ExitCode::invalid, "several stored artifacts match; give --params-digest"},
      {"STORE_CORRUPT", ExitCode::invalid, "a stored object is missing, renamed or does not match its ref"},
      // validation (1): index kinds
      {"CODE_OUT_OF_RANGE", ExitCode::invalid, "a PQ code is not below 2^bits"},
      {"NO_QUERIES", ExitCode::invalid, "the dump has no /kv/q queries usable for this evaluation"},
      {"MEMBERS_NOT_PARTITION", ExitCode::invalid, "cluster members are not a partition of the indexed rows"},
      {"PREFIX_SUM_MISMATCH", ExitCode::invalid, "cluster prefix sums do not match the cluster sizes"},
      {"GENERATIONS_NOT_CONTIGUOUS", ExitCode::invalid, "index generations do not tile the rows and clusters in order"},
      {"BUCKET_TABLE_INVALID", ExitCode::invalid, "an lsh bucket table is not a valid CSR of the indexed rows"},
      {"PROJECTION_MISMATCH", ExitCode::invalid, "lsh projections differ from those the recorded seed generates"},
      {"HIERARCHY_NOT_COVERING", ExitCode::invalid, "a squeeze coarse level does not give every fine centroid a parent"},
      {"THRESHOLDS_MISMATCH", ExitCode::invalid, "squeeze thresholds are not the quantiles of the recorded calibration scores"},
      {"PART_INVALID", ExitCode::invalid, "a part's sections or metadata are missing or inconsistent"},
      // validation (1): runtime pool
      {"HOST_BUDGET_EXCEEDED", ExitCode::invalid, "the pool's host tier cannot admit the artifact within its byte budget"},
      {"DEVICE_BUDGET_EXCEEDED", ExitCode::invalid, "the pool's device tier cannot admit the artifact within its byte budget"},
      {"DEVICE_UNAVAILABLE", ExitCode::invalid, "the device tier was requested but there is no usable GPU"},
      {"CONTENT_MISMATCH", ExitCode::invalid, "the artifact is bound to another content digest than the publisher expects"},
      {"STALE_GENERATION", ExitCode::invalid, "the artifact's index generation is older than the one already published"},
      {"PUBLISH_CANCELLED", ExitCode::invalid, "the publication was cancelled or its slot was reused before it completed"},
      {"DEVICE_COPY_MISMATCH", ExitCode::invalid, "the bytes that landed in device memory differ from the validated host bytes"},
      {"NOT_PUBLISHED", ExitCode::invalid, "no generation is published under the pool key"},
  };
  return reasons;
}

ExitCode exit_code_for(const std::string& reason) {
  for (const auto& r : all_reasons())
    if (reason == r.code) return r.exit;
  // Kind-specific validation reasons (CODE_OUT_OF_RANGE, ...) are validation failures.
  return ExitCode::invalid;
}

}  // namespace kvtool
