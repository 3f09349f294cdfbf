// `kvtool compare`: several artifacts of one dump evaluated side by side, each over its kind's
// curve (KindSpec::curve_sweep) or the values the user names, with the dense top-k oracle at
// every point. Each artifact's numbers are evaluate()'s (kvtool/eval.h), setting for setting.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "kvtool/eval.h"

namespace kvtool {

// Eval's options, but for `sweep`: its values per query option (e.g. "budget" -> 0.05, 0.2) apply
// to every artifact whose kind takes the option, and an option no artifact's kind takes is USAGE.
// An option not named takes the kind's curve_sweep (else default_sweep, else its default value).
struct CompareOptions : EvalOptions {};

// One compared artifact: who it is and its evaluation.
struct CompareArtifact {
  json identity;  // path, kind, file_bytes, manifest_sha256, params, coverage_end, content_digest
  EvalReport report;
};

// A point of the dense oracle curve: the oracle's retained mass at one setting's row counts.
struct OraclePoint {
  double selected_fraction = 0, retained_mass = 0;
  size_t artifact = 0;  // index into CompareReport::artifacts
  std::string setting;  // that setting's label
};

struct CompareReport {
  std::string source;
  std::vector<CompareArtifact> artifacts;  // in the order given
  std::vector<OraclePoint> oracle;         // every setting's, by selected fraction (ties in input order)
  // {"schema_version", "source", "artifacts": [{"identity", "eval": <eval --json>}], "oracle": [...]}
  json to_json() const;
};

// The sweep `art` gets under `opt`: the named values of the options its kind takes, the kind's
// curve for the others.
std::map<std::string, std::vector<std::string>> compare_sweep(const ArtifactReader& art, const CompareOptions& opt);

// Checks every artifact's binding to `dump` (the recorded fields; the error names the artifact)
// and the options before evaluating any, then evaluates each in turn (evaluate() also checks the
// covered rows). USAGE without artifacts.
CompareReport compare(const std::vector<const ArtifactReader*>& arts, const DumpReader& dump,
                      const CompareOptions& opt);

}  // namespace kvtool
