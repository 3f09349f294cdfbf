// Seals (formats/seal-v1.md): the SHA-256 of every file of a store directory (or of one file),
// hashed on several threads, optionally for one shard of the files and signed; merged from shards;
// compared with the files now.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <mutex>
#include <map>
#include <set>
#include <thread>

#include "kvtool/atomic_file.h"
#include "kvtool/canonical.h"
#include "kvtool/progress.h"
#include "kvtool/sha256.h"
#include "kvtool/store_check.h"

namespace kvtool {

namespace {

constexpr int kSealVersion = 1;
constexpr size_t kSealMaxBytes = 1ull << 30;  // a seal's JSON takes about 7x its size in memory
constexpr const char* kSealSigningPrefix = "kvtool-seal-v1\n";

struct Target {
  std::string path;  // relative to the tree (for a single file: its name)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// The journal of a seal in progress (SealOptions::journal): one JSON line per file hashed, so that
// a seal interrupted over a large store resumes where it stopped. Lines are appended under a lock
// and flushed one by one; a torn last line is ignored on reading.
class Journal {
 public:
  // Never through a link, never blocking on a FIFO planted under the name, a regular file only.
  Journal(const std::string& path, bool keep) : path_(path) {
    if (path.empty()) return;
    fd_ = ::open(path.c_str(),
                 O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (keep ? 0 : O_TRUNC), 0600);
    KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot open the seal journal '" << path << "': " << std::strerror(errno));
    struct stat st {};
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_), fd_ = -1;
      KVT_THROW(IO_ERROR, "the seal journal '" << path << "' is not a regular file");
    }
  }
  ~Journal() {
    if (fd_ >= 0) ::close(fd_);
  }
  void add(const Target& t, const std::string& sha) {
    if (fd_ < 0) return;
    const std::string line =
        json{{"path", t.path}, {"size", t.size}, {"mtime_ns", t.mtime_ns}, {"sha256", sha}}.dump() + "\n";
    std::lock_guard<std::mutex> lock(mu_);
    write_all(fd_, line.data(), line.size(), "the seal journal '" + path_ + "'");
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
};

// The digests a journal recorded, by path, with the size and mtime they were taken at.
// The bytes of a regular file of at most kSealMaxBytes, opened without following a link or blocking
// on a FIFO; `missing_ok`: "" when it does not exist. Else `reason` naming `what`.
std::string read_regular(const std::string& path, const std::string& what, Reason reason, bool missing_ok) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && missing_ok) return "";
  KVT_CHECK(fd >= 0, IO_ERROR, "cannot open " << what << ": " << std::strerror(errno));
  const RandomAccessFile f = RandomAccessFile::borrow(fd, what);
  struct stat st {};
  const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  std::string text;
  if (regular && f.size() <= kSealMaxBytes) {
    text.resize(static_cast<size_t>(f.size()));
    f.pread_exact(0, text.size(), text.data());
  }
  ::close(fd);
  KVT_CHECK(regular, reason, what << " is not a regular file");
  KVT_CHECK(f.size() <= kSealMaxBytes, reason,
            what << " is over 1 GiB (seal a store that large in shards: formats/seal-v1.md)");
  return text;
}

// A journal's entries by path; a torn or foreign line is skipped (that file is hashed again).
std::map<std::string, std::pair<Target, std::string>> read_journal(const std::string& path) {
  std::map<std::string, std::pair<Target, std::string>> out;
  const std::string text = read_regular(path, "the seal journal '" + path + "'", Reason::IO_ERROR, true);
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    try {
      const json j = json::parse(line);
      Target t{j.at("path").get<std::string>(), j.at("size").get<uint64_t>(), j.at("mtime_ns").get<int64_t>()};
      Digest d;
      if (from_hex(j.at("sha256").get<std::string>(), d)) out[t.path] = {t, j["sha256"].get<std::string>()};
    } catch (const std::exception&) {
      // a torn or foreign line: that file is hashed again
    }
  }
  return out;
}

// Which shard a file belongs to: the first 8 bytes of SHA-256 of its path, modulo the count, so a
// file keeps its shard when others come or go.
int64_t shard_of(const std::string& rel, int64_t count) {
  const Digest d = sha256(rel);
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = (x << 8) | d[static_cast<size_t>(i)];
  return static_cast<int64_t>(x % static_cast<uint64_t>(count));
}

// A seal is JSON: a file name that is not UTF-8 cannot be written in it (nlohmann refuses it).
bool utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// A directory (true) or a regular file (false); anything else — a FIFO would block a read — is refused.
bool is_directory(const std::string& path) {
  struct stat st {};
  KVT_CHECK(stat(path.c_str(), &st) == 0, IO_ERROR, "'" << path << "' does not exist");
  KVT_CHECK(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode), IO_ERROR,
            "'" << path << "' is neither a directory nor a regular file");
  return S_ISDIR(st.st_mode);
}

// The modification time of a single sealed file (a journal entry is reused only at the same one).
int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  KVT_CHECK(stat(path.c_str(), &st) == 0, IO_ERROR, "cannot stat '" << path << "'");
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// The files a seal covers: every regular file of the tree but a store's temporaries.
std::vector<Target> sealed_targets(const DirectoryTree& tree, const StoreOptions& so, std::string& kind, int64_t index,
                                   int64_t count) {
  std::set<std::string> temporaries;
  kind = "directory";
  try {
    const StoreScan s = scan_cache_store(tree, so);
    kind = s.kind;
    for (const StoreFile& f : s.files)
      if (f.role == StoreFile::Role::temporary) temporaries.insert(f.entry.path);
  } catch (const Error& e) {
    if (e.reason() != Reason::STORE_UNRECOGNIZED) throw;
  }
  std::vector<Target> out;
  for (const TreeEntry& e : tree.list(8, 50'000'000))
    if (e.type == TreeEntry::Type::file && !temporaries.count(e.path) && shard_of(e.path, count) == index) {
      KVT_CHECK(utf8(e.path), IO_ERROR,
                "'" << e.path << "' in '" << tree.root()
                    << "': a file name that is not UTF-8 cannot be sealed (a seal is "
                    << "JSON); rename it or move it out of the store");
      out.push_back({e.path, e.size, e.mtime_ns});
    }
  return out;
}

std::string digest_of(const RandomAccessFile& f, std::vector<uint8_t>& buf) {
  Sha256 h;
  for (uint64_t at = 0; at < f.size(); at += buf.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f.size() - at));
    f.pread_exact(at, n, buf.data());
    h.update(buf.data(), n);
  }
  return to_hex(h.finish());
}

// SHA-256 of each target on `threads` threads (results in target order); a file that cannot be
// read gets "" and its error in `errors`.
std::vector<std::string> digests(const std::string& root, bool dir, const std::vector<Target>& t, int threads,
                                 bool quiet, std::vector<StoreFinding>& errors, Journal* journal = nullptr) {
  std::unique_ptr<DirectoryTree> tree = dir ? std::make_unique<DirectoryTree>(root) : nullptr;
  std::vector<std::string> out(t.size());
  std::vector<std::optional<StoreFinding>> err(t.size());
  Progress progress("kvtool seal " + root, static_cast<int64_t>(t.size()), quiet);
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::vector<uint8_t> buf(4u << 20);
    for (size_t i; (i = next++) < t.size();) {
      try {
        if (dir) {
          TreeFile f(*tree, t[i].path);
          out[i] = digest_of(f.file(), buf);
        } else {
          out[i] = digest_of(RandomAccessFile(root), buf);
        }
        if (journal) journal->add(t[i], out[i]);
      } catch (const Error& e) {
        // A file removed since the listing is reported as removed, not as an I/O error.
        err[i] = dir && !tree->exists(t[i].path)
                     ? StoreFinding{Reason::SEAL_MISMATCH, t[i].path, "removed while it was read", false}
                     : StoreFinding{e.reason(), t[i].path, e.what(), false};
      }
      progress.advance();
    }
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < std::max(1, threads); ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  progress.finish();
  for (auto& e : err)
    if (e) errors.push_back(*e);
  return out;
}

std::string signing_message(const json& seal) {
  json body = seal;
  body.erase("signature");
  return std::string(kSealSigningPrefix) + to_hex(sha256(canonical_json(body)));
}

void sign(json& seal, const std::string& key_path) {
  if (key_path.empty()) return;
  const SigningKey key = SigningKey::load(key_path);
  const SignatureRaw sig = key.sign(signing_message(seal));
  seal["signature"] = {{"key_id", key_id(key.public_key())},
                       {"public_key", to_hex(key.public_key().data(), key.public_key().size())},
                       {"sig", to_hex(sig.data(), sig.size())}};
}

std::string leaf(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// An integer member of a seal, or `fallback` when it is absent or not an integer.
int64_t int_member(const json& j, const char* key, int64_t fallback) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return fallback;
  return j[key].get<int64_t>();
}

// A '/'-separated relative path: no empty, "." or ".." component, no leading '/'.
bool relative_path(const std::string& p) {
  if (p.empty() || p.size() > 4096) return false;
  size_t start = 0;
  for (size_t i = 0; i <= p.size(); ++i)
    if (i == p.size() || p[i] == '/') {
      const std::string c = p.substr(start, i - start);
      if (c.empty() || c == "." || c == "..") return false;
      start = i + 1;
    }
  return true;
}

// The seal's structure; BAD_SEAL naming what is wrong.
void check_structure(const json& s) {
  KVT_CHECK(s.is_object() && int_member(s, "kvtool_seal", 0) == kSealVersion, BAD_SEAL,
            "not a kvtool seal of version " << kSealVersion << " (no \"kvtool_seal\": 1)");
  static const std::set<std::string> kinds = {"vllm", "lmcache", "sglang", "directory", "file"};
  KVT_CHECK(s.contains("kind") && s["kind"].is_string() && kinds.count(s["kind"].get<std::string>()) &&
                s.contains("name") && s["name"].is_string(),
            BAD_SEAL, "the seal has no kind (vllm, lmcache, sglang, directory or file) or no name");
  const json sh = s.contains("shard") ? s["shard"] : json();
  const int64_t count = int_member(sh, "count", 0), index = int_member(sh, "index", -1);
  KVT_CHECK(count >= 1 && count <= (int64_t{1} << 32) && index >= 0 && index < count, BAD_SEAL,
            "the seal's shard is not {index, count} with 0 <= index < count");
  KVT_CHECK(s.contains("files") && s["files"].is_array(), BAD_SEAL, "the seal has no files array");
  std::string prev;
  for (const json& f : s["files"]) {
    KVT_CHECK(f.is_object() && f.contains("path") && f["path"].is_string() && f.contains("size") &&
                  f["size"].is_number_unsigned() && f.contains("sha256") && f["sha256"].is_string(),
              BAD_SEAL, "a seal entry lacks path, size or sha256");
    const std::string sha = f["sha256"].get<std::string>();
    KVT_CHECK(sha.size() == 64 && sha.find_first_not_of("0123456789abcdef") == std::string::npos, BAD_SEAL,
              "a seal entry's sha256 is not 64 lowercase hex digits");
    const std::string p = f["path"].get<std::string>();
    KVT_CHECK(relative_path(p), BAD_SEAL, "the seal names '" << p << "', which is not a path inside the sealed folder");
    KVT_CHECK(p > prev || prev.empty(), BAD_SEAL, "the seal's files are not sorted by path or name one twice");
    KVT_CHECK(shard_of(p, count) == index, BAD_SEAL, "the seal names '" << p << "', which belongs to another shard");
    prev = p;
  }
}

void check_signature(const json& seal, const std::vector<PublicKeyRaw>& trusted) {
  if (trusted.empty()) return;
  KVT_CHECK(seal.contains("signature") && seal["signature"].is_object(), BAD_SEAL,
            "the seal is unsigned; a trusted key was given (--pubkey / --trusted-keys)");
  const json& sg = seal["signature"];
  const std::string msg = signing_message(seal);
  SignatureRaw sig{};
  const std::string hex = sg.contains("sig") && sg["sig"].is_string() ? sg["sig"].get<std::string>() : "";
  KVT_CHECK(hex.size() == 128 && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos, BAD_SEAL,
            "the seal's signature is not 64 bytes of hex");
  for (size_t i = 0; i < sig.size(); ++i) sig[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  for (const PublicKeyRaw& k : trusted)
    if (verify_signature(k, msg, sig)) return;
  KVT_THROW(BAD_SEAL,
            "the seal's signature is not valid for any trusted key (it was changed, or signed by another key)");
}

}  // namespace

json make_seal(const std::string& path, const SealOptions& o) {
  KVT_CHECK(o.shard_count >= 1 && o.shard_index >= 0 && o.shard_index < o.shard_count, USAGE,
            "shard " << o.shard_index << "/" << o.shard_count << " is not 0 <= index < count");
  const bool dir = is_directory(path);
  KVT_CHECK(utf8(leaf(path)), USAGE, "'" << path << "': a name that is not UTF-8 cannot be sealed (a seal is JSON)");
  std::string kind = "file";
  std::vector<Target> targets;
  if (dir) {
    targets = sealed_targets(DirectoryTree(path), o.store, kind, o.shard_index, o.shard_count);
  } else {
    KVT_CHECK(o.shard_count == 1, USAGE, "a single file is sealed whole: shards apply to directories");
    targets.push_back({leaf(path), RandomAccessFile(path).size(), mtime_ns(path)});
  }
  // Resume: a file the journal hashed at the same size and modification time keeps its digest.
  const auto done = o.resume && !o.journal.empty() ? read_journal(o.journal)
                                                   : std::map<std::string, std::pair<Target, std::string>>{};
  Journal journal(o.journal, o.resume);
  std::vector<Target> todo;
  std::vector<std::string> d(targets.size());
  std::vector<size_t> where;
  for (size_t i = 0; i < targets.size(); ++i) {
    auto it = done.find(targets[i].path);
    if (it != done.end() && it->second.first.size == targets[i].size &&
        it->second.first.mtime_ns == targets[i].mtime_ns) {
      d[i] = it->second.second;
      journal.add(targets[i], d[i]);
    } else {
      todo.push_back(targets[i]), where.push_back(i);
    }
  }
  std::vector<StoreFinding> errors;
  const std::vector<std::string> fresh = digests(path, dir, todo, o.threads, o.quiet, errors, &journal);
  for (const StoreFinding& e : errors)  // a file removed while sealing is not part of the store
    if (e.reason != Reason::SEAL_MISMATCH) throw Error(e.reason, e.message);
  for (size_t k = 0; k < todo.size(); ++k) d[where[k]] = fresh[k];
  json seal = {{"kvtool_seal", kSealVersion},
               {"kind", kind},
               {"name", leaf(path)},
               {"shard", {{"index", o.shard_index}, {"count", o.shard_count}}},
               {"files", json::array()}};
  for (size_t i = 0; i < targets.size(); ++i)
    if (!d[i].empty())
      seal["files"].push_back({{"path", targets[i].path}, {"size", targets[i].size}, {"sha256", d[i]}});
  sign(seal, o.sign_key);
  return seal;
}

json merge_seals(const std::vector<json>& shards, const std::string& sign_key) {
  KVT_CHECK(!shards.empty(), USAGE, "no seals to merge");
  for (const json& s : shards) check_structure(s);
  const int64_t count = shards[0]["shard"]["count"].get<int64_t>();
  KVT_CHECK(count == static_cast<int64_t>(shards.size()), BAD_SEAL,
            shards.size() << " seals given; their shards are " << count << ": every shard, once");
  std::vector<bool> seen(static_cast<size_t>(count), false);
  std::map<std::string, json> files;
  for (const json& s : shards) {
    KVT_CHECK(s["kind"] == shards[0]["kind"] && s["name"] == shards[0]["name"] && s["shard"]["count"] == count,
              BAD_SEAL, "the seals are of different trees or shard counts");
    const auto i = static_cast<size_t>(s["shard"]["index"].get<int64_t>());
    KVT_CHECK(!seen[i], BAD_SEAL, "shard " << i << " is given twice");
    seen[i] = true;
    for (const json& f : s["files"])
      KVT_CHECK(files.emplace(f["path"].get<std::string>(), f).second, BAD_SEAL,
                "two shard seals name '" << f["path"].get<std::string>() << "'");
  }
  for (size_t i = 0; i < seen.size(); ++i) KVT_CHECK(seen[i], BAD_SEAL, "shard " << i << "/" << count << " is missing");
  json seal = {{"kvtool_seal", kSealVersion},
               {"kind", shards[0]["kind"]},
               {"name", shards[0]["name"]},
               {"shard", {{"index", 0}, {"count", 1}}},
               {"files", json::array()}};
  for (auto& [p, f] : files) seal["files"].push_back(f);
  sign(seal, sign_key);
  return seal;
}

json read_seal(const std::string& path) {
  const std::string text = read_regular(path, "the seal '" + path + "'", Reason::BAD_SEAL, false);
  json s = parse_untrusted_json(text, "the seal '" + path + "'", Reason::BAD_SEAL, kJsonMaxDepth, kSealMaxBytes);
  check_structure(s);
  return s;
}

void check_seal(const std::string& path, const json& seal, const std::vector<PublicKeyRaw>& trusted, int threads,
                bool quiet, std::vector<StoreFinding>& findings, int64_t& sealed_files, int64_t shard_index,
                int64_t shard_count) {
  check_structure(seal);
  check_signature(seal, trusted);
  const bool dir = is_directory(path);
  int64_t index = seal["shard"]["index"].get<int64_t>(), count = seal["shard"]["count"].get<int64_t>();
  if (shard_count > 0 && (shard_index != index || shard_count != count)) {
    // A shard of a whole seal: the files of that shard are compared (a file's shard is its path's).
    KVT_CHECK(count == 1, BAD_SEAL,
              "the seal covers shard " << index << "/" << count << ", not " << shard_index << "/" << shard_count);
    KVT_CHECK(shard_index >= 0 && shard_index < shard_count, USAGE, "shard " << shard_index << "/" << shard_count);
    json part = seal;
    part["files"] = json::array();
    for (const json& f : seal["files"])
      if (shard_of(f["path"].get<std::string>(), shard_count) == shard_index) part["files"].push_back(f);
    part["shard"] = {{"index", shard_index}, {"count", shard_count}};
    return check_seal(path, part, {}, threads, quiet, findings, sealed_files, -1, 0);
  }
  KVT_CHECK(dir == (seal["kind"] != "file"), BAD_SEAL,
            "the seal is of " << (dir ? "a single file" : "a directory") << "; '" << path << "' is not");
  std::map<std::string, uint64_t> now;
  if (dir) {
    std::string kind;
    StoreOptions so;
    if (seal["kind"] != "directory") so.kind = seal["kind"].get<std::string>();
    for (const Target& t : sealed_targets(DirectoryTree(path), so, kind, index, count)) now[t.path] = t.size;
  } else {
    now[leaf(path)] = RandomAccessFile(path).size();
  }
  std::vector<Target> to_hash;
  std::vector<std::string> want;
  for (const json& f : seal["files"]) {
    const std::string p = f["path"].get<std::string>();
    auto it = now.find(p);
    if (it == now.end()) {
      findings.push_back({Reason::SEAL_MISMATCH, p, "removed since it was sealed", false});
    } else if (it->second != f["size"].get<uint64_t>()) {
      findings.push_back({Reason::SEAL_MISMATCH, p,
                          "changed since it was sealed: " + std::to_string(f["size"].get<uint64_t>()) +
                              " bytes then, " + std::to_string(it->second) + " now",
                          false});
    } else {
      to_hash.push_back({p, it->second});
      want.push_back(f["sha256"].get<std::string>());
    }
    if (it != now.end()) now.erase(it);
  }
  sealed_files = static_cast<int64_t>(seal["files"].size());
  for (const auto& [p, size] : now)
    findings.push_back({Reason::SEAL_MISMATCH, p, "added since the seal was made", false});
  const std::vector<std::string> got = digests(path, dir, to_hash, threads, quiet, findings);
  for (size_t i = 0; i < got.size(); ++i)
    if (!got[i].empty() && got[i] != want[i])
      findings.push_back(
          {Reason::SEAL_MISMATCH, to_hash[i].path, "its bytes changed since it was sealed (SHA-256 differs)", false});
}

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace kvtool
