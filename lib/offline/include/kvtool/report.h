// inspect / verify / export of dumps and artifacts. Each returns a JSON report (printed by the CLI
// as text or with --json) and throws Error with a reason code on invalid input.
#pragma once
#include <string>
#include <vector>

#include "kvtool/json.h"
#include "kvtool/signing.h"

namespace kvtool {

enum class FileKind { dump, artifact, unknown };
FileKind detect_file_kind(const std::string& path);  // by content, not extension; IO_ERROR if unreadable

json inspect_dump(const std::string& path, int top_channels = 3);
json inspect_artifact(const std::string& path);

struct VerifyOptions {
  std::string source;  // dump to check the content binding against ("" = none)
  bool strict_snapshot = false;
  std::vector<PublicKeyRaw> trusted_keys;
  bool require_signature = false;
};

json verify_dump(const std::string& path);
json verify_artifact(const std::string& path, const VerifyOptions& opt);

// Writes every section as an HDF5 dataset (plus the manifest as a root attribute), atomically.
json export_artifact(const std::string& artifact_path, const std::string& out_path);

}  // namespace kvtool
