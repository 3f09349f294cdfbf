// fuzz_rerank: budget x rerank at their bounds on the pinned pq and clusterkv artifacts
// (fixtures/pinned, admitted once): the settings text the C API and Python pass ("budget=B,
// rerank=F"), a query vector and host keys from the input. Budgets and factors come from a table
// of bounds (0, 1, the documented maxima 2^53 rows and rerank 1024, just past them, fractions near
// 0 and 1) or as raw text bytes; a finite answer must hold at most the budget's rows (or the
// indexed rows), each in range, once. A refusal with a reason is fine (fuzz_common.h).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/kinds.h"

#ifndef KVTOOL_FIXTURES_DIR
#error "KVTOOL_FIXTURES_DIR must name fixtures/ (fuzz/CMakeLists.txt)"
#endif

namespace {

struct Loaded {
  std::unique_ptr<kvtool::ArtifactReader> reader;
  std::unique_ptr<kvtool::SelectorSet> sel;
};

Loaded load(const char* name) {
  Loaded l;
  l.reader = std::make_unique<kvtool::ArtifactReader>(std::string(KVTOOL_FIXTURES_DIR) + "/pinned/" + name);
  kvtool::admit_artifact(*l.reader, {});
  l.sel = std::make_unique<kvtool::SelectorSet>(*l.reader);
  return l;
}

const char* const kBudgets[] = {"0",
                                "1",
                                "0.0",
                                "1.0",
                                "100%",
                                "1e-300",
                                "0.999999",
                                "2",
                                "64",
                                "1000000",
                                "9007199254740992",
                                "9007199254740993",
                                "1e308",
                                "-1",
                                "0.5",
                                "50%",
                                "100.0001%",
                                "nan",
                                "inf",
                                "4.9e-324",
                                "18446744073709551616"};
const char* const kReranks[] = {"1",     "1.0",   "1.0000001", "2", "1024", "1024.0001", "1025",
                                "0.999", "1e308", "nan",       "4", "1000", "-1",        "0"};

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n ? (--n, *p++) : 0; }
  std::string text(size_t max) {
    const size_t len = std::min<size_t>(byte() % (max + 1), n);
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len, n -= len;
    return s;
  }
  float number() {
    float f = 0;
    if (n >= 4) std::memcpy(&f, p, 4), p += 4, n -= 4;
    return f;
  }
};

std::string pick(Input& in, const char* const* table, size_t count) {
  const uint8_t b = in.byte();
  if (b < 224) return table[b % count];
  std::string s = in.text(24);  // raw bytes: the settings parser's own checks
  for (char& c : s)
    if (c == ',' || c == ' ' || c == '=') c = '_';
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Loaded pq = load("pq.kvi"), ckv = load("clusterkv.kvi");
  Input in{data, size};
  const Loaded& a = (in.byte() & 1) ? pq : ckv;
  const std::string budget = pick(in, kBudgets, sizeof kBudgets / sizeof *kBudgets);
  const std::string rerank = pick(in, kReranks, sizeof kReranks / sizeof *kReranks);
  try {
    const kvtool::SourceBinding& src = a.reader->source();
    const int64_t dim = src.geo.head_dim, end = src.coverage_end;
    auto params = a.sel->params(kvtool::parse_query_settings("budget=" + budget + ",rerank=" + rerank));
    std::vector<float> q(static_cast<size_t>(dim)), keys(static_cast<size_t>(end * dim));
    for (auto& x : q) x = in.number();
    const bool random_keys = in.byte() & 1;
    for (size_t i = 0; i < keys.size(); ++i)
      keys[i] = random_keys ? in.number() : static_cast<float>(static_cast<int>(i % 13) - 6) * 0.1f;
    const kvtool::KeyRows rows{keys.data(), end, dim};
    const auto rc = a.sel->query(0, 0, q.data(), end - 1, *params, &rows);
    std::set<int64_t> seen;
    for (int64_t id : rc.candidates)
      if (id < 0 || id >= end || !seen.insert(id).second) {
        std::fprintf(stderr, "fuzz finding: candidate %lld out of range or repeated\n", static_cast<long long>(id));
        std::abort();
      }
    const auto* bp = dynamic_cast<const kvtool::BudgetParams*>(params.get());
    if (bp && static_cast<int64_t>(rc.candidates.size()) > bp->budget.rows(rc.indexed_rows)) {
      std::fprintf(stderr, "fuzz finding: %zu candidates for a budget of %lld rows\n", rc.candidates.size(),
                   static_cast<long long>(bp->budget.rows(rc.indexed_rows)));
      std::abort();
    }
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
