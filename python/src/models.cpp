// kvtool.dump(gguf=...): `kvtool dump --gguf` from Python (kvtool/producers.h, docs/models.md).
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "kvtool/dump.h"
#include "kvtool/gguf_tokenizer.h"
#include "kvtool/json.h"
#include "kvtool/producers.h"

namespace kvtool::python {

namespace {

// The prompt as ids: `token_ids` when given, else `prompt` through the GGUF's tokenizer (BOS as the
// GGUF says), as the CLI's --token-ids and --prompt.
std::string dump_gguf_py(const std::string& gguf, const std::string& out, const std::string& prompt, bool has_prompt,
                         const std::vector<int64_t>& token_ids, int64_t tokens, bool queries, const std::string& dtype,
                         bool llama_cpp_activations, int threads, bool overwrite) {
  py::gil_scoped_release nogil;
  GgufDumpOptions o;
  o.model_path = gguf;
  if (has_prompt) {
    o.prompt = GgufTokenizer(gguf).encode(prompt, true);
  } else {
    for (int64_t t : token_ids) {
      KVT_CHECK(t >= 0 && t <= INT32_MAX, USAGE, "token_ids: " << t << " is not a token id");
      o.prompt.push_back(static_cast<int32_t>(t));
    }
  }
  o.tokens = tokens;
  o.queries = queries;
  o.threads = threads;
  o.llama_cpp_activations = llama_cpp_activations;
  const DType t = parse_dtype(dtype);
  const ModelDumpResult r = dump_gguf(o, t, IdentityOptions{}, out, overwrite);
  return json_text(json{{"schema_version", kJsonSchemaVersion},
                        {"ok", true},
                        {"output", out},
                        {"tokens", r.tokens},
                        {"text", r.text},
                        {"dtype", dtype_name(t)}});
}

}  // namespace

void bind_models(py::module_& m) {
  m.def("dump_gguf", &dump_gguf_py, py::arg("gguf"), py::arg("out"), py::arg("prompt"), py::arg("has_prompt"),
        py::arg("token_ids"), py::arg("tokens"), py::arg("queries"), py::arg("dtype"), py::arg("llama_cpp_activations"),
        py::arg("threads"), py::arg("overwrite"), "kvtool dump --gguf; returns its --json text.");
}

}  // namespace kvtool::python
