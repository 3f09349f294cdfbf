#include "stdin_input.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvtool/atomic_file.h"
#include "kvtool/error.h"

namespace kvtool::cli {

namespace {

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// Copies all of fd `in` to fd `out` in 1 MiB blocks (bounded memory whatever the input's size).
void copy_all(int in, int out, const std::string& dir) {
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    KVT_CHECK(n >= 0, IO_ERROR, "cannot read standard input: " << std::strerror(errno));
    if (n == 0) return;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(out, buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      KVT_CHECK(w > 0, IO_ERROR,
                "cannot copy standard input into a temporary file in '" << dir << "': " << std::strerror(errno));
      off += w;
    }
  }
}

}  // namespace

InputFile::InputFile(const std::string& arg) : path_(arg) {
  if (arg != "-") return;
  KVT_CHECK(!isatty(STDIN_FILENO), USAGE,
            "'-' reads the file from standard input, which is a terminal: pipe or "
            "redirect a file into it (e.g. kvtool inspect - < index.kvi)");
  const std::string dir = temp_dir();
  spool_ = std::make_unique<AtomicOutput>(dir + "/kvtool-stdin");
  copy_all(STDIN_FILENO, spool_->fd(), dir);
  spool_->release_fd();
  path_ = spool_->temp_path();
}

InputFile::~InputFile() = default;

}  // namespace kvtool::cli
