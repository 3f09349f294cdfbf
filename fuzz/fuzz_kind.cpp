// fuzz_kind: a re-packer harness for the structure validation and the selectors of every builder
// kind. The input is not a kvi file but what one is made of, so that a mutation lands in a
// section's payload or in the params/kind_data JSON instead of breaking a digest:
//
//   u8   kind: an index into kvtool/kinds.def's kinds, modulo their count (the committed seeds
//        follow its order: pq 0, clusterkv 1, lsh 2, squeeze 3)
//   u32  n, then n bytes: {"params":…, "source":…, "kind_data":…} (the manifest's members)
//   then, until the input ends, one section each:
//   u32  n, then n bytes: {"name":…, "dtype":…, "shape":[…], "layer":…, "kv_head":…}
//        then product(shape) · sizeof(dtype) payload bytes (zero-filled when the input is short)
//
// The harness writes a digest-correct artifact (ArtifactWriter, uncompressed) to /dev/shm, reads
// it back and runs admission and one query per part. fuzz/make_seeds.py writes the seeds from
// real artifacts (fuzz/corpus/kind/).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/artifact.h"
#include "kvtool/json.h"

namespace {

// Every builder kind, from the registration list itself, so that a kind added there is fuzzed too.
constexpr const char* kKinds[] = {
#define KVTOOL_KIND(name, description) #name,
#include "kvtool/kinds.def"
#undef KVTOOL_KIND
};
constexpr size_t kKindCount = sizeof(kKinds) / sizeof(kKinds[0]);
constexpr uint64_t kMaxSection = uint64_t(1) << 20;  // bytes; larger claims are skipped, not findings

struct Cursor {
  const uint8_t* p;
  size_t left;
  bool u32(uint32_t& v) {
    if (left < 4) return false;
    std::memcpy(&v, p, 4);  // little-endian hosts only (x86-64, aarch64)
    p += 4;
    left -= 4;
    return true;
  }
  bool text(std::string& s) {
    uint32_t n = 0;
    if (!u32(n) || n > left) return false;
    s.assign(reinterpret_cast<const char*>(p), n);
    p += n;
    left -= n;
    return true;
  }
  std::vector<uint8_t> bytes(uint64_t n) {
    std::vector<uint8_t> out(n, 0);
    const uint64_t take = n < left ? n : left;
    if (take) std::memcpy(out.data(), p, take);
    p += take;
    left -= take;
    return out;
  }
};

// Adds one section from the cursor; false when the header is not usable (the rest is ignored).
bool add_section(Cursor& c, kvtool::ArtifactWriter& w) {
  std::string head;
  if (!c.text(head)) return false;
  const kvtool::json h = kvtool::json::parse(head, nullptr, false);
  if (!h.is_object() || !h.value("name", kvtool::json()).is_string() || !h.value("dtype", kvtool::json()).is_string() ||
      !h.value("shape", kvtool::json()).is_array())
    return false;
  const size_t elem = kvtool::section_dtype_size(h["dtype"].get<std::string>());
  if (elem == 0) return false;
  std::vector<int64_t> shape;
  uint64_t bytes = elem;
  for (const auto& x : h["shape"]) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0) return false;
    shape.push_back(x.get<int64_t>());
    const auto dim = static_cast<uint64_t>(shape.back());
    if (dim != 0 && bytes > kMaxSection / dim) return false;
    bytes *= dim;
  }
  const auto num = [&](const char* k) {
    const auto v = h.value(k, kvtool::json());
    return v.is_number_integer() ? v.get<int64_t>() : int64_t(-1);
  };
  const std::vector<uint8_t> payload = c.bytes(bytes);
  w.add_section(h["name"].get<std::string>(), h["dtype"].get<std::string>(), shape, payload.data(), payload.size(),
                num("layer"), num("kv_head"));
  return true;
}

// Writes the artifact the input describes to `path`; false when the input describes none.
bool repack(const uint8_t* data, size_t size, const std::string& path) {
  if (size < 1) return false;
  Cursor c{data + 1, size - 1};
  std::string core_text;
  if (!c.text(core_text)) return false;
  const kvtool::json core_json = kvtool::json::parse(core_text, nullptr, false);
  if (!core_json.is_object() || !core_json.contains("source")) return false;
  kvtool::ManifestCore core;
  core.kind = kKinds[data[0] % kKindCount];
  core.params = core_json.value("params", kvtool::json::object());
  core.kind_data = core_json.value("kind_data", kvtool::json::object());
  core.source = kvtool::SourceBinding::from_json(core_json["source"]);  // an Error here: input rejected
  kvtool::ArtifactWriter w(path, 0, true);
  while (c.left > 0 && add_section(c, w)) {}
  w.finish(core);
  return true;
}

// The per-process scratch file, removed when libFuzzer exits normally.
struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempPath tmp("/dev/shm/kvtool-fuzz-kind-" + std::to_string(getpid()) + ".kvi");
  const std::string& path = tmp.path;
  try {
    if (!repack(data, size, path)) return 0;
  } catch (const kvtool::Error&) {
    return 0;  // the writer refused what the input describes (a bad shape, say): not the reader's case
  } catch (const kvtool::json::exception&) {
    return 0;  // the same, from the writer's own JSON handling
  }
  try {
    kvtool::ArtifactReader r(path);
    kvtool::fuzz::admit_and_query(r);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
