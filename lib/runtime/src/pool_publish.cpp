// The publish transaction of the pool (kvtool/pool.h, docs/runtime.md): reserve the tiers' bytes,
// copy the artifact into the host tier, validate the copy, stage the device image and start its
// copy (begin); wait for it, read it back and swap the key's generation (commit); or cancel.
#include "kvtool/pool.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/random_access_file.h"
#include "kvtool/sha256.h"
#include "pool_internal.h"

namespace kvtool {

namespace {

using pool_internal::Charge;
using pool_internal::Clock;
using pool_internal::Fence;

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
constexpr uint64_t kDeviceAlign = 256;

int64_t sum_raw(const ArtifactReader& r) {
  int64_t n = 0;
  for (const auto& s : r.sections()) n += static_cast<int64_t>(s.raw_size);
  return n;
}

// Bound on the host bytes a selector set holds: twice the raw sections (widened f16, scratch), i8
// rows four times (held widened to f32), and a page per part.
int64_t selector_bound(const ArtifactReader& r, int64_t parts) {
  int64_t n = 2 * sum_raw(r) + 4096 * parts;
  for (const auto& s : r.sections())
    if (s.dtype == "i8") n += 2 * static_cast<int64_t>(s.raw_size);
  return n;
}

// Charges host/device bytes, evicting unleased published generations least recently used first.
std::unique_ptr<Charge> reserve(const std::shared_ptr<Pool::State>& st, int64_t host, int64_t device,
                                std::vector<std::string>& evicted) {
  const auto& o = st->opt;
  KVT_CHECK(host <= o.host_budget, HOST_BUDGET_EXCEEDED,
            "the host tier budget is " << o.host_budget << " bytes; this publication needs " << host);
  KVT_CHECK(device <= o.device_budget, DEVICE_BUDGET_EXCEEDED,
            "the device tier budget is " << o.device_budget << " bytes; this publication needs " << device);
  std::unique_lock<std::mutex> l(st->mu);
  for (;;) {
    bool host_ok = st->host_used + host <= o.host_budget, dev_ok = st->device_used + device <= o.device_budget;
    if (host_ok && dev_ok) {
      st->host_used += host;
      st->device_used += device;
      return std::make_unique<Charge>(st, host, device);
    }
    std::string victim;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [k, g] : st->visible) {
      if (g.use_count() != 1) continue;  // leased: never evicted
      int64_t gh = 0, gd = 0;
      for (const auto& c : g->charges) gh += c->host(), gd += c->device();
      if (!((!host_ok && gh > 0) || (!dev_ok && gd > 0))) continue;
      uint64_t lu = g->last_used.load();
      if (lu < oldest) oldest = lu, victim = k;
    }
    if (victim.empty()) {
      int64_t used = host_ok ? st->device_used : st->host_used, budget = host_ok ? o.device_budget : o.host_budget;
      KVT_THROW(
          host_ok ? DEVICE_BUDGET_EXCEEDED : HOST_BUDGET_EXCEEDED,
          "the " << (host_ok ? "device" : "host") << " tier has " << budget - used << " of " << budget
                 << " bytes free and every generation holding the rest is leased or retiring; this publication needs "
                 << (host_ok ? device : host));
    }
    std::shared_ptr<Generation> g = std::move(st->visible[victim]);
    st->visible.erase(victim);
    evicted.push_back(victim);
    l.unlock();
    g.reset();  // frees outside the lock (its charge takes the lock)
    l.lock();
  }
}

// The size n is stat()'s, taken just before (read_host_image). pread_upto, not pread_exact: a short
// read keeps the pool's own message and reason (IO_ERROR, "file shrank"); opened, as ever, without
// O_CLOEXEC.
void read_file_into(const std::string& path, uint8_t* dst, size_t n) {
  RandomAccessFile::Options opt;
  opt.close_on_exec = false;
  const RandomAccessFile file(path, opt);
  const RandomAccessFile::Read r = file.pread_upto(0, n, dst);
  KVT_CHECK(r.got == n, IO_ERROR,
            "reading '" << path << "' failed after " << r.got << " of " << n << " bytes"
                        << (r.error ? std::string(": ") + std::strerror(r.error) : std::string(" (file shrank)")));
}

void cancel_work(const std::shared_ptr<Pool::State>& st, std::shared_ptr<PublishTicket::Work> w) {
  if (!w || w->done) return;
  std::unique_lock<std::mutex> l(st->mu);
  w->done = true;
  st->free_slot(w->fence);
  if (w->transfer && !w->transfer->ready()) {
    st->orphans.push_back(std::move(w));  // buffers return when the copy lands (reap)
    return;
  }
  l.unlock();
  w.reset();
}

// The phases of Pool::begin, in order.

// The request with its artifact resolved: a store key is looked up (and admitted) in the store.
PublishRequest resolve_request(const PublishRequest& req) {
  PublishRequest rq = req;
  if (req.artifact.empty()) {
    KVT_CHECK(!req.store_dir.empty(), USAGE, "give an artifact path or a store directory and key");
    rq.artifact = Store(req.store_dir).get(req.store_key, req.trust).path;  // admitted on get, and again later
    if (rq.tenant.empty()) rq.tenant = req.store_key.tenant;
  }
  return rq;
}

// Reserves the artifact's bytes in the host tier and reads the file into the generation's image;
// returns its size.
size_t read_host_image(const std::shared_ptr<Pool::State>& st, const std::string& path, Generation& g,
                       std::vector<std::string>& evicted) {
  struct stat sb {};
  KVT_CHECK(stat(path.c_str(), &sb) == 0, IO_ERROR, "cannot open '" << path << "': " << std::strerror(errno));
  KVT_CHECK(S_ISREG(sb.st_mode), IO_ERROR, "'" << path << "' is not a regular file");
  const size_t size = static_cast<size_t>(sb.st_size);
  g.charges.push_back(reserve(st, static_cast<int64_t>(size), 0, evicted));
  g.image.allocate(st->opt.device, false, size);
  read_file_into(path, g.image.p, size);
  return size;
}

// A ticket id for the publication and a slot that fences it (free_slot); counted in flight.
uint64_t take_ticket(Pool::State& st, Fence& fence) {
  std::lock_guard<std::mutex> l(st.mu);
  const uint64_t id = st.next_ticket++;
  size_t slot = 0;
  while (slot < st.slots.size() && st.slots[slot].owner != 0) ++slot;
  if (slot == st.slots.size()) st.slots.emplace_back();
  auto& s = st.slots[slot];
  ++s.alloc_gen;
  s.owner = id;
  ++s.transfer_gen;
  fence = Fence{slot, s.alloc_gen, s.owner, s.transfer_gen};
  st.in_flight.insert(id);
  return id;
}

// Validates the copy (not the file): container, sections, signature, tenant, content, kind, and
// that the key does not serve a newer index generation. Returns the artifact's kind.
const KindSpec& admit_image(Pool::State& st, const PublishRequest& rq, Generation& g, size_t size) {
  g.reader = std::make_unique<ArtifactReader>(g.image.p, size, rq.artifact);
  // Admission decompresses each zstd section once, checks it and keeps the raw bytes for the
  // kind validation, the selectors and the device staging, which copy them instead of
  // decompressing again; released as soon as those are built. The transient peak is therefore
  // the raw bytes plus the selectors' copy (bounded by the reader's memory budget; above it,
  // admission streams and every read decompresses as before).
  g.reader->retain_sections();
  const ArtifactReader& r = *g.reader;
  const KindSpec& kind = admit_artifact(r, rq.trust);  // signature, sections, kind structure
  const SourceBinding& src = r.source();
  KVT_CHECK(rq.tenant.empty() || src.id.tenant_namespace == rq.tenant, TENANT_MISMATCH,
            "'" << rq.artifact << "' belongs to tenant '" << src.id.tenant_namespace << "', not '" << rq.tenant << "'");
  KVT_CHECK(rq.expected_content_digest.empty() || src.content_digest == rq.expected_content_digest, CONTENT_MISMATCH,
            "'" << rq.artifact << "' is bound to content digest " << src.content_digest << ", not the expected "
                << rq.expected_content_digest);
  g.index_generation = r.manifest()["index_generation"];
  std::lock_guard<std::mutex> l(st.mu);
  auto it = st.visible.find(rq.key);
  KVT_CHECK(it == st.visible.end() || it->second->index_generation <= g.index_generation, STALE_GENERATION,
            "'" << rq.artifact << "' has index generation " << g.index_generation << " but '" << rq.key
                << "' already serves generation " << it->second->index_generation);
  return kind;
}

// Decompresses into the selectors (host queries). Their state is reserved at an upper bound
// before it is built (selectors widen u8/u16 codes and ids at most 2x; per-part bookkeeping; what
// the kind adds, KindSpec::selector_extra_bytes), then the reservation shrinks to what they measure. Kinds without
// queries (container-test) are published as bytes only and skip this.
void load_selectors(const std::shared_ptr<Pool::State>& st, const std::string& path, const KindSpec& kind,
                    Generation& g, std::vector<std::string>& evicted) {
  const ArtifactReader& r = *g.reader;
  const int64_t parts = static_cast<int64_t>(r.manifest()["kind_data"].value("parts", json::array()).size());
  const int64_t extra = kind.selector_extra_bytes ? kind.selector_extra_bytes(r) : 0;
  g.charges.push_back(reserve(st, selector_bound(r, parts) + extra, 0, evicted));
  g.sel = std::make_unique<SelectorSet>(r);
  g.sel->preload();
  const int64_t used = g.sel->resident_bytes();
  KVT_CHECK(used <= g.charges.back()->host(), INTERNAL,
            "selector state of '" << path << "' (" << used << " bytes) exceeds its reservation");
  g.charges.back()->shrink_host(used);
}

// An i8-rows section `s` (bytes `b`, rows = its first dimension) widened with the exponents of its
// part's exponent section (kvtool/half.h), which the kind's validation has checked.
std::vector<float> widen_i8_section(const ArtifactReader& r, const SectionEntry& s, std::span<const uint8_t> b) {
  const SectionEntry* x = r.find(i8_rows_exponent_section(s.name), s.layer, s.kv_head);
  KVT_CHECK(x && x->dtype == "i8" && !s.shape.empty() && x->shape == std::vector<int64_t>({s.shape[0]}), PART_INVALID,
            "section " << s.name << " of part (" << s.layer << ", " << s.kv_head << ") lacks its exponents");
  std::vector<uint8_t> scratch;
  const std::span<const uint8_t> e = r.section_view(*x, scratch);
  const auto rows = static_cast<size_t>(s.shape[0]);
  return widen_i8_rows(b.data(), e.data(), rows, rows ? b.size() / rows : 0);
}

// The device image: every section raw, 256-byte aligned, staged in pinned memory; the f16 and i8-row
// sections the kind's device path reads as f32 (KindSpec::device_f32_sections) widened. Reserves
// the device bytes and the staging buffer, maps each part's sections to their device addresses
// and sizes the device's batch buffers. Returns the image's size (the copy is the caller's).
uint64_t stage_device_image(const std::shared_ptr<Pool::State>& st, const KindSpec& kind, Generation& g,
                            PublishTicket::Work& w) {
  const ArtifactReader& r = *g.reader;
  auto widened = [&](const SectionEntry& s) {
    return (s.dtype == "f16" || s.dtype == "i8") &&
           std::find(kind.device_f32_sections.begin(), kind.device_f32_sections.end(), s.name) !=
               kind.device_f32_sections.end();
  };
  std::vector<uint64_t> off;
  uint64_t cur = 0;
  for (const auto& s : r.sections()) {
    cur = (cur + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
    off.push_back(cur);
    cur += widened(s) ? (s.dtype == "f16" ? 2 : 4) * s.raw_size : s.raw_size;
  }
  g.charges.push_back(reserve(st, 0, static_cast<int64_t>(cur), w.rc.evicted));
  w.staging_charge = reserve(st, static_cast<int64_t>(cur), 0, w.rc.evicted);
  g.dev.allocate(st->opt.device, true, cur);
  w.staging.allocate(st->opt.device, false, cur);
  std::memset(w.staging.p, 0, cur);
  std::vector<uint8_t> scratch;
  for (size_t i = 0; i < r.sections().size(); ++i) {
    const SectionEntry& s = r.sections()[i];
    const std::span<const uint8_t> b = r.section_view(s, scratch);  // the checked bytes, copied once
    if (widened(s)) {
      const std::vector<float> v = s.dtype == "f16" ? widen_f16_bytes(b.data(), b.size()) : widen_i8_section(r, s, b);
      if (!v.empty()) std::memcpy(w.staging.p + off[i], v.data(), v.size() * 4);
    } else if (!b.empty()) {
      std::memcpy(w.staging.p + off[i], b.data(), b.size());
    }
  }
  w.staged = sha256(w.staging.p, cur);
  if (!g.sel) return cur;
  // Each part's sections, at their device addresses, for the kinds' device paths.
  for (size_t i = 0; i < r.sections().size(); ++i) {
    const SectionEntry& s = r.sections()[i];
    if (s.layer < 0) continue;
    DevicePart& dp = g.dev_parts[{s.layer, s.kv_head}];
    dp.dev = st->opt.device.get();
    dp.sections.emplace_back(s.name, DeviceSection{g.dev.p + off[i], widened(s) ? "f32" : s.dtype, s.shape});
  }
  // The device's batch buffers sized now, for the largest batch a layer's query heads make.
  if (st->opt.device_batch_queries > 0)
    for (const auto& [lh, dp] : g.dev_parts)
      g.sel->part(lh.first, lh.second).reserve_device_batches(dp, st->opt.device_batch_queries);
  return cur;
}

}  // namespace

json PublishReceipt::to_json() const {
  return {{"key", key},
          {"kind", kind},
          {"generation", generation},
          {"index_generation", index_generation},
          {"replaced_generation", replaced_generation},
          {"content_digest", content_digest},
          {"manifest_sha256", manifest_sha256},
          {"bytes", {{"host", host_bytes}, {"device", device_bytes}}},
          {"seconds",
           {{"read", read_s},
            {"validate", validate_s},
            {"decompress", decompress_s},
            {"copy", copy_s},
            {"publish", publish_s}}},
          {"evicted", evicted}};
}

PublishTicket::~PublishTicket() {
  if (!w_) return;
  if (auto st = w_->st.lock()) cancel_work(st, std::move(w_));
}

PublishTicket& PublishTicket::operator=(PublishTicket&& o) noexcept {
  if (this != &o) {
    if (w_)
      if (auto st = w_->st.lock()) cancel_work(st, std::move(w_));
    w_ = std::move(o.w_);
    id_ = o.id_;
  }
  return *this;
}

PublishTicket Pool::begin(const PublishRequest& req) {
  reap();
  KVT_CHECK(!req.key.empty(), USAGE, "a pool key must not be empty");
  KVT_CHECK(!req.device || st_->opt.device, DEVICE_UNAVAILABLE,
            "the device tier was requested for '" << req.artifact << "' but this pool has no usable GPU");
  auto w = std::make_shared<PublishTicket::Work>();
  w->st = st_;
  w->req = resolve_request(req);
  const PublishRequest& rq = w->req;
  auto g = std::make_shared<Generation>();
  g->st = st_;
  g->key = rq.key;
  PublishReceipt& rc = w->rc;
  rc.key = rq.key;
  PoolHooks hooks;
  {
    std::lock_guard<std::mutex> l(st_->mu);
    hooks = st_->hooks;
  }

  auto t0 = Clock::now();
  const size_t size = read_host_image(st_, rq.artifact, *g, rc.evicted);
  auto t1 = Clock::now();
  rc.read_s = secs(t0, t1);

  const uint64_t id = take_ticket(*st_, w->fence);
  try {
    if (hooks.after_host_copy) hooks.after_host_copy(g->image.p, size);
    const KindSpec& kind = admit_image(*st_, rq, *g, size);
    auto t2 = Clock::now();
    rc.validate_s = secs(t1, t2);
    if (kind.load) load_selectors(st_, rq.artifact, kind, *g, rc.evicted);
    const uint64_t device_bytes = rq.device ? stage_device_image(st_, kind, *g, *w) : 0;
    g->reader->release_sections();
    rc.decompress_s = secs(t2, Clock::now());
    if (rq.device) {
      w->copy_start = Clock::now();
      w->transfer = st_->opt.device->copy_to_device(g->dev.p, w->staging.p, device_bytes);
    }
    w->gen = std::move(g);
  } catch (...) {
    std::lock_guard<std::mutex> l(st_->mu);
    st_->free_slot(w->fence);
    w->done = true;
    throw;
  }
  PublishTicket t;
  t.w_ = std::move(w);
  t.id_ = id;
  return t;
}

bool Pool::ready(const PublishTicket& t) { return t.w_ && (!t.w_->transfer || t.w_->transfer->ready()); }

PublishReceipt Pool::commit(PublishTicket& t) {
  auto w = t.w_;
  KVT_CHECK(w && !w->done, USAGE, "this publication was already committed or cancelled");
  PublishReceipt rc = w->rc;
  auto fail = [&](bool cancelled) {
    std::unique_lock<std::mutex> l(st_->mu);
    if (!cancelled) st_->free_slot(w->fence);
    w->done = true;
    l.unlock();
    t.w_.reset();
  };
  if (w->transfer) {
    w->transfer->wait();
    rc.copy_s = secs(w->copy_start, Clock::now());
  }
  {
    std::lock_guard<std::mutex> l(st_->mu);
    if (!st_->matches(w->fence)) {
      w->done = true;
      KVT_THROW(PUBLISH_CANCELLED, "the publication of '"
                                       << w->req.artifact << "' as '" << w->req.key
                                       << "' was cancelled or its slot was reused; nothing was published");
    }
  }
  std::shared_ptr<Generation> old;
  try {
    auto t0 = Clock::now();
    Generation& g = *w->gen;
    if (w->transfer) {
      PoolHooks hooks;
      {
        std::lock_guard<std::mutex> l(st_->mu);
        hooks = st_->hooks;
      }
      if (hooks.after_device_copy) hooks.after_device_copy(g.dev.p, g.dev.n);
      st_->opt.device->copy_to_host(w->staging.p, g.dev.p, g.dev.n);
      KVT_CHECK(sha256(w->staging.p, g.dev.n) == w->staged, DEVICE_COPY_MISMATCH,
                "the " << g.dev.n << " bytes that landed in device memory for '" << w->req.key
                       << "' differ from the validated host bytes; nothing was published");
      w->transfer.reset();
      w->staging.reset();
      w->staging_charge.reset();
    }
    auto t1 = Clock::now();
    rc.validate_s += secs(t0, t1);
    std::lock_guard<std::mutex> l(st_->mu);
    KVT_CHECK(st_->matches(w->fence), PUBLISH_CANCELLED,
              "the publication of '" << w->req.artifact << "' was cancelled while it was being validated");
    auto it = st_->visible.find(w->req.key);
    KVT_CHECK(it == st_->visible.end() || it->second->index_generation <= g.index_generation, STALE_GENERATION,
              "'" << w->req.artifact << "' has index generation " << g.index_generation << " but '" << w->req.key
                  << "' already serves generation " << it->second->index_generation);
    g.generation = st_->next_generation++;
    g.last_used = ++st_->tick;
    if (it != st_->visible.end()) {
      old = std::move(it->second);
      rc.replaced_generation = old->generation;
      st_->retiring.push_back(old);
    }
    st_->visible[w->req.key] = w->gen;
    st_->free_slot(w->fence);
    w->done = true;
    const ArtifactReader& r = *g.reader;
    rc.kind = r.kind();
    rc.content_digest = r.source().content_digest;
    rc.manifest_sha256 = to_hex(r.manifest_digest());
    rc.generation = g.generation;
    rc.index_generation = g.index_generation;
    for (const auto& c : g.charges) rc.host_bytes += c->host(), rc.device_bytes += c->device();
    rc.publish_s = secs(t1, Clock::now());
  } catch (...) {
    fail(false);
    throw;
  }
  t.w_.reset();
  old.reset();  // retired: freed now unless leased, else when its last lease ends
  return rc;
}

void Pool::cancel(PublishTicket& t) {
  cancel_work(st_, std::move(t.w_));
  t.w_.reset();
}

PublishReceipt Pool::publish(const PublishRequest& req) {
  PublishTicket t = begin(req);
  return commit(t);
}

}  // namespace kvtool
