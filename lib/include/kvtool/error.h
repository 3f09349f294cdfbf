// Error model of libkvtool: every failure carries a stable reason code and the exit code the
// command-line tools map it to (DESIGN.md §10). Reasons are strings so they stay stable across
// versions and can be printed and compared in JSON.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include "kvtool/export.h"

namespace kvtool {

enum class ExitCode : int { ok = 0, invalid = 1, usage = 2, io = 3, internal = 4 };

struct ReasonInfo {
  const char* code;
  ExitCode exit;
  const char* meaning;
};

// The full, documented list of reason codes (kvtool(1) prints it with --list-reasons).
KVTOOL_API const std::vector<ReasonInfo>& all_reasons();
KVTOOL_API ExitCode exit_code_for(const std::string& reason);

class KVTOOL_API Error : public std::runtime_error {
 public:
  Error(std::string reason, const std::string& message)
      : std::runtime_error(message), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }
  ExitCode exit_code() const { return exit_code_for(reason_); }

 private:
  std::string reason_;
};

}  // namespace kvtool

// Throwing check macros in the FAISS style: the message is built with a stream expression.
#define KVT_THROW(REASON, MSG)                 \
  do {                                         \
    std::ostringstream kvt_os_;                \
    kvt_os_ << MSG;                            \
    throw ::kvtool::Error(REASON, kvt_os_.str()); \
  } while (0)

#define KVT_CHECK(COND, REASON, MSG) \
  do {                               \
    if (!(COND)) KVT_THROW(REASON, MSG); \
  } while (0)
