// "-" as an input file: the command line's convention for "read standard input". kvtool's readers
// need random access (the artifact footer, HDF5's superblock) and libhdf5 needs a path, so stdin
// that is not a regular file is copied, streaming, into an anonymous temporary file in $TMPDIR
// (else /tmp) and the library is given its /proc/self/fd path. The temporary has no name from the
// moment it exists (O_TMPFILE, or a name unlinked at once), so nothing is left behind whatever ends
// the command, SIGKILL included. libhdf5 cannot open a file without a name, so an HDF5 stream is
// copied into a private folder that a helper process removes when the command ends, SIGKILL
// included. Before anything is copied, the first bytes must be the magic of a
// file the command reads (kvi, HDF5, llama.cpp state): anything else (e.g. /dev/zero) is refused at
// once. The copy stops at a byte limit. The library itself never reads stdin (docs/architecture.md).
#pragma once
#include <CLI/CLI.hpp>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace kvtool::cli {

// The default --stdin-limit: larger inputs are better given by path (no copy at all).
inline constexpr int64_t kDefaultStdinLimit = int64_t{16} << 30;

// Adds --stdin-limit SIZE (default 16G) to a command that takes "-", stored in `text`.
void add_stdin_limit_option(CLI::App* sub, std::string& text);

class InputFile {
 public:
  // `arg` is a path (used as is) or "-" (stdin; USAGE when stdin is a terminal, UNKNOWN_FILE_TYPE
  // when its first bytes are no known magic, IO_ERROR when it is over `limit` bytes or the
  // temporary directory cannot hold it).
  explicit InputFile(const std::string& arg, int64_t limit = kDefaultStdinLimit);
  // The same, with the limit given as --stdin-limit's text (512M, 16G; USAGE when not a size).
  InputFile(const std::string& arg, const std::string& limit);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // What to open: the argument, or the /proc/self/fd path of standard input or of its copy.
  const std::string& path() const { return path_; }

 private:
  int spool_fd_ = -1;
  std::string path_;
  std::string folder_, file_;  // an HDF5 stream's named copy
  int reaper_fd_ = -1;         // the pipe whose end tells the reaper to remove it
  pid_t reaper_ = -1;
};

}  // namespace kvtool::cli
