// The runtime pool's device tier checked end to end: the committed artifacts of
// tests/gpu/data (one per kind) are published into a host-only Pool and into a Pool whose device tier
// is the given DeviceBackend, queried with many query vectors and settings, and every receipt is
// compared with (a) the host tier's and (b) an independent brute-force scorer written from
// formats/kinds-v1.md with plain loops over the decoded sections (no kvtool::scoring function).
// Only ties at a budget's selection boundary may differ. Needs the format and runtime layers only
// (no HDF5, no FAISS), so it links into a static binary for the device machine (tests/gpu/run.sh).
#pragma once
#include <memory>
#include <ostream>
#include <string>

#include "kvtool/device.h"

namespace kvtool::gpucheck {

// A deliberate error the self-test injects into the device backend's answers; the check must see
// each one (proof that it can fail).
enum class Fault { none, pq, clusterkv, lsh, squeeze };

// Runs every check (of every kind, or of `only_kind`), writes one "ok"/"FAIL" line per (artifact,
// setting) to `report`; returns the number of failed checks. `in_batches_only`: the fault is
// injected into the device's batched answers only (single queries stay right).
int run_pool_checks(std::shared_ptr<DeviceBackend> device, const std::string& data_dir, std::ostream& report,
                    Fault fault = Fault::none, const std::string& only_kind = "", bool in_batches_only = false);

// Runs each kind's checks once more with that kind's fault injected, into every device answer and
// then into the batched ones only; returns the number of faults the checks did NOT detect (0 =
// every injected error was caught).
int run_fault_self_test(std::shared_ptr<DeviceBackend> device, const std::string& data_dir, std::ostream& report);

}  // namespace kvtool::gpucheck
