#include "stdin_input.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvtool/error.h"
#include "parse.h"

namespace kvtool::cli {

namespace {

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// Reads up to n bytes (fewer only at end of input).
size_t read_up_to(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    KVT_CHECK(r >= 0, IO_ERROR, "cannot read standard input: " << std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// Whether the first bytes are a kvi artifact's, an HDF5 file's or a llama.cpp state file's magic.
bool known_magic(const char* b, size_t n) {
  return (n >= 4 && (std::memcmp(b, "KVI1", 4) == 0 || std::memcmp(b, "qsgg", 4) == 0 ||
                     std::memcmp(b, "nsgg", 4) == 0 || std::memcmp(b, "\xd8\x3c\x14\xaf", 4) == 0)) ||
         (n >= 8 && std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0);
}

// An anonymous file in `dir`: O_TMPFILE where the file system has it, else a name removed at once.
int anonymous_file(const std::string& dir) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/.kvtool-stdin.XXXXXX";
  fd = mkostemp(name.data(), O_CLOEXEC);
  KVT_CHECK(fd >= 0, IO_ERROR,
            "cannot create a temporary file in '" << dir << "' to hold standard input: " << std::strerror(errno));
  unlink(name.c_str());
  return fd;
}

// A process that removes `file` and `folder` once this one ends, however it ends (SIGKILL too): it
// waits for end-of-file on a pipe whose write end (returned) only this process holds. It ignores
// the signals a terminal sends the whole process group, so that it lives to clean up.
int start_reaper(const std::string& file, const std::string& folder, pid_t& pid) {
  int p[2];
  KVT_CHECK(pipe2(p, O_CLOEXEC) == 0, IO_ERROR, "cannot create a pipe: " << std::strerror(errno));
  const char *f = file.c_str(), *d = folder.c_str();
  pid = fork();
  if (pid == 0) {  // async-signal-safe calls only: the parent may have threads
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    close(p[1]);
    char c;
    while (read(p[0], &c, 1) < 0 && errno == EINTR) {}
    unlink(f);
    rmdir(d);
    _exit(0);
  }
  close(p[0]);
  if (pid < 0) {
    close(p[1]);
    unlink(f);
    rmdir(d);
    KVT_THROW(IO_ERROR, "cannot start the process that removes standard input's copy: " << std::strerror(errno));
  }
  return p[1];
}

void write_all(int out, const char* p, size_t n, const std::string& dir) {
  while (n > 0) {
    const ssize_t w = write(out, p, n);
    if (w < 0 && errno == EINTR) continue;
    KVT_CHECK(w > 0, IO_ERROR,
              "cannot copy standard input into a temporary file in '" << dir << "': " << std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Copies the rest of fd `in` to `out` in 1 MiB blocks (bounded memory) while at most `limit`
// bytes in all, `done` of them already written.
void copy_capped(int in, int out, uint64_t done, uint64_t limit, const std::string& dir) {
  std::vector<char> buf(1 << 20);
  for (;;) {
    const size_t n = read_up_to(in, buf.data(), buf.size());
    if (n == 0) return;
    KVT_CHECK(n <= limit - done, IO_ERROR,
              "standard input is over " << limit << " bytes (--stdin-limit): give the file by its path instead");
    write_all(out, buf.data(), n, dir);
    done += n;
  }
}

}  // namespace

InputFile::InputFile(const std::string& arg, int64_t limit) : path_(arg) {
  if (arg != "-") return;
  KVT_CHECK(!isatty(STDIN_FILENO), USAGE,
            "'-' reads the file from standard input, which is a terminal: pipe or "
            "redirect a file into it (e.g. kvtool inspect - < index.kvi)");
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode)) {
    path_ = "/proc/self/fd/0";  // a redirected file is read in place: no copy, no limit needed
    return;
  }
  char head[8];
  const size_t n = read_up_to(STDIN_FILENO, head, sizeof head);
  KVT_CHECK(known_magic(head, n), UNKNOWN_FILE_TYPE,
            "standard input does not start like a kvdump (HDF5), a kvi artifact or a llama.cpp state file");
  const std::string dir = temp_dir();
  if (n == 8 && std::memcmp(head, "\x89HDF", 4) == 0) {
    // libhdf5 resolves a symlink such as /proc/self/fd/N with realpath(), which fails for a file
    // without a name: an HDF5 stream gets a named copy in a private folder, removed by a reaper.
    folder_ = dir + "/.kvtool-stdin.XXXXXX";
    KVT_CHECK(mkdtemp(folder_.data()), IO_ERROR,
              "cannot create a temporary folder in '" << dir << "' to hold standard input: " << std::strerror(errno));
    file_ = folder_ + "/stdin.h5";
    spool_fd_ = open(file_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (spool_fd_ < 0) rmdir(folder_.c_str());
    KVT_CHECK(spool_fd_ >= 0, IO_ERROR,
              "cannot create a temporary file in '" << folder_ << "': " << std::strerror(errno));
    reaper_fd_ = start_reaper(file_, folder_, reaper_);
  } else {
    spool_fd_ = anonymous_file(dir);
  }
  write_all(spool_fd_, head, n, dir);
  copy_capped(STDIN_FILENO, spool_fd_, n, static_cast<uint64_t>(limit), dir);
  path_ = file_.empty() ? "/proc/self/fd/" + std::to_string(spool_fd_) : file_;
}

InputFile::InputFile(const std::string& arg, const std::string& limit)
    : InputFile(arg, [&] {
        const int64_t v = parse_bytes(limit);
        KVT_CHECK(v > 0, USAGE, "--stdin-limit must be a positive size such as 512M or 16G");
        return v;
      }()) {}

void add_stdin_limit_option(CLI::App* sub, std::string& text) {
  sub->add_option("--stdin-limit", text,
                  "with FILE '-': the most bytes of standard input copied to a temporary file (piped input only; "
                  "a redirected file is read in place)")
      ->capture_default_str();
}

InputFile::~InputFile() {
  if (spool_fd_ >= 0) close(spool_fd_);
  if (reaper_fd_ >= 0) {
    close(reaper_fd_);  // the reaper removes the copy and exits
    waitpid(reaper_, nullptr, 0);
  }
}

}  // namespace kvtool::cli
