// Regression tests for the prefix store under an attacker who can plant
// files in the store directory, another tenant, races between put and gc, and killed writers.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "kvtool/atomic_file.h"
#include "kvtool/error.h"
#include "kvtool/sha256.h"
#include "kvtool/signing.h"
#include "kvtool/store.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace fs = std::filesystem;

namespace {

// A container-test artifact of `tenant`, signed with `key` when given.
std::string artifact_of(const TempDir& tmp, const std::string& tenant, const std::string& name,
                        const SigningKey* key = nullptr) {
  std::string dump = tmp.file(tenant + ".h5");
  if (!fs::exists(dump)) {
    IdentityOptions id;
    id.tenant_namespace = tenant;
    small_dump(dump, 7, DType::f32, id);
  }
  write_test_artifact(dump, tmp.file(name), key);
  return tmp.file(name);
}

StoreKey key_for(const StorePutResult& p) {
  StoreKey k = p.key;
  k.params_digest.clear();
  k.position_contract.clear();
  return k;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void age(const std::string& path, int64_t seconds) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = time(nullptr) - seconds;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), ts, AT_SYMLINK_NOFOLLOW) == 0);
}

int mode_of(const std::string& p) {
  struct stat st {};
  REQUIRE(lstat(p.c_str(), &st) == 0);
  return static_cast<int>(st.st_mode & 07777);
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("finding 5: store gc never follows a symlinked directory", "[security]") {
  TempDir tmp;
  std::string art = artifact_of(tmp, "acme", "a.kvi");
  Store s(tmp.file("st"), true);
  s.put(art, StoreTrust{});
  fs::create_directory(tmp.file("victim"));
  for (int i = 0; i < 6; ++i) write_text(tmp.file("victim/f" + std::to_string(i)), "precious");
  age(tmp.file("victim/f0"), 7200);
  fs::create_directory_symlink(tmp.file("victim"), tmp.file("st/objects/ab"));
  // Also a link that looks like an object inside a real shard, pointing at a file outside.
  fs::create_directory(tmp.file("st/objects/cd"));
  fs::create_symlink(tmp.file("victim/f1"), tmp.file("st/objects/cd/" + std::string(64, 'c') + ".kvi"));
  StoreGcResult g = s.gc(0, 0);
  CHECK(files_in(tmp.file("victim")) == 6);
  CHECK(g.objects_removed == 0);  // the put's object is referenced
  bool reported_dir = false, reported_link = false;
  for (const auto& w : g.warnings) {
    reported_dir = reported_dir || w.path == "objects/ab";
    reported_link = reported_link || w.path == "objects/cd/" + std::string(64, 'c') + ".kvi";
  }
  CHECK(reported_dir);
  CHECK(reported_link);
  CHECK(fs::is_symlink(tmp.file("st/objects/ab")));  // skipped, not removed either
}

TEST_CASE("finding 5: store put never writes through a symlinked objects/<aa> directory", "[security]") {
  TempDir tmp;
  std::string art = artifact_of(tmp, "acme", "a.kvi");
  std::string hex = to_hex(sha256_file(art));
  Store s(tmp.file("st"), true);
  fs::create_directory(tmp.file("outside"));
  fs::create_directory_symlink(tmp.file("outside"), tmp.file("st/objects/" + hex.substr(0, 2)));
  CHECK(reason_of([&] { s.put(art, StoreTrust{}); }) == "STORE_CORRUPT");
  CHECK(fs::is_empty(tmp.file("outside")));
  // A symlinked refs/ or objects/ makes the store refuse to open.
  fs::remove(tmp.file("st/objects/" + hex.substr(0, 2)));
  fs::rename(tmp.file("st/refs"), tmp.file("real-refs"));
  fs::create_directory_symlink(tmp.file("real-refs"), tmp.file("st/refs"));
  CHECK(reason_of([&] { Store again(tmp.file("st")); }) == "STORE_CORRUPT");
  // The store root itself may be a symlink the user made.
  fs::remove(tmp.file("st/refs"));
  fs::rename(tmp.file("real-refs"), tmp.file("st/refs"));
  fs::create_directory_symlink(tmp.file("st"), tmp.file("link-to-store"));
  Store via_link(tmp.file("link-to-store"));
  CHECK(via_link.put(art, StoreTrust{}).object == hex);
}

TEST_CASE("finding 6: an unsigned or foreign-signed put never replaces a signed ref", "[security]") {
  TempDir tmp;
  generate_keypair(tmp.file("alice.pem"));
  generate_keypair(tmp.file("mallory.pem"));
  SigningKey alice = SigningKey::load(tmp.file("alice.pem")), mallory = SigningKey::load(tmp.file("mallory.pem"));
  std::string signed_art = artifact_of(tmp, "alice", "signed.kvi", &alice);
  std::string unsigned_art = artifact_of(tmp, "alice", "unsigned.kvi");
  std::string foreign_art = artifact_of(tmp, "alice", "foreign.kvi", &mallory);
  Store s(tmp.file("st"), true);
  StorePutResult p = s.put(signed_art, StoreTrust{});
  CHECK(p.signer == key_id(alice.public_key()));
  CHECK(reason_of([&] { s.put(unsigned_art, StoreTrust{}); }) == "SIGNATURE_REQUIRED");
  CHECK(reason_of([&] { s.put(foreign_art, StoreTrust{}); }) == "UNTRUSTED_KEY");
  StoreGetResult g = s.get(key_for(p), StoreTrust{});
  CHECK(g.object == p.object);
  CHECK(g.ref.signer == p.signer);
  s.put(signed_art, StoreTrust{});  // the same signer may replace its own ref
  // get applies load's policy.
  TrustPolicy strict;
  strict.trusted = {mallory.public_key()};
  CHECK(reason_of([&] { s.get(key_for(p), strict); }) == "UNTRUSTED_KEY");
  strict.trusted = {alice.public_key()};
  strict.require_signature = true;
  CHECK(s.get(key_for(p), strict).object == p.object);
}

TEST_CASE("finding 6: per-tenant trusted keys apply only to their tenant", "[security]") {
  TempDir tmp;
  fs::create_directories(tmp.file("trusted/alice"));
  generate_keypair(tmp.file("trusted/alice/alice.pem"));
  SigningKey alice = SigningKey::load(tmp.file("trusted/alice/alice.pem"));
  StoreTrust trust = load_store_trust({}, tmp.file("trusted"), false);
  REQUIRE(trust.tenant_keys.count("alice") == 1);
  Store s(tmp.file("st"), true);
  std::string good = artifact_of(tmp, "alice", "good.kvi", &alice);
  StorePutResult p = s.put(good, trust);
  // Alice's key does not vouch for bob, and alice (who has keys) needs a signature.
  CHECK(reason_of([&] { s.put(artifact_of(tmp, "bob", "bob.kvi", &alice), trust); }) == "UNTRUSTED_KEY");
  CHECK(reason_of([&] { s.put(artifact_of(tmp, "alice", "bare.kvi"), trust); }) == "SIGNATURE_REQUIRED");
  CHECK(s.put(artifact_of(tmp, "bob", "bob-bare.kvi"), trust).signer.empty());  // bob has no keys: as `load`
  CHECK(s.get(key_for(p), trust).object == p.object);
  // Listing is per tenant.
  CHECK(s.ls("alice").refs.size() == 1);
  CHECK(s.ls("bob").refs.size() == 1);
  CHECK(s.ls("").refs.size() == 2);
}

TEST_CASE("finding 6: objects and refs are private unless the store is group-shared", "[security]") {
  TempDir tmp;
  std::string art = artifact_of(tmp, "acme", "a.kvi");
  StorePutResult p = Store(tmp.file("st"), true).put(art, StoreTrust{});
  CHECK(mode_of(p.path) == 0600);
  CHECK(mode_of(tmp.file("st")) == 0700);
  CHECK(mode_of(tmp.file("st/objects/" + p.object.substr(0, 2))) == 0700);
  CHECK(mode_of(tmp.file("st/refs")) == 0700);
  for (const auto& e : fs::directory_iterator(tmp.file("st/refs"))) CHECK(mode_of(e.path().string()) == 0600);
  StoreCreateOptions shared;
  shared.group_shared = true;
  StorePutResult q = Store(tmp.file("gst"), true, shared).put(art, StoreTrust{});
  CHECK(mode_of(q.path) == 0640);
  CHECK(mode_of(tmp.file("gst/objects/" + q.object.substr(0, 2))) == 0750);
  // The option is recorded at creation: later opens keep it.
  fs::remove(q.path);
  CHECK(mode_of(Store(tmp.file("gst"), true).put(art, StoreTrust{}).path) == 0640);
}

TEST_CASE("finding 7: parse_store_ref refuses damaged refs with STORE_CORRUPT", "[security]") {
  StoreRef r;
  r.key.tenant = "acme";
  r.key.model = r.key.adapter = r.key.prefix_hash = std::string(64, 'a');
  r.key.kind = "pq";
  r.key.params_digest = std::string(64, 'b');
  r.object = std::string(64, 'c');
  r.content_digest = "sha256:x";
  r.created = 5;
  std::string good = r.to_json().dump();
  CHECK(parse_store_ref(good).to_json() == r.to_json());
  auto edited = [&](const std::function<void(json&)>& f) {
    json j = r.to_json();
    f(j);
    return j.dump();
  };
  for (const std::string& bad :
       {std::string("{\"key\":5}"), edited([](json& j) { j["object"] = 5; }),
        edited([](json& j) { j["created"] = "x"; }), edited([](json& j) { j["key"]["tenant"] = "../x"; }),
        edited([](json& j) { j["object"] = std::string(64, 'C'); }), edited([](json& j) { j.erase("coverage_end"); }),
        edited([](json& j) { j["signer"] = 7; }), edited([](json& j) { j["created"] = 1.5; }),
        edited([](json& j) { j["schema_version"] = 2; }), std::string("[]"), std::string("not json"),
        std::string(100000, '['), std::string("{\"pad\":\"") + std::string(9000, 'x') + "\"}"}) {
    INFO(bad.substr(0, 80));
    CHECK(reason_of([&] { parse_store_ref(bad); }) == "STORE_CORRUPT");
  }
}

TEST_CASE("finding 7: one damaged ref does not break get, ls, rm or gc for other tenants", "[security]") {
  TempDir tmp;
  std::string art = artifact_of(tmp, "acme", "a.kvi");
  Store s(tmp.file("st"), true);
  StorePutResult p = s.put(art, StoreTrust{});
  write_text(tmp.file("st/refs/k.json"), "{\"key\":5}");
  write_text(tmp.file("st/refs/o.json"), "{\"object\":5}");
  write_text(tmp.file("st/refs/c.json"), "{\"created\":\"x\",\"key\":{}}");
  write_text(tmp.file("st/refs/deep.json"), std::string(2000, '[') + std::string(2000, ']'));
  write_text(tmp.file("st/refs/big.json"), std::string(1 << 20, ' '));
  REQUIRE(mkfifo(tmp.file("st/refs/fifo.json").c_str(), 0600) == 0);  // must not hang a reader
  fs::create_symlink("/etc/passwd", tmp.file("st/refs/link.json"));
  const size_t damaged = 7;
  StoreGetResult g = s.get(key_for(p), StoreTrust{});
  CHECK(g.object == p.object);
  CHECK(g.warnings.size() == damaged);
  StoreListing l = s.ls("acme");
  CHECK(l.refs.size() == 1);
  CHECK(l.warnings.size() == damaged);
  StoreGcResult gc = s.gc(1, 0);
  CHECK(gc.objects_removed == 0);
  CHECK(gc.warnings.size() == damaged);
  CHECK(s.rm(key_for(p)).refs_removed == 1);
  CHECK(fs::exists(tmp.file("st/refs/k.json")));  // reported, left for a person to look at
}

TEST_CASE("finding 8: put and gc never leave a dangling ref (stress)", "[security]") {
  TempDir tmp;
  std::string art = artifact_of(tmp, "acme", "a.kvi");
  Store setup(tmp.file("st"), true);
  StoreKey key = key_for(setup.put(art, StoreTrust{}));
  int dangling = 0;
  std::atomic<int> failed{0};
  for (int i = 0; i < 300; ++i) {
    Store s(tmp.file("st"));
    s.rm(key);  // the object is now unreferenced and old enough for gc with no grace
    std::atomic<int> ready{0};
    auto go = [&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {}
    };
    std::thread putter([&] {
      Store p(tmp.file("st"));
      go();
      if (reason_of([&] { p.put(art, StoreTrust{}); }) != "OK") failed.fetch_add(1);
    });
    std::thread collector([&] {
      Store c(tmp.file("st"));
      go();
      if (reason_of([&] { c.gc(0, 0); }) != "OK") failed.fetch_add(1);
    });
    putter.join();
    collector.join();
    if (reason_of([&] { s.get(key, StoreTrust{}); }) != "OK") ++dangling;
  }
  CHECK(dangling == 0);
  CHECK(failed.load() == 0);
}

TEST_CASE("finding 9: gc removes temporaries older than the grace period", "[security]") {
  TempDir tmp;
  std::string art = artifact_of(tmp, "acme", "a.kvi");
  Store s(tmp.file("st"), true);
  StorePutResult p = s.put(art, StoreTrust{});
  std::string shard = tmp.file("st/objects/" + p.object.substr(0, 2) + "/");
  std::string old_obj = shard + "." + p.object + ".kvi.tmp.12345.abcdef";
  std::string old_ref = tmp.file("st/refs/.x.json.tmp.YYYYYY");
  std::string young = shard + "." + p.object + ".kvi.tmp.999.young";
  for (const auto& f : {old_obj, old_ref, young}) write_text(f, "partial");
  age(old_obj, 7200);
  age(old_ref, 7200);
  StoreGcResult g = s.gc(0, 3600);
  CHECK(g.temps_removed == 2);
  CHECK(!fs::exists(old_obj));
  CHECK(!fs::exists(old_ref));
  CHECK(fs::exists(young));
  CHECK(fs::exists(p.path));
}

TEST_CASE("finding 9: AtomicOutput removes stale temporaries of its own output name", "[security]") {
  TempDir tmp;
  pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);  // a pid that is certainly gone
  std::string dead = tmp.file(".out.bin.tmp." + std::to_string(child) + ".killed");
  std::string legacy = tmp.file(".out.bin.tmp.Ab12Cd");  // an old name without a pid
  std::string live = tmp.file(".out.bin.tmp." + std::to_string(getpid()) + ".inflight");
  std::string other = tmp.file(".other.bin.tmp." + std::to_string(child) + ".x");
  for (const auto& f : {dead, legacy, live, other}) write_text(f, "partial");
  age(legacy, kStaleTempSeconds + 60);
  {
    AtomicOutput out(tmp.file("out.bin"), true);
    write_all(out.fd(), "ok", 2, "out.bin");
    out.commit();
  }
  CHECK(!fs::exists(dead));
  CHECK(!fs::exists(legacy));
  CHECK(fs::exists(live));   // its writer (this process) is running
  CHECK(fs::exists(other));  // another output's temporaries are not ours to judge
  CHECK(fs::file_size(tmp.file("out.bin")) == 2);
}
