// The prefix store on disk (kvtool/store.h, formats/store-v1.md): its directory, content-addressed
// objects, refs, locks and garbage collection. Keys, refs and trust as text are store_refs.cpp.
#include "kvtool/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <memory>

#include "kvtool/artifact.h"
#include "kvtool/atomic_file.h"
#include "kvtool/error.h"
#include "kvtool/identity.h"
#include "kvtool/kinds.h"
#include "kvtool/sha256.h"
#include "kvtool/signing.h"
#include "store_internal.h"

namespace kvtool {

namespace {

using store_internal::check_key_part;
using store_internal::check_nesting;
using store_internal::is_hex64;
using store_internal::kNoKey;

constexpr size_t kMaxConfigBytes = 4096;
const char* const kConfigName = "store.json";
const char* const kLockName = "lock";

// Owns one file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// A read-only mapping of a whole file, so that the bytes hashed are the bytes admitted.
class Mapping {
 public:
  Mapping(int fd, size_t size, const std::string& what) : size_(size) {
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    KVT_CHECK(p != MAP_FAILED, IO_ERROR, "cannot map " << what << ": " << std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  }
  ~Mapping() { munmap(const_cast<uint8_t*>(data_), size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_;
};

// A directory below the store, never reached through a symlink.
int open_dir_at(int dfd, const std::string& name) {
  return openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

struct Entry {
  std::string name;
  struct stat st {};
  bool ok = false;  // false: the entry vanished between readdir and fstatat
};

// The entries of a directory with their own (never a link target's) status, sorted by name.
std::vector<Entry> list_at(int dfd, const std::string& what) {
  int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
  KVT_CHECK(fd >= 0, IO_ERROR, "cannot read " << what << ": " << std::strerror(errno));
  std::unique_ptr<DIR, int (*)(DIR*)> d(fdopendir(fd), &closedir);
  if (!d) {
    close(fd);
    KVT_THROW(IO_ERROR, "cannot read " << what << ": " << std::strerror(errno));
  }
  rewinddir(d.get());  // the duplicate shares the offset of earlier listings
  std::vector<Entry> out;
  while (dirent* e = readdir(d.get())) {
    Entry en;
    en.name = e->d_name;
    if (en.name == "." || en.name == "..") continue;
    en.ok = fstatat(dfd, en.name.c_str(), &en.st, AT_SYMLINK_NOFOLLOW) == 0;
    out.push_back(en);
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

// Reads a small regular file below the store (false when it does not exist). Links, FIFOs and
// files over `cap` are damage: O_NONBLOCK keeps a planted FIFO from hanging us.
bool read_small_at(int dfd, const std::string& name, size_t cap, const std::string& what, std::string& text) {
  Fd fd(openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok() && errno == ENOENT) return false;
  KVT_CHECK(
      fd.ok(), STORE_CORRUPT,
      "cannot open " << what << ": " << std::strerror(errno) << " (symlinks are never followed inside the store)");
  struct stat st {};
  KVT_CHECK(fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), STORE_CORRUPT, what << " is not a regular file");
  KVT_CHECK(static_cast<uint64_t>(st.st_size) <= cap, STORE_CORRUPT,
            what << " is " << st.st_size << " bytes; at most " << cap << " are allowed");
  text.assign(cap + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd.get(), &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    KVT_CHECK(n >= 0, IO_ERROR, "cannot read " << what << ": " << std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  KVT_CHECK(got <= cap, STORE_CORRUPT, what << " grew past " << cap << " bytes while being read");
  text.resize(got);
  return true;
}

// Exclusive (gc, put's ref write) or shared (put's object write) flock on STORE/lock.
class StoreLock {
 public:
  StoreLock(int root, int mode, int op)
      : fd_(openat(root, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode)) {
    KVT_CHECK(fd_.ok(), IO_ERROR, "cannot open the store lock file: " << std::strerror(errno));
    while (flock(fd_.get(), op) != 0)
      KVT_CHECK(errno == EINTR, IO_ERROR, "cannot lock the store: " << std::strerror(errno));
  }  // closing the descriptor releases the lock

 private:
  Fd fd_;
};

std::string ref_id(const StoreKey& k) { return to_hex(sha256(canonical_json(k.to_json()))); }

std::string signer_id(const ArtifactReader& r) { return r.is_signed() ? key_id(*r.signer()) : std::string(); }

StoreKey key_of(const ArtifactReader& r) {
  const auto& s = r.source();
  const json& m = r.manifest();
  StoreKey k;
  k.tenant = s.id.tenant_namespace;
  k.model = s.id.model_artifact_sha256;
  k.adapter = s.id.adapter_set_sha256;
  k.prefix_hash = s.prefix_tokens_sha256;
  k.kind = r.kind();
  auto pd = m.find("params_digest");
  k.params_digest = pd != m.end() && pd->is_string() ? pd->get<std::string>() : std::string();
  k.position_contract = s.id.position_contract;
  return k;
}

// All parts the query gives (params digest and position contract may be empty: any) are equal.
bool matches(const StoreKey& have, const StoreKey& want) {
  auto eq = [](const std::string& h, const std::string& w) { return w.empty() || h == w; };
  return have.tenant == want.tenant && eq(have.model, want.model) && eq(have.adapter, want.adapter) &&
         eq(have.prefix_hash, want.prefix_hash) && eq(have.kind, want.kind) &&
         eq(have.params_digest, want.params_digest) && eq(have.position_contract, want.position_contract);
}

// The admission check of `load` under the tenant's trust (formats/store-v1.md §Trust).
void admit_for_tenant(const ArtifactReader& r, const StoreTrust& t, const std::string& tenant) {
  const TrustPolicy p = tenant_policy(t, tenant, r.is_signed());
  KVT_CHECK(!(r.is_signed() && p.trusted.size() == 1 && p.trusted[0] == kNoKey), UNTRUSTED_KEY,
            "the artifact of tenant '" << tenant << "' is signed by key " << signer_id(r).substr(0, 16)
                                       << ", but no key is trusted for this tenant");
  admit_artifact(r, p);
}

void mkdir_parents(const std::string& p) {
  for (size_t i = 1; i < p.size(); ++i) {
    if (p[i] != '/') continue;
    std::string cur = p.substr(0, i);
    if (mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST)
      KVT_THROW(IO_ERROR, "cannot create '" << cur << "': " << std::strerror(errno));
  }
}

// Creates `name` below `dfd` with exactly `mode` (mkdirat alone is subject to the umask).
void make_dir_at(int dfd, const char* name, int mode) {
  if (mkdirat(dfd, name, static_cast<mode_t>(mode)) != 0) {
    KVT_CHECK(errno == EEXIST, IO_ERROR, "cannot create '" << name << "' in the store: " << std::strerror(errno));
    return;
  }
  Fd d(open_dir_at(dfd, name));
  if (d.ok()) fchmod(d.get(), static_cast<mode_t>(mode));
}

}  // namespace

Store::Store(std::string dir, bool create, StoreCreateOptions opt) : dir_(std::move(dir)) {
  KVT_CHECK(!dir_.empty(), USAGE, "the store directory is empty");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  bool made_root = false;
  if (create) {
    mkdir_parents(dir_);
    made_root = mkdir(dir_.c_str(), 0700) == 0;
    KVT_CHECK(made_root || errno == EEXIST, IO_ERROR, "cannot create '" << dir_ << "': " << std::strerror(errno));
  }
  // The root is the user's path and may be a symlink they made; nothing below it is followed.
  root_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  KVT_CHECK(root_ >= 0, IO_ERROR, "cannot open the store '" << dir_ << "': " << std::strerror(errno));
  try {
    struct stat st {};
    const bool fresh = create && fstatat(root_, "refs", &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
    if (fresh) {
      file_mode_ = opt.group_shared ? 0640 : 0600;
      dir_mode_ = opt.group_shared ? 0750 : 0700;
      if (made_root) fchmod(root_, static_cast<mode_t>(dir_mode_));
      std::string cfg = json{{"schema_version", 1}, {"group_shared", opt.group_shared}}.dump(1) + "\n";
      AtomicOutput out(root_, kConfigName, true, file_mode_);
      write_all(out.fd(), cfg.data(), cfg.size(), std::string(kConfigName));
      out.commit();
      make_dir_at(root_, "objects", dir_mode_);
      make_dir_at(root_, "refs", dir_mode_);
    }
    std::string cfg;
    if (read_small_at(root_, kConfigName, kMaxConfigBytes, kConfigName, cfg)) {
      check_nesting(cfg, 2, kConfigName);
      json c = parse_json(cfg, Reason::STORE_CORRUPT, kConfigName);
      auto g = c.is_object() ? c.find("group_shared") : c.end();
      KVT_CHECK(g != c.end() && g->is_boolean(), STORE_CORRUPT, kConfigName << " has no boolean group_shared");
      file_mode_ = g->get<bool>() ? 0640 : 0600;
      dir_mode_ = g->get<bool>() ? 0750 : 0700;
    }
    for (const char* sub : {"objects", "refs"}) {
      int fd = open_dir_at(root_, sub);
      KVT_CHECK(fd >= 0 || errno != ENOENT, IO_ERROR, "'" << dir_ << "' is not a kvtool store (no objects/ and refs/)");
      KVT_CHECK(fd >= 0, STORE_CORRUPT,
                "'" << dir_ << "/" << sub << "' is not a plain directory (" << std::strerror(errno)
                    << "); symlinks are never followed inside the store");
      (sub[0] == 'o' ? objects_ : refs_) = fd;
    }
  } catch (...) {
    for (int fd : {root_, objects_, refs_})
      if (fd >= 0) close(fd);
    throw;
  }
}

Store::~Store() {
  for (int fd : {root_, objects_, refs_})
    if (fd >= 0) close(fd);
}

std::vector<Store::RefFile> Store::refs(std::vector<StoreWarning>& warnings) const {
  std::vector<RefFile> out;
  for (const auto& e : list_at(refs_, "refs/")) {
    const std::string& n = e.name;
    if (!e.ok || n[0] == '.' || n.size() < 5 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
    const std::string rel = "refs/" + n;
    try {
      std::string text;
      if (!read_small_at(refs_, n, kMaxStoreRefBytes, rel, text)) continue;  // removed meanwhile
      StoreRef ref = parse_store_ref(text);
      KVT_CHECK(ref_id(ref.key) + ".json" == n, STORE_CORRUPT, "the ref's key does not hash to its file name");
      out.push_back({n, std::move(ref)});
    } catch (const Error& err) {
      // One damaged ref must not stop every tenant: report it and go on (formats/store-v1.md).
      warnings.push_back({rel, err.reason_name(), err.what()});
    }
  }
  return out;
}

std::string Store::write_object(const std::string& hex, const uint8_t* data, uint64_t size, bool& written) {
  const std::string shard = hex.substr(0, 2), name = hex + ".kvi", rel = "objects/" + shard + "/" + name;
  make_dir_at(objects_, shard.c_str(), dir_mode_);
  Fd sd(open_dir_at(objects_, shard));
  KVT_CHECK(sd.ok(), STORE_CORRUPT,
            "objects/" << shard << " is not a plain directory (" << std::strerror(errno)
                       << "); kvtool never writes through a symlink inside the store");
  struct stat st {};
  if (fstatat(sd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    KVT_CHECK(S_ISREG(st.st_mode), STORE_CORRUPT, rel << " is not a regular file");
    // A put that reuses an object refreshes its time, so gc's grace counts from this put.
    Fd of(openat(sd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (of.ok()) futimens(of.get(), nullptr);
    written = false;
  } else {
    // Concurrent puts of the same object write identical bytes; rename makes either one win whole.
    AtomicOutput out(sd.get(), name, true, file_mode_);
    write_all(out.fd(), data, size, rel);
    out.commit();
    written = true;
  }
  return dir_ + "/" + rel;
}

void Store::check_replace(const StoreRef& ref, std::vector<StoreWarning>& warnings) const {
  const std::string name = ref_id(ref.key) + ".json", rel = "refs/" + name;
  StoreRef old;
  try {
    std::string text;
    if (!read_small_at(refs_, name, kMaxStoreRefBytes, rel, text)) return;
    old = parse_store_ref(text);
  } catch (const Error& err) {
    warnings.push_back({rel, err.reason_name(), std::string(err.what()) + "; replaced"});
    return;
  }
  if (old.signer.empty()) return;
  KVT_CHECK(!ref.signer.empty(), SIGNATURE_REQUIRED,
            "tenant '" << ref.key.tenant << "' holds a ref for this key signed by key " << old.signer.substr(0, 16)
                       << "; an unsigned artifact never replaces a signed ref (`kvtool store rm` it first to "
                          "replace it on purpose)");
  KVT_CHECK(ref.signer == old.signer, UNTRUSTED_KEY,
            "tenant '" << ref.key.tenant << "' holds a ref for this key signed by key " << old.signer.substr(0, 16)
                       << ", but this artifact is signed by key " << ref.signer.substr(0, 16)
                       << "; a signed ref is only replaced by an artifact of the same signer");
}

void Store::write_ref(const StoreRef& ref, std::vector<StoreWarning>& warnings) {
  const std::string name = ref_id(ref.key) + ".json", rel = "refs/" + name;
  check_replace(ref, warnings);  // again, under the lock: the answer before it may be stale
  const std::string text = ref.to_json().dump(1) + "\n";
  AtomicOutput out(refs_, name, true, file_mode_);
  write_all(out.fd(), text.data(), text.size(), rel);
  out.commit();
}

StorePutResult Store::put(const std::string& artifact, const StoreTrust& trust) {
  ArtifactReader r(artifact);
  admit_for_tenant(r, trust, r.source().id.tenant_namespace);  // never store what would not be served
  StorePutResult res;
  res.key = key_of(r);
  KVT_CHECK(!res.key.prefix_hash.empty(), BAD_STORE_KEY,
            "the artifact records no prefix-token hash (its dump had no /kv/tokens)");
  check_store_key(res.key, true);
  // The bytes admitted above are the bytes hashed and stored: the input file is not read again.
  res.object = to_hex(sha256(r.data(), r.file_size()));
  res.signer = signer_id(r);
  StoreRef ref;
  ref.key = res.key;
  ref.object = res.object;
  ref.coverage_end = r.source().coverage_end;
  ref.content_digest = r.source().content_digest;
  ref.created = static_cast<int64_t>(std::time(nullptr));
  ref.signer = res.signer;
  std::vector<StoreWarning> early;  // reported by the check under the lock
  check_replace(ref, early);        // refuse before copying bytes that could never be referenced
  {
    StoreLock shared(root_, file_mode_, LOCK_SH);  // gc never sweeps while an object is being put
    res.path = write_object(res.object, r.data(), r.file_size(), res.object_written);
  }
  // Under the exclusive lock no gc runs: the object is checked (rewritten if a gc took it between
  // the two locks) and the ref written as one step, so no ref ever names a deleted object.
  StoreLock excl(root_, file_mode_, LOCK_EX);
  bool again = false;
  write_object(res.object, r.data(), r.file_size(), again);
  res.object_written = res.object_written || again;
  write_ref(ref, res.warnings);
  return res;
}

namespace {

// The object `ref` names, hashed, admitted under the tenant's trust and checked against the ref;
// `res` gets the path. Throws the reason the object cannot be served.
void serve_ref(int objects, const std::string& dir, const StoreRef& ref, const StoreKey& key, const StoreTrust& trust,
               StoreGetResult& res) {
  res.ref = ref;
  res.object = ref.object;
  const std::string shard = res.object.substr(0, 2), name = res.object + ".kvi";
  const std::string rel = "objects/" + shard + "/" + name;
  Fd sd(open_dir_at(objects, shard));
  Fd of(sd.ok() ? openat(sd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1);
  KVT_CHECK(of.ok(), STORE_CORRUPT,
            "the object " << res.object << " of this key is missing or not a plain file (symlinks are never followed)");
  struct stat st {};
  KVT_CHECK(fstat(of.get(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0, STORE_CORRUPT,
            rel << " is not a regular, non-empty file");
  Mapping m(of.get(), static_cast<size_t>(st.st_size), rel);
  KVT_CHECK(to_hex(sha256(m.data(), static_cast<size_t>(st.st_size))) == res.object, STORE_CORRUPT,
            "the object " << res.object << " does not match its name (modified on disk)");
  res.path = dir + "/" + rel;
  ArtifactReader r(m.data(), static_cast<uint64_t>(st.st_size), res.path);
  admit_for_tenant(r, trust, key.tenant);  // an entry that fails admission is reported with its reason, not served
  StoreKey got = key_of(r);
  KVT_CHECK(got.tenant == key.tenant, TENANT_MISMATCH, "the stored artifact belongs to another tenant");
  KVT_CHECK(canonical_json(got.to_json()) == canonical_json(ref.key.to_json()), STORE_CORRUPT,
            "the stored artifact's binding does not match its ref");
  KVT_CHECK(signer_id(r) == ref.signer, STORE_CORRUPT,
            "the stored artifact's signer does not match the signer its ref recorded");
}

}  // namespace

StoreGetResult Store::get(const StoreKey& key, const StoreTrust& trust) {
  check_store_key(key, false);
  StoreGetResult res;
  std::vector<StoreRef> hits;
  for (auto& rf : refs(res.warnings))
    if (matches(rf.ref.key, key)) hits.push_back(rf.ref);
  KVT_CHECK(!hits.empty(), STORE_MISS,
            "no artifact in the store for tenant '" << key.tenant << "' and this key"
                                                    << (res.warnings.empty() ? "" : " (damaged refs were skipped)"));
  if (hits.size() == 1) {
    serve_ref(objects_, dir_, hits[0], key, trust, res);
    return res;
  }
  // Trust decides before ambiguity does: anyone who may write refs could otherwise add one with
  // other params under this key and deny service to every reader whose trust would refuse it.
  // Every match is checked as it would be served; those that fail are skipped with a warning.
  std::vector<StoreGetResult> served;
  std::exception_ptr first_refusal;
  for (const auto& h : hits) {
    StoreGetResult one;
    try {
      serve_ref(objects_, dir_, h, key, trust, one);
      served.push_back(std::move(one));
    } catch (const Error& e) {
      if (!first_refusal) first_refusal = std::current_exception();
      res.warnings.push_back({"refs/" + ref_id(h.key) + ".json", reason_name(e.reason()), e.what()});
    }
  }
  if (served.empty()) std::rethrow_exception(first_refusal);  // none is servable: the first one's reason
  KVT_CHECK(served.size() == 1, STORE_AMBIGUOUS,
            served.size() << " artifacts this trust admits match (different params); give params_digest to "
                             "choose one");
  std::vector<StoreWarning> warnings = std::move(res.warnings);
  res = std::move(served[0]);
  res.warnings = std::move(warnings);
  return res;
}

StoreListing Store::ls(const std::string& tenant) const {
  if (!tenant.empty()) check_key_part(tenant, "tenant", true);  // the rule get, put and rm apply
  StoreListing res;
  for (auto& rf : refs(res.warnings))
    if (tenant.empty() || rf.ref.key.tenant == tenant) res.refs.push_back(rf.ref);
  return res;
}

StoreRmResult Store::rm(const StoreKey& key) {
  check_store_key(key, false);
  StoreRmResult res;
  for (auto& rf : refs(res.warnings))
    if (matches(rf.ref.key, key) && unlinkat(refs_, rf.name.c_str(), 0) == 0) ++res.refs_removed;
  KVT_CHECK(res.refs_removed > 0, STORE_MISS, "no ref matches this key");
  return res;
}

void Store::sweep_shard(const std::string& shard, const std::map<std::string, bool>& live, int64_t grace,
                        StoreGcResult& res) {
  const std::string where = "objects/" + shard;
  Fd sd(open_dir_at(objects_, shard));
  if (!sd.ok()) {
    res.warnings.push_back({where, "STORE_CORRUPT", "cannot open: " + std::string(std::strerror(errno))});
    return;
  }
  for (const auto& e : list_at(sd.get(), where)) {
    const std::string rel = where + "/" + e.name;
    if (!e.ok) continue;
    if (!S_ISREG(e.st.st_mode)) {
      res.warnings.push_back({rel, "STORE_CORRUPT", "not a regular file; skipped (never followed)"});
      continue;
    }
    const bool temp = is_temp_name(e.name);
    const std::string hex = e.name.size() == 68 ? e.name.substr(0, 64) : std::string();
    if (!temp && (!is_hex64(hex) || e.name.compare(64, 4, ".kvi") != 0 || hex.compare(0, 2, shard) != 0)) {
      res.warnings.push_back({rel, "STORE_CORRUPT", "not a store object; skipped"});
      continue;
    }
    if (!temp && live.count(hex)) continue;
    // Re-read the time right before unlinking: a put may have just refreshed it.
    struct stat st {};
    if (fstatat(sd.get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        std::time(nullptr) - st.st_mtime < grace)
      continue;
    if (unlinkat(sd.get(), e.name.c_str(), 0) == 0) ++(temp ? res.temps_removed : res.objects_removed);
  }
}

StoreGcResult Store::gc(int64_t keep_last, int64_t grace) {
  KVT_CHECK(keep_last >= 0 && grace >= 0, USAGE, "keep_last and grace must not be negative");
  StoreLock lock(root_, file_mode_, LOCK_EX);  // no put writes a ref during mark and sweep
  StoreGcResult res;
  res.grace_seconds = grace;
  auto all = refs(res.warnings);
  if (keep_last > 0) {
    std::map<std::string, std::vector<std::pair<int64_t, std::string>>> groups;
    for (const auto& rf : all) {
      StoreKey g = rf.ref.key;
      g.params_digest.clear();
      groups[canonical_json(g.to_json())].emplace_back(rf.ref.created, rf.name);
    }
    for (auto& [g, v] : groups) {
      std::sort(v.rbegin(), v.rend());  // newest first
      for (size_t i = static_cast<size_t>(keep_last); i < v.size(); ++i)
        if (unlinkat(refs_, v[i].second.c_str(), 0) == 0) ++res.refs_removed;
    }
    std::vector<StoreWarning> again;  // already reported
    all = refs(again);
  }
  std::map<std::string, bool> live;
  for (const auto& rf : all) live[rf.ref.object] = true;
  for (const auto& e : list_at(objects_, "objects/")) {
    if (!e.ok) continue;
    if (!S_ISDIR(e.st.st_mode)) {
      res.warnings.push_back({"objects/" + e.name, "STORE_CORRUPT", "not a plain directory; skipped (never followed)"});
      continue;
    }
    sweep_shard(e.name, live, grace, res);
  }
  for (const auto& e : list_at(refs_, "refs/")) {
    if (!e.ok || !is_temp_name(e.name)) continue;
    if (!S_ISREG(e.st.st_mode)) {
      res.warnings.push_back({"refs/" + e.name, "STORE_CORRUPT", "not a regular file; skipped (never followed)"});
      continue;
    }
    if (std::time(nullptr) - e.st.st_mtime >= grace && unlinkat(refs_, e.name.c_str(), 0) == 0) ++res.temps_removed;
  }
  return res;
}

}  // namespace kvtool
