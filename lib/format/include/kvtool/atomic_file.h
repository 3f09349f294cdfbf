// Atomic output files: write to a temporary file in the target directory, fsync, rename.
// The temporary is removed when the object dies uncommitted and on SIGINT/SIGTERM, so a failed
// or killed command never leaves a partial file at the output path.
//
// Temporaries are named `.NAME.tmp.<pid>.<random>`. A writer killed with SIGKILL cannot clean up,
// so every AtomicOutput first removes stale temporaries of its own output name: regular files we
// own whose recorded pid is no running process, or that are older than kStaleTempSeconds (which
// also covers writers on other machines and names without a pid).
#pragma once
#include <cstdint>
#include <string>

namespace kvtool {

inline constexpr int64_t kStaleTempSeconds = 3600;

// Installs SIGINT/SIGTERM handlers that unlink every live temporary, then re-raise the signal.
void install_cleanup_handlers();

class AtomicOutput {
 public:
  // Creates the temporary next to `final_path`. With overwrite=false an existing final path is
  // refused (OUTPUT_EXISTS) before anything is written.
  explicit AtomicOutput(std::string final_path, bool overwrite = true);
  // The same relative to the directory `dir_fd` (duplicated; the caller keeps its own): `name` is
  // one path component, never followed if it is a symlink, and the file gets exactly `mode`
  // (the prefix store's form; the path form gives the umask-derived mode).
  AtomicOutput(int dir_fd, const std::string& name, bool overwrite, int mode);
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
  void open_temp(const std::string& dir_display);
  std::string final_, temp_;  // for messages and temp_path(): the directory as given + the name
  std::string name_, temp_name_;
  int dir_fd_ = -1;
  int fd_ = -1;
  int mode_ = -1;  // -1: 0666 & ~umask
  int slot_ = -1;
  bool done_ = false;
};

// True for a name AtomicOutput gives its temporaries (`.NAME.tmp.*`).
bool is_temp_name(const std::string& name);

// Full write with EINTR handling; throws IO_ERROR (e.g. disk full).
void write_all(int fd, const void* data, size_t n, const std::string& what);

}  // namespace kvtool
