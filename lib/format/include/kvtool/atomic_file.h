// Atomic output files: write to a temporary file in the target directory, fsync, rename.
// The temporary is removed when the object dies uncommitted and on SIGINT/SIGTERM, so a failed
// or killed command never leaves a partial file at the output path.
#pragma once
#include <string>

namespace kvtool {

// Installs SIGINT/SIGTERM handlers that unlink every live temporary, then re-raise the signal.
void install_cleanup_handlers();

class AtomicOutput {
 public:
  // Creates the temporary next to `final_path`. With overwrite=false an existing final path is
  // refused (OUTPUT_EXISTS) before anything is written.
  explicit AtomicOutput(std::string final_path, bool overwrite = true);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  int fd() const { return fd_; }
  // Closes our descriptor (for libraries such as HDF5 that open the path themselves).
  void release_fd();
  // fsync + rename onto the final path + fsync of the directory.
  void commit();
  // Removes the temporary now.
  void abandon();

 private:
  std::string final_, temp_;
  int fd_ = -1;
  int slot_ = -1;
  bool done_ = false;
};

// Full write with EINTR handling; throws IO_ERROR (e.g. disk full).
void write_all(int fd, const void* data, size_t n, const std::string& what);

}  // namespace kvtool
