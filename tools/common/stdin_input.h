// "-" as an input file: the command line's convention for "read standard input". kvtool's readers
// need random access (the artifact footer, HDF5's superblock) and libhdf5 needs a real path, so
// stdin is first copied, streaming, into a private temporary file in $TMPDIR (else /tmp) and the
// library is given that path. The temporary is an uncommitted AtomicOutput: removed when the
// command ends, on SIGINT/SIGTERM, and (after SIGKILL) by the next run. The library itself never
// reads stdin (docs/architecture.md).
#pragma once
#include <memory>
#include <string>

namespace kvtool {
class AtomicOutput;
}

namespace kvtool::cli {

class InputFile {
 public:
  // `arg` is a path (used as is) or "-" (stdin; USAGE when stdin is a terminal, IO_ERROR when the
  // temporary directory cannot hold it).
  explicit InputFile(const std::string& arg);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // What to open: the argument, or the temporary holding stdin.
  const std::string& path() const { return path_; }

 private:
  std::unique_ptr<AtomicOutput> spool_;
  std::string path_;
};

}  // namespace kvtool::cli
