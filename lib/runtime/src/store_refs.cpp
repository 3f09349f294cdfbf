// The prefix store's keys, refs and trust as text (formats/store-v1.md): the checks of a key, the
// one parser of ref files, the trust policy per tenant, and the JSON of the store's answers. The
// store on disk is store.cpp; what both share store_internal.h.
#include "kvtool/store.h"

#include <dirent.h>
#include <sys/stat.h>

#include <limits>
#include <memory>

#include "kvtool/error.h"
#include "kvtool/identity.h"
#include "kvtool/signing.h"
#include "store_internal.h"

namespace kvtool {

namespace store_internal {

void check_key_part(const std::string& v, const char* name, bool required) {
  KVT_CHECK(!required || !v.empty(), BAD_STORE_KEY, "the store key needs --" << name);
  if (v.empty()) return;                            // an optional part left out
  const std::string problem = key_part_problem(v);  // the one rule dumps and the store share
  KVT_CHECK(problem.empty(), BAD_STORE_KEY, "--" << name << " " << problem);
}

void check_nesting(const std::string& text, int max_depth, const char* what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      KVT_CHECK(++depth <= max_depth, STORE_CORRUPT, what << " nests deeper than " << max_depth << " levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

}  // namespace store_internal

namespace {

using store_internal::check_key_part;
using store_internal::check_nesting;
using store_internal::is_hex64;
using store_internal::kNoKey;

constexpr int kMaxRefDepth = 4;  // a ref nests two levels (the ref, its key); anything deeper is damage

json warnings_json(const std::vector<StoreWarning>& w) {
  json a = json::array();
  for (const auto& x : w) a.push_back(x.to_json());
  return a;
}

json signer_json(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

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
  check_key_part(k.tenant, "tenant", true);
  check_key_part(k.model, "model", true);
  check_key_part(k.adapter, "adapter", true);
  check_key_part(k.prefix_hash, "prefix-hash", true);
  check_key_part(k.kind, "kind", true);
  check_key_part(k.params_digest, "params-digest", need_params);
  check_key_part(k.position_contract, "position-contract", false);
}

json StoreRef::to_json() const {
  json j = {{"schema_version", 1},
            {"key", key.to_json()},
            {"object", object},
            {"coverage_end", coverage_end},
            {"content_digest", content_digest},
            {"created", created}};
  if (!signer.empty()) j["signer"] = signer;
  return j;
}

StoreRef parse_store_ref(const std::string& text) {
  KVT_CHECK(text.size() <= kMaxStoreRefBytes, STORE_CORRUPT,
            "the ref is " << text.size() << " bytes; a ref is at most " << kMaxStoreRefBytes);
  check_nesting(text, kMaxRefDepth, "the ref");
  json j = parse_json(text, Reason::STORE_CORRUPT, "the ref");
  KVT_CHECK(j.is_object(), STORE_CORRUPT, "the ref is not a JSON object");
  auto str = [](const json& o, const char* f, const char* where) {
    auto it = o.find(f);
    KVT_CHECK(it != o.end() && it->is_string(), STORE_CORRUPT,
              "the ref's " << where << "\"" << f << "\" is missing or not a string");
    return it->get<std::string>();
  };
  auto integer = [&j](const char* f) {
    auto it = j.find(f);
    KVT_CHECK(it != j.end() && it->is_number_integer() &&
                  (!it->is_number_unsigned() ||
                   it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())),
              STORE_CORRUPT, "the ref's \"" << f << "\" is missing or not an integer");
    return it->get<int64_t>();
  };
  KVT_CHECK(integer("schema_version") == 1, STORE_CORRUPT, "the ref's schema_version is not 1");
  auto key = j.find("key");
  KVT_CHECK(key != j.end() && key->is_object(), STORE_CORRUPT, "the ref's \"key\" is missing or not an object");
  StoreRef r;
  r.key.tenant = str(*key, "tenant", "key ");
  r.key.model = str(*key, "model", "key ");
  r.key.adapter = str(*key, "adapter", "key ");
  r.key.prefix_hash = str(*key, "prefix_hash", "key ");
  r.key.kind = str(*key, "kind", "key ");
  r.key.params_digest = str(*key, "params_digest", "key ");
  r.key.position_contract = str(*key, "position_contract", "key ");
  try {
    check_store_key(r.key, true);
  } catch (const Error& e) {
    KVT_THROW(STORE_CORRUPT, "the ref's key is invalid: " << e.what());
  }
  r.object = str(j, "object", "");
  KVT_CHECK(is_hex64(r.object), STORE_CORRUPT, "the ref's object is not 64 lowercase hex digits");
  r.coverage_end = integer("coverage_end");
  KVT_CHECK(r.coverage_end >= 0, STORE_CORRUPT, "the ref's coverage_end is negative");
  r.content_digest = str(j, "content_digest", "");
  r.created = integer("created");
  auto s = j.find("signer");
  if (s != j.end() && !s->is_null()) {
    KVT_CHECK(s->is_string() && is_hex64(s->get<std::string>()), STORE_CORRUPT,
              "the ref's signer is not a key id (64 lowercase hex digits)");
    r.signer = s->get<std::string>();
  }
  return r;
}

TrustPolicy tenant_policy(const StoreTrust& t, const std::string& tenant, bool is_signed) {
  TrustPolicy p = t.all;
  auto own = t.tenant_keys.find(tenant);
  if (own != t.tenant_keys.end()) {
    p.trusted.insert(p.trusted.end(), own->second.begin(), own->second.end());
    p.require_signature = true;
  }
  // TrustPolicy reads an empty key list as "any signer"; with other tenants' keys configured it
  // must mean "no signer" for this tenant, or tenant B's key would vouch for tenant A.
  // (An unsigned artifact keeps the empty list: it passes unless a signature is required.)
  if (p.trusted.empty() && !t.tenant_keys.empty() && is_signed) p.trusted.push_back(kNoKey);
  return p;
}

StoreTrust load_store_trust(const std::vector<std::string>& pubkeys, const std::string& dir, bool require_signature) {
  StoreTrust t;
  t.all.require_signature = require_signature;
  for (const auto& p : pubkeys) t.all.trusted.push_back(load_public_key(p));
  if (dir.empty()) return t;
  auto top = load_trusted_keys(dir);  // IO_ERROR when the directory cannot be read
  t.all.trusted.insert(t.all.trusted.end(), top.begin(), top.end());
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), &closedir);
  KVT_CHECK(d, IO_ERROR, "cannot open trusted key directory '" << dir << "'");
  while (dirent* e = readdir(d.get())) {
    std::string n = e->d_name, sub = dir + "/" + n;
    struct stat st {};
    if (n[0] == '.' || stat(sub.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    check_key_part(n, "trusted-keys tenant folder", true);
    auto keys = load_trusted_keys(sub);
    KVT_CHECK(!keys.empty(), USAGE, "the tenant folder '" << sub << "' holds no *.pem keys");
    t.tenant_keys[n] = keys;
  }
  KVT_CHECK(!t.all.trusted.empty() || !t.tenant_keys.empty(), USAGE,
            "trusted_keys directory '" << dir << "' holds no *.pem keys (at its top or in <tenant>/ folders)");
  return t;
}

json StoreWarning::to_json() const { return {{"path", path}, {"reason", reason}, {"message", message}}; }

json StorePutResult::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"object", object},
          {"path", path},
          {"key", key.to_json()},
          {"signer", signer_json(signer)},
          {"object_written", object_written},
          {"warnings", warnings_json(warnings)}};
}

json StoreGetResult::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"path", path},
          {"object", object},
          {"key", ref.key.to_json()},
          {"signer", signer_json(ref.signer)},
          {"warnings", warnings_json(warnings)}};
}

json StoreListing::to_json() const {
  json items = json::array();
  for (const auto& r : refs) items.push_back(r.to_json());
  return {{"schema_version", kJsonSchemaVersion}, {"refs", items}, {"warnings", warnings_json(warnings)}};
}

json StoreRmResult::to_json() const {
  return {{"schema_version", kJsonSchemaVersion},
          {"ok", true},
          {"refs_removed", refs_removed},
          {"warnings", warnings_json(warnings)}};
}

json StoreGcResult::to_json() const {
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true},
          {"refs_removed", refs_removed},         {"objects_removed", objects_removed},
          {"temps_removed", temps_removed},       {"grace_seconds", grace_seconds},
          {"warnings", warnings_json(warnings)}};
}

}  // namespace kvtool
