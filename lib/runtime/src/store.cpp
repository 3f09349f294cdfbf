#include "kvtool/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>

#include "kvtool/artifact.h"
#include "kvtool/atomic_file.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/sha256.h"

namespace kvtool {

namespace {
// What `kvtool verify` checks without a source or trust policy: sections, kind structure, and a
// signature (when present) that verifies.
void check_servable(const ArtifactReader& r) {
  r.verify_sections();
  validate_kind(r);
  r.verify_signature({}, false);
}
}  // namespace

namespace {

void mkdir_p(const std::string& p) {
  std::string cur;
  for (size_t i = 0; i < p.size(); ++i) {
    cur.push_back(p[i]);
    if ((p[i] == '/' || i + 1 == p.size()) && cur != "/") {
      if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        KVT_THROW(IO_ERROR, "cannot create '" << cur << "': " << std::strerror(errno));
    }
  }
}

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& d) {
  std::vector<std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(d.c_str()), &closedir);
  if (!dir) return out;
  while (dirent* e = readdir(dir.get())) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot read '" << p << "'");
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_atomic(const std::string& path, const std::string& text) {
  AtomicOutput out(path, true);
  write_all(out.fd(), text.data(), text.size(), path);
  out.commit();
}

std::string ref_id(const StoreKey& k) { return to_hex(sha256(canonical_json(k.to_json()))); }

StoreKey key_of(const ArtifactReader& r) {
  const auto& s = r.source();
  StoreKey k;
  k.tenant = s.id.tenant_namespace;
  k.model = s.id.model_artifact_sha256;
  k.adapter = s.id.adapter_set_sha256;
  k.prefix_hash = s.prefix_tokens_sha256;
  k.kind = r.kind();
  k.params_digest = r.manifest()["params_digest"];
  k.position_contract = s.id.position_contract;
  return k;
}

bool matches(const json& ref_key, const StoreKey& k) {
  auto eq = [&](const char* f, const std::string& v) { return v.empty() || ref_key.value(f, std::string()) == v; };
  return ref_key.value("tenant", std::string()) == k.tenant && eq("model", k.model) && eq("adapter", k.adapter) &&
         eq("prefix_hash", k.prefix_hash) && eq("kind", k.kind) && eq("params_digest", k.params_digest) &&
         eq("position_contract", k.position_contract);
}

}  // namespace

json StoreKey::to_json() const {
  return {{"tenant", tenant},
          {"model", model},
          {"adapter", adapter},
          {"prefix_hash", prefix_hash},
          {"kind", kind},
          {"params_digest", params_digest},
          {"position_contract", position_contract}};
}

void check_store_key(const StoreKey& k, bool need_params) {
  auto part = [](const std::string& v, const char* name, bool required) {
    KVT_CHECK(!required || !v.empty(), BAD_STORE_KEY, "the store key needs --" << name);
    KVT_CHECK(v.size() <= 256, BAD_STORE_KEY, "--" << name << " is longer than 256 bytes");
    KVT_CHECK(v != "." && v != "..", BAD_STORE_KEY, "--" << name << " may not be '" << v << "'");
    for (unsigned char c : v)
      KVT_CHECK(c >= 0x20 && c != '/' && c != '\\' && c != 0x7f, BAD_STORE_KEY,
                "--" << name << " holds a '/', '\\', NUL or control character; key parts never name paths");
  };
  part(k.tenant, "tenant", true);
  part(k.model, "model", true);
  part(k.adapter, "adapter", true);
  part(k.prefix_hash, "prefix-hash", true);
  part(k.kind, "kind", true);
  part(k.params_digest, "params-digest", need_params);
  part(k.position_contract, "position-contract", false);
}

Store::Store(std::string dir, bool create) : dir_(std::move(dir)) {
  KVT_CHECK(!dir_.empty(), USAGE, "--store is empty");
  if (create) {
    mkdir_p(dir_ + "/objects");
    mkdir_p(dir_ + "/refs");
  }
  KVT_CHECK(exists(dir_ + "/objects") && exists(dir_ + "/refs"), IO_ERROR,
            "'" << dir_ << "' is not a kvtool store (no objects/ and refs/)");
}

json Store::put(const std::string& artifact) {
  ArtifactReader r(artifact);
  check_servable(r);  // never store what would not be served
  StoreKey k = key_of(r);
  KVT_CHECK(!k.prefix_hash.empty(), BAD_STORE_KEY,
            "the artifact records no prefix-token hash (its dump had no /kv/tokens)");
  check_store_key(k, true);
  std::string hex = to_hex(sha256_file(artifact));
  std::string odir = dir_ + "/objects/" + hex.substr(0, 2);
  mkdir_p(odir);
  std::string obj = odir + "/" + hex + ".kvi";
  if (!exists(obj)) {
    // Concurrent puts of the same object write identical bytes; rename makes either one win whole.
    AtomicOutput out(obj, true);
    std::ifstream in(artifact, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
      write_all(out.fd(), buf.data(), static_cast<size_t>(in.gcount()), obj);
    out.commit();
    KVT_CHECK(to_hex(sha256_file(obj)) == hex, IO_ERROR, "the stored object does not match its digest");
  }
  json ref = {{"key", k.to_json()},
              {"object", hex},
              {"coverage_end", r.source().coverage_end},
              {"content_digest", r.source().content_digest},
              {"created", static_cast<int64_t>(std::time(nullptr))},
              {"schema_version", 1}};
  write_atomic(dir_ + "/refs/" + ref_id(k) + ".json", ref.dump(1) + "\n");
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"object", hex}, {"path", obj}, {"key", k.to_json()}};
}

std::vector<std::pair<std::string, json>> Store::refs() const {
  std::vector<std::pair<std::string, json>> out;
  for (const auto& n : list_dir(dir_ + "/refs")) {
    if (n.size() < 5 || n.substr(n.size() - 5) != ".json" || n[0] == '.') continue;
    std::string p = dir_ + "/refs/" + n;
    try {
      out.emplace_back(p, json::parse(read_text(p)));
    } catch (...) {
      out.emplace_back(p, json{{"invalid", true}});
    }
  }
  return out;
}

json Store::get(const StoreKey& key) {
  check_store_key(key, false);
  std::vector<json> hits;
  for (auto& [p, ref] : refs())
    if (ref.contains("key") && matches(ref["key"], key)) hits.push_back(ref);
  KVT_CHECK(!hits.empty(), STORE_MISS, "no artifact in the store for tenant '" << key.tenant << "' and this key");
  KVT_CHECK(hits.size() == 1, STORE_AMBIGUOUS,
            hits.size() << " artifacts match (different params); give --params-digest to choose one");
  const json& ref = hits[0];
  std::string hex = ref["object"];
  Digest tmp;
  KVT_CHECK(from_hex(hex, tmp), STORE_CORRUPT, "a ref names an invalid object");
  std::string obj = dir_ + "/objects/" + hex.substr(0, 2) + "/" + hex + ".kvi";
  KVT_CHECK(exists(obj), STORE_CORRUPT, "the object " << hex << " of this key is missing");
  KVT_CHECK(to_hex(sha256_file(obj)) == hex, STORE_CORRUPT,
            "the object " << hex << " does not match its name (modified on disk)");
  ArtifactReader r(obj);
  check_servable(r);  // an entry that fails verify is reported with its reason, not served
  StoreKey got = key_of(r);
  KVT_CHECK(got.tenant == key.tenant, TENANT_MISMATCH, "the stored artifact belongs to another tenant");
  KVT_CHECK(matches(got.to_json(), key), STORE_CORRUPT, "the stored artifact's binding does not match the key");
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"path", obj}, {"object", hex}, {"key", ref["key"]}};
}

json Store::ls() const {
  json items = json::array();
  for (auto& [p, ref] : refs()) items.push_back(ref);
  return {{"schema_version", kJsonSchemaVersion}, {"refs", items}};
}

json Store::rm(const StoreKey& key) {
  check_store_key(key, false);
  int64_t removed = 0;
  for (auto& [p, ref] : refs())
    if (ref.contains("key") && matches(ref["key"], key) && unlink(p.c_str()) == 0) ++removed;
  KVT_CHECK(removed > 0, STORE_MISS, "no ref matches this key");
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"refs_removed", removed}};
}

json Store::gc(int64_t keep_last, int64_t grace) {
  auto all = refs();
  int64_t refs_removed = 0, objects_removed = 0;
  if (keep_last > 0) {
    std::map<std::string, std::vector<std::pair<int64_t, std::string>>> groups;
    for (auto& [p, ref] : all) {
      if (!ref.contains("key")) continue;
      json g = ref["key"];
      g.erase("params_digest");
      groups[canonical_json(g)].emplace_back(ref.value("created", int64_t{0}), p);
    }
    for (auto& [g, v] : groups) {
      std::sort(v.rbegin(), v.rend());  // newest first
      for (size_t i = static_cast<size_t>(keep_last); i < v.size(); ++i)
        if (unlink(v[i].second.c_str()) == 0) ++refs_removed;
    }
    all = refs();
  }
  std::map<std::string, bool> live;
  for (auto& [p, ref] : all)
    if (ref.contains("object")) live[ref["object"].get<std::string>()] = true;
  const time_t now = std::time(nullptr);
  for (const auto& sub : list_dir(dir_ + "/objects")) {
    for (const auto& n : list_dir(dir_ + "/objects/" + sub)) {
      std::string p = dir_ + "/objects/" + sub + "/" + n;
      if (n[0] == '.') continue;  // a put in flight
      std::string hex = n.substr(0, n.find('.'));
      struct stat st {};
      if (live.count(hex) || stat(p.c_str(), &st) != 0) continue;
      if (now - st.st_mtime >= grace && unlink(p.c_str()) == 0) ++objects_removed;
    }
  }
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"refs_removed", refs_removed},
          {"objects_removed", objects_removed},
          {"grace_seconds", grace}};
}

}  // namespace kvtool
