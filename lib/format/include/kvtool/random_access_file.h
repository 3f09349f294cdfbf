// One regular file read at offsets, the primitive under every reader that takes a file's bytes
// where it needs them (the pool's image copy; the tensor, chunk, GGUF/state and HDF5 heap readers):
// reads retry EINTR and short reads, never go past the size the file had when it was opened (so a
// header's claim cannot make kvtool read beyond what it checked), and fail with kvtool's reasons
// (kvtool/error.h) naming the file.
//
// A reader of thousands of files may release() each one between reads; the next read reopens the
// path and refuses it unless it is still the same file (device, inode and size as at open), so a
// file replaced or resized behind kvtool's back is an error, not other bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvtool {

class RandomAccessFile {
 public:
  struct Options {
    // How messages name the file ("the GGUF file 'm.gguf'"); empty: the path in single quotes.
    std::string name;
    bool close_on_exec = true;  // O_CLOEXEC
    bool no_follow = false;     // O_NOFOLLOW: a symbolic link at the path is refused (IO_ERROR)
    // Ends reopen()'s message: "NAME was replaced or changed size while it was <activity>".
    std::string activity = "read";
  };

  // What pread_upto got: `got` bytes, and the errno of a failed read (0 when none failed; then
  // got < n means the file ended, or the request passed size()).
  struct Read {
    size_t got = 0;
    int error = 0;
  };

  // Opens `path` read-only. IO_ERROR "cannot open NAME: <strerror>", "cannot stat NAME", or "NAME is
  // not a regular file".
  explicit RandomAccessFile(std::string path);
  RandomAccessFile(std::string path, const Options& options);
  // A descriptor someone else opened and closes (HDF5's sec2 driver): read through, never closed,
  // released or reopened; its size is fstat's now (IO_ERROR "cannot stat NAME" otherwise).
  static RandomAccessFile borrow(int fd, std::string name);

  ~RandomAccessFile();
  RandomAccessFile(RandomAccessFile&& other) noexcept;
  RandomAccessFile& operator=(RandomAccessFile&& other) noexcept;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  const std::string& path() const { return path_; }  // empty for a borrowed descriptor
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }  // at open: no read goes past it
  bool is_open() const { return fd_ >= 0; }
  // The descriptor, reopened first if released (for callers that hand it on, e.g. to a decoder).
  int fd() const;

  // Closes the descriptor until the next read (or reopen()); a borrowed one stays open.
  void release() const;
  // Opens the path again if released: IO_ERROR "cannot open NAME: <strerror>", or "NAME was replaced
  // or changed size while it was <activity>" when it no longer names the file opened first.
  void reopen() const;

  // Up to n bytes at `offset` into out, bounded by size(): loops over short reads and EINTR and
  // stops at the end of the file or the first failed read, which it reports (no throw) so that a
  // caller keeps its own message. Reopens a released file first (which may throw, as reopen()).
  Read pread_upto(uint64_t offset, size_t n, void* out) const;
  // Exactly n bytes at `offset`: TRUNCATED "NAME is shorter than its headers say (SIZE bytes)" when
  // [offset, offset + n) passes size(); IO_ERROR "cannot read NAME: <strerror>" when a read fails;
  // TRUNCATED "NAME became shorter while it was read" when the file ends early.
  void pread_exact(uint64_t offset, size_t n, void* out) const;

 private:
  RandomAccessFile() = default;
  int open_path() const;  // the path's descriptor, or -1 with errno set

  std::string path_, name_, activity_;
  int flags_ = 0;
  bool owned_ = true;
  mutable int fd_ = -1;
  uint64_t size_ = 0, dev_ = 0, ino_ = 0;
};

}  // namespace kvtool
