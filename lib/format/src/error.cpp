#include "kvtool/error.h"

#include <new>

namespace kvtool {

const std::vector<ReasonInfo>& all_reasons() {
  static const std::vector<ReasonInfo> reasons = {
#define KVT_REASON(NAME, EXIT, MEANING) {Reason::NAME, #NAME, ExitCode::EXIT, MEANING},
#include "kvtool/reasons.def"
#undef KVT_REASON
  };
  return reasons;
}

const ReasonInfo& reason_info(Reason r) {
  // The table is in enum order (both come from reasons.def), so the enum value is the index.
  return all_reasons()[static_cast<size_t>(r)];
}

std::optional<Reason> reason_from_name(std::string_view name) {
  for (const auto& r : all_reasons())
    if (name == r.code) return r.reason;
  return std::nullopt;
}

Error error_from_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err;
  } catch (const std::bad_alloc&) {
    return Error(Reason::OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& ex) {
    return Error(Reason::INTERNAL, std::string("unexpected error: ") + ex.what());
  } catch (...) {
    return Error(Reason::INTERNAL, "unexpected error");
  }
}

}  // namespace kvtool
