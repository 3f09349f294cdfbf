#include "kvtool/random_access_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "kvtool/error.h"

namespace kvtool {

RandomAccessFile::RandomAccessFile(std::string path) : RandomAccessFile(std::move(path), Options{}) {}

RandomAccessFile::RandomAccessFile(std::string path, const Options& options)
    : path_(std::move(path)),
      name_(options.name.empty() ? "'" + path_ + "'" : options.name),
      activity_(options.activity),
      // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a regular
      // file); reads of a regular file ignore the flag.
      flags_(O_RDONLY | O_NONBLOCK | (options.close_on_exec ? O_CLOEXEC : 0) | (options.no_follow ? O_NOFOLLOW : 0)) {
  fd_ = open_path();
  KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot open " << name_ << ": " << std::strerror(errno));
  struct stat st {};
  const bool stated = fstat(fd_, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    KVT_CHECK(stated, IO_ERROR, "cannot stat " << name_);
    KVT_THROW(IO_ERROR, name_ << " is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  dev_ = static_cast<uint64_t>(st.st_dev);
  ino_ = static_cast<uint64_t>(st.st_ino);
}

RandomAccessFile RandomAccessFile::borrow(int fd, std::string name) {
  RandomAccessFile f;
  f.name_ = std::move(name);
  f.owned_ = false;
  struct stat st {};
  KVT_CHECK(fd >= 0 && fstat(fd, &st) == 0, IO_ERROR, "cannot stat " << f.name_);
  f.fd_ = fd;
  f.size_ = static_cast<uint64_t>(st.st_size);
  f.dev_ = static_cast<uint64_t>(st.st_dev);
  f.ino_ = static_cast<uint64_t>(st.st_ino);
  return f;
}

RandomAccessFile::~RandomAccessFile() { release(); }

RandomAccessFile::RandomAccessFile(RandomAccessFile&& other) noexcept
    : path_(std::move(other.path_)),
      name_(std::move(other.name_)),
      activity_(std::move(other.activity_)),
      flags_(other.flags_),
      owned_(other.owned_),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      dev_(other.dev_),
      ino_(other.ino_) {}

RandomAccessFile& RandomAccessFile::operator=(RandomAccessFile&& other) noexcept {
  if (this == &other) return *this;
  release();
  path_ = std::move(other.path_);
  name_ = std::move(other.name_);
  activity_ = std::move(other.activity_);
  flags_ = other.flags_;
  owned_ = other.owned_;
  fd_ = std::exchange(other.fd_, -1);
  size_ = other.size_;
  dev_ = other.dev_;
  ino_ = other.ino_;
  return *this;
}

int RandomAccessFile::open_path() const { return ::open(path_.c_str(), flags_); }

int RandomAccessFile::fd() const {
  reopen();
  return fd_;
}

void RandomAccessFile::release() const {
  if (fd_ < 0 || !owned_) return;
  ::close(fd_);
  fd_ = -1;
}

void RandomAccessFile::reopen() const {
  if (fd_ >= 0) return;
  const int f = open_path();
  KVT_CHECK(f >= 0, IO_ERROR, "cannot open " << name_ << ": " << std::strerror(errno));
  struct stat st {};
  const bool same = fstat(f, &st) == 0 && static_cast<uint64_t>(st.st_dev) == dev_ &&
                    static_cast<uint64_t>(st.st_ino) == ino_ && static_cast<uint64_t>(st.st_size) == size_;
  if (!same) ::close(f);
  KVT_CHECK(same, IO_ERROR, name_ << " was replaced or changed size while it was " << activity_);
  fd_ = f;
}

RandomAccessFile::Read RandomAccessFile::pread_upto(uint64_t offset, size_t n, void* out) const {
  reopen();
  const uint64_t left = offset < size_ ? size_ - offset : 0;
  const auto want = static_cast<size_t>(std::min<uint64_t>(n, left));
  auto* p = static_cast<uint8_t*>(out);
  Read r;
  while (r.got < want) {
    const ssize_t k = ::pread(fd_, p + r.got, want - r.got, static_cast<off_t>(offset + r.got));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      r.error = errno;
      break;
    }
    if (k == 0) break;  // the file ended before size(): it shrank since it was opened
    r.got += static_cast<size_t>(k);
  }
  return r;
}

void RandomAccessFile::pread_exact(uint64_t offset, size_t n, void* out) const {
  KVT_CHECK(offset <= size_ && n <= size_ - offset, TRUNCATED,
            name_ << " is shorter than its headers say (" << size_ << " bytes)");
  const Read r = pread_upto(offset, n, out);
  KVT_CHECK(r.error == 0, IO_ERROR, "cannot read " << name_ << ": " << std::strerror(r.error));
  KVT_CHECK(r.got == n, TRUNCATED, name_ << " became shorter while it was read");
}

}  // namespace kvtool
