// kvtool.inspect / verify / build / eval / query (python/kvtool/reports.py wraps these): each runs
// the library call the matching command runs (tools/kvtool/commands/*.cpp) and returns the same
// JSON text as its --json, so the dicts equal what `kvtool CMD --json` prints.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>

#include "bindings.h"
#include "kvtool/admission.h"
#include "kvtool/dump.h"
#include "kvtool/eval.h"
#include "kvtool/eval_decode.h"
#include "kvtool/llama2c.h"
#include "kvtool/kind_builders.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "kvtool/signing.h"
#include "kvtool/source_binding.h"
#include "receipts.h"

namespace kvtool::python {

namespace {

// Build parameters that name a file of data (squeeze's calibration_queries, as the command line's
// --calibration-queries): the binding reads the file, as the tools do; the library takes its bytes.
void read_file_params(const std::string& kind, json& par) {
  if (kind != "squeeze" || !par.is_object()) return;
  auto it = par.find("calibration_queries");
  if (it == par.end() || !it->is_string()) return;
  const std::string path = it->get<std::string>();
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open calibration queries '" << path << "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  *it = json::binary(std::move(bytes));
}

void require_file(const std::string& p, const char* what) {
  struct stat st {};
  KVT_CHECK(stat(p.c_str(), &st) == 0, IO_ERROR, what << " '" << p << "' does not exist");
}

std::string inspect(const std::string& path, int top_channels, bool unchecked) {
  KVT_CHECK(top_channels >= 0 && top_channels <= (1 << 20), USAGE, "top_channels must be in 0..1048576");
  py::gil_scoped_release nogil;
  require_file(path, "input");
  InspectOptions o;
  o.top_channels = top_channels;
  o.admit = !unchecked;
  return json_text(inspect_file(path, o).to_json());
}

std::string verify(const std::string& path, const std::string& source, bool strict_snapshot,
                   const std::vector<std::string>& trusted, bool require_signature) {
  py::gil_scoped_release nogil;
  VerifyOptions o;
  o.source = source;
  o.strict_snapshot = strict_snapshot;
  o.require_signature = require_signature;
  o.trusted_keys = trusted_key_files(trusted);
  require_file(path, "input");
  // Any key can sign anything: "signed" alone says nothing about who wrote the manifest.
  KVT_CHECK(!o.require_signature || !o.trusted_keys.empty(), USAGE,
            "require_signature needs trusted_keys: a signature only means something when it is checked against a "
            "key you trust");
  return json_text(verify_file(path, o).to_json());
}

// `options`: the common builder options as JSON (output, prefix, sink, local, layer_first,
// layer_last, seed, threads, shard_index, shard_count, sign_key, zstd_level); reports.py fills it.
BuildOptions build_options(const json& j) {
  BuildOptions o;
  o.output = j.at("output").get<std::string>();
  o.prefix = j.at("prefix").get<int64_t>();
  o.sink = j.at("sink").get<int64_t>();
  o.local = j.at("local").get<int64_t>();
  o.layer_first = j.at("layer_first").get<int64_t>();
  o.layer_last = j.at("layer_last").get<int64_t>();
  o.seed = j.at("seed").get<uint64_t>();
  o.threads = j.at("threads").get<int>();
  o.shard_index = j.at("shard_index").get<int64_t>();
  o.shard_count = j.at("shard_count").get<int64_t>();
  o.sign_key = j.at("sign_key").get<std::string>();
  o.zstd_level = j.at("zstd_level").get<int>();
  o.quiet = true;
  KVT_CHECK(o.prefix >= -1 && o.sink >= -1 && o.local >= -1, USAGE, "prefix, sink and local must be >= 0");
  KVT_CHECK(o.threads >= 0, USAGE, "threads must be >= 0 (0: every CPU)");
  KVT_CHECK(o.zstd_level >= 0 && o.zstd_level <= 19, USAGE, "zstd_level must be in 0..19");
  KVT_CHECK(o.shard_count >= 1 && o.shard_index >= 0 && o.shard_index < o.shard_count, USAGE,
            "shard must be I/N with 0 <= I < N");
  return o;
}

std::string build(const std::string& kind, const std::string& dump, const std::string& options,
                  const std::string& params) {
  py::gil_scoped_release nogil;
  json opt, par;
  try {
    opt = json::parse(options);
    par = json::parse(params);
  } catch (const json::exception& e) {
    KVT_THROW(USAGE, "build options are not valid JSON: " << e.what());
  }
  read_file_params(kind, par);
  std::unique_ptr<KindBuilder> builder = make_builder(kind, par);
  BuildOptions o;
  try {
    o = build_options(opt);
  } catch (const json::exception& e) {
    KVT_THROW(USAGE, "bad build option: " << e.what());
  }
  return json_text(build_artifact(dump, o, *builder).to_json());
}

py::dict record_dict(const EvalRecord& r) {
  py::dict d;
  d["selector"] = r.selector;
  d["layer"] = r.layer;
  d["q_head"] = r.q_head;
  d["kv_head"] = r.kv_head;
  d["position"] = r.position;
  d["selected_rows"] = r.selected_rows;
  d["selected_fraction"] = r.selected_fraction;
  d["retained_mass"] = r.retained_mass;
  d["oracle_retained_mass"] = r.oracle_retained_mass;
  d["recall_support"] = r.recall_support;
  d["output_error"] = r.output_error;
  d["relative_output_error"] = r.relative_output_error;
  d["estimator_output_error"] = r.estimator_output_error;
  return d;
}

py::tuple eval(const std::string& artifact, const std::string& dump,
               const std::map<std::string, std::vector<std::string>>& sweep, bool want_records,
               const std::string& positions, uint64_t positions_seed, bool share_kv_head) {
  std::vector<EvalRecord> records;
  std::string text;
  {
    py::gil_scoped_release nogil;
    ArtifactReader r(artifact);
    admit_artifact(r, {});  // what verify checks: a file verify rejects is never evaluated
    DumpReader d(dump);
    if (auto it = sweep.find("budget"); it != sweep.end())
      for (const auto& b : it->second) Budget::parse(b);  // USAGE for a bad budget, as the CLI
    EvalOptions eo;
    eo.sweep = sweep;
    eo.positions = PositionSample::parse(positions, positions_seed);
    eo.share_kv_head = share_kv_head;
    eo.quiet = true;
    text = json_text(evaluate(r, d, eo, want_records ? &records : nullptr).to_json());
  }
  py::object recs = py::none();
  if (want_records) {
    py::list l;
    for (const auto& r : records) l.append(record_dict(r));
    recs = l;
  }
  return py::make_tuple(text, recs);
}

std::string eval_decode(const std::vector<std::string>& artifacts, const std::string& source, const std::string& model,
                        int64_t steps, const std::map<std::string, std::vector<std::string>>& sweep,
                        const std::vector<std::string>& baselines, int64_t window_sinks, bool share_kv_head,
                        const std::string& tokenizer, int64_t answer_begin, int64_t answer_end, bool estimated_zone) {
  py::gil_scoped_release nogil;
  if (auto it = sweep.find("budget"); it != sweep.end())
    for (const auto& b : it->second) Budget::parse(b);  // USAGE for a bad budget, as the CLI
  require_file(model, "model");           // a llama2.c checkpoint or a GGUF file (kvtool/decoding_model.h)
  std::unique_ptr<Llama2cTokenizer> tok;  // read before the decoding, as the CLI does
  if (!tokenizer.empty()) {
    require_file(tokenizer, "tokenizer");
    tok = std::make_unique<Llama2cTokenizer>(tokenizer, Llama2cModel(model).config().vocab_size);
  }
  EvalDecodeOptions o;
  o.model_path = model;
  o.steps = steps;
  o.sweep = sweep;
  o.baselines = baselines;
  o.window_sinks = window_sinks;
  o.share_kv_head = share_kv_head;
  o.answer_begin = answer_begin;
  o.answer_end = answer_end;
  o.estimated_zone = estimated_zone;
  DumpReader d(source);
  return json_text(kvtool::eval_decode(artifacts, d, o).to_json(tok.get()));
}

// The dumped query at `position` of (layer, q_head), as `kvtool query --position` reads it.
std::vector<float> dumped_query(DumpReader& d, int64_t layer, int64_t q_head, int64_t position, int64_t dim) {
  KVT_CHECK(d.info().has_q, NO_QUERIES, "the dump has no /kv/q; pass vector= or dump with queries");
  auto qpos = d.q_positions();
  auto it = std::find(qpos.begin(), qpos.end(), position);
  KVT_CHECK(it != qpos.end(), NO_QUERIES, "the dump has no query at position " << position);
  KVT_CHECK(q_head >= 0 && q_head < d.info().geo.q_heads && layer >= 0 && layer < d.info().geo.layers, USAGE,
            "layer/q_head out of range");
  std::vector<float> all(static_cast<size_t>(d.info().geo.q_tokens * dim));
  d.read_q(layer, q_head, all.data());
  return {all.begin() + (it - qpos.begin()) * dim, all.begin() + (it - qpos.begin() + 1) * dim};
}

// `vector`: None (the dumped query at `position`, required) or a float32 [d] array (position
// defaults to coverage end - 1). `settings`: option name -> value text, strict for the kind.
py::tuple query(const std::string& artifact, const std::string& source, int64_t layer, int64_t q_head,
                std::optional<int64_t> position, std::optional<FloatArray> vector, const QuerySettings& settings) {
  std::optional<std::vector<float>> given;
  if (vector) given = vector_values(*vector, "vector");  // copied with the GIL held
  CandidateReceipt rc;
  {
    py::gil_scoped_release nogil;
    ArtifactReader r(artifact);
    admit_artifact(r, {});  // what verify checks: a file verify rejects is never queried
    DumpReader d(source);
    check_source(r.source(), d, false);
    const int64_t dim = r.source().geo.head_dim;
    std::vector<float> q;
    int64_t pos = position.value_or(r.source().coverage_end - 1);
    if (given) {
      q = *given;
      check_dim(q, dim, "vector");
    } else {
      KVT_CHECK(position.has_value(), USAGE, "give position= (a dumped query) or vector=");
      q = dumped_query(d, layer, q_head, pos, dim);
    }
    SelectorSet sel(r);
    KVT_CHECK(q_head >= 0 && q_head < r.source().geo.q_heads, USAGE,
              "q_head " << q_head << " is outside 0-" << r.source().geo.q_heads - 1);
    KVT_CHECK(layer >= 0 && layer < r.source().geo.layers, USAGE,
              "layer " << layer << " is outside 0-" << r.source().geo.layers - 1);
    const auto params = sel.params(settings);
    // lsh's inclusion probabilities and a budget kind's rerank take the full keys, as `kvtool query`.
    const bool with_keys = sel.kind().needs_keys || reranking(*params);
    std::vector<float> krows;
    KeyRows keys;
    if (with_keys) {
      const int64_t E = r.source().coverage_end;
      krows.resize(static_cast<size_t>(E * dim));
      d.read_k(layer, r.source().id.q_to_kv_head[static_cast<size_t>(q_head)], 0, E, krows.data());
      keys = KeyRows{krows.data(), E, dim};
    }
    rc = sel.query(layer, q_head, q.data(), pos, *params, with_keys ? &keys : nullptr);
  }
  return receipt_tuple(rc);
}

}  // namespace

void bind_reports(py::module_& m) {
  m.def("inspect", &inspect, py::arg("path"), py::arg("top_channels") = 3, py::arg("unchecked") = false,
        "JSON text of `kvtool inspect --json PATH`.");
  m.def("verify", &verify, py::arg("path"), py::arg("source"), py::arg("strict_snapshot"), py::arg("trusted_keys"),
        py::arg("require_signature"), "JSON text of `kvtool verify --json`.");
  m.def("build", &build, py::arg("kind"), py::arg("dump"), py::arg("options"), py::arg("params"),
        "JSON text of `kvtool build KIND --json` (options, params: JSON objects).");
  m.def("eval", &eval, py::arg("artifact"), py::arg("dump"), py::arg("sweep"), py::arg("records"),
        py::arg("positions") = "all", py::arg("positions_seed") = 0, py::arg("share_kv_head") = false,
        "(JSON text of `kvtool eval --json`, list of record dicts or None).");
  m.def("eval_decode", &eval_decode, py::arg("artifacts"), py::arg("source"), py::arg("model"), py::arg("steps"),
        py::arg("sweep"), py::arg("baselines"), py::arg("window_sinks"), py::arg("share_kv_head") = false,
        py::arg("tokenizer") = "", py::arg("answer_begin") = -1, py::arg("answer_end") = -1,
        py::arg("estimated_zone") = false,
        "JSON text of `kvtool eval-decode --json` (--tokenizer when not empty, --answer when begin >= 0).");
  m.def("query", &query, py::arg("artifact"), py::arg("source"), py::arg("layer"), py::arg("q_head"),
        py::arg("position"), py::arg("vector"), py::arg("settings"),
        "(JSON text of `kvtool query --json`, candidates int64 array, scores float32 array).");
  m.def("builder_kinds", &builder_kinds, "Index kinds kvtool.build accepts.");
}

}  // namespace kvtool::python
