// Registry of artifact kinds: each kind registers the structural validation `verify` runs on its
// sections (one kind = one place: build, serialize, validate, query live in that kind's file).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace kvtool {

class ArtifactReader;

struct KindInfo {
  std::string name;
  std::string summary;
  // Throws Error with a kind-specific reason (CODE_OUT_OF_RANGE, ...) when the artifact is invalid.
  std::function<void(const ArtifactReader&)> validate;
};

const KindInfo* find_kind(const std::string& name);
std::vector<std::string> kind_names();

}  // namespace kvtool
