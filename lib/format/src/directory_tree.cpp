#include "kvtool/directory_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "kvtool/error.h"

namespace kvtool {

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
constexpr int kFileFlags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;

// Closes a descriptor on scope exit.
struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

TreeEntry::Type type_of(mode_t m) {
  if (S_ISREG(m)) return TreeEntry::Type::file;
  if (S_ISDIR(m)) return TreeEntry::Type::directory;
  if (S_ISLNK(m)) return TreeEntry::Type::link;
  return TreeEntry::Type::other;
}

// The names in the directory `dfd`, sorted.
std::vector<std::string> names_in(int dfd, const std::string& what) {
  const int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
  KVT_CHECK(dup >= 0, IO_ERROR, "cannot read the directory " << what << ": " << std::strerror(errno));
  std::unique_ptr<DIR, int (*)(DIR*)> d(fdopendir(dup), &closedir);
  if (!d) {
    ::close(dup);
    KVT_THROW(IO_ERROR, "cannot read the directory " << what << ": " << std::strerror(errno));
  }
  rewinddir(d.get());  // a duplicate shares the offset an earlier listing left at the end
  std::vector<std::string> names;
  while (dirent* e = readdir(d.get())) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Walk {
  int max_depth;
  size_t max_entries;
  const std::string& root;
  std::vector<TreeEntry> out;

  void dir(int dfd, const std::string& prefix, int depth) {
    for (const std::string& name : names_in(dfd, "'" + root + "/" + prefix + "'")) {
      struct stat st {};
      if (fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // removed meanwhile
      KVT_CHECK(
          out.size() < max_entries, IO_ERROR,
          "'" << root << "' holds more than " << max_entries << " entries; no cache store kvtool reads is that large");
      TreeEntry e;
      e.path = prefix + name;
      e.type = type_of(st.st_mode);
      e.size = e.type == TreeEntry::Type::file ? static_cast<uint64_t>(st.st_size) : 0;
      e.links = static_cast<uint64_t>(st.st_nlink);
      e.device = static_cast<uint64_t>(st.st_dev), e.inode = static_cast<uint64_t>(st.st_ino);
      e.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      out.push_back(e);
      if (e.type != TreeEntry::Type::directory) continue;
      KVT_CHECK(depth < max_depth, IO_ERROR,
                "'" << root << "/" << e.path << "' is deeper than " << max_depth
                    << " levels; no cache store kvtool reads is");
      Fd sub(openat(dfd, name.c_str(), kDirFlags));
      if (sub.fd < 0 && errno == ENOENT) continue;
      KVT_CHECK(sub.fd >= 0, IO_ERROR,
                "cannot open the directory '" << root << "/" << e.path << "': " << std::strerror(errno));
      dir(sub.fd, e.path + "/", depth + 1);
    }
  }
};

}  // namespace

const char* tree_entry_type_name(TreeEntry::Type t) {
  switch (t) {
    case TreeEntry::Type::file:
      return "file";
    case TreeEntry::Type::directory:
      return "directory";
    case TreeEntry::Type::link:
      return "symbolic link";
    default:
      return "special file";
  }
}

DirectoryTree::DirectoryTree(const std::string& root) : root_(root) {
  fd_ = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot open the directory '" << root << "': " << std::strerror(errno));
}

DirectoryTree::~DirectoryTree() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<TreeEntry> DirectoryTree::list(int max_depth, size_t max_entries) const {
  Walk w{max_depth, max_entries, root_, {}};
  w.dir(fd_, "", 0);
  return std::move(w.out);
}

// The directory holding `rel`, reached component by component without following a link; the
// caller closes it. `leaf` gets the last component.
int DirectoryTree::open_parent(const std::string& rel, std::string& leaf) const {
  KVT_CHECK(!rel.empty() && rel.front() != '/', IO_ERROR, "'" << rel << "' is not a path inside '" << root_ << "'");
  int dfd = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  KVT_CHECK(dfd >= 0, IO_ERROR, "cannot open '" << root_ << "': " << std::strerror(errno));
  size_t start = 0;
  for (size_t slash; (slash = rel.find('/', start)) != std::string::npos; start = slash + 1) {
    const std::string part = rel.substr(start, slash - start);
    const int next = part.empty() || part == "." || part == ".." ? -1 : openat(dfd, part.c_str(), kDirFlags);
    const int err = errno;
    ::close(dfd);
    KVT_CHECK(
        next >= 0, IO_ERROR,
        "cannot open '" << root_ << "/" << rel << "': "
                        << (part.empty() || part[0] == '.' ? "not a path inside the directory" : std::strerror(err))
                        << " (links inside a store are never followed)");
    dfd = next;
  }
  leaf = rel.substr(start);
  return dfd;
}

int DirectoryTree::open_file(const std::string& rel) const {
  std::string leaf;
  Fd dir(open_parent(rel, leaf));
  const int fd = openat(dir.fd, leaf.c_str(), kFileFlags);
  const int err = errno;
  KVT_CHECK(fd >= 0, IO_ERROR,
            "cannot open '" << root_ << "/" << rel << "': " << std::strerror(err)
                            << (err == ELOOP ? " (a link: links inside a store are never followed)" : ""));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    KVT_THROW(IO_ERROR, "'" << root_ << "/" << rel << "' is not a regular file");
  }
  // O_NONBLOCK only kept a FIFO from blocking the open; regular files read the same either way.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

bool DirectoryTree::exists(const std::string& rel) const {
  try {
    std::string leaf;
    Fd dir(open_parent(rel, leaf));
    struct stat st {};
    return fstatat(dir.fd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  } catch (const Error&) {
    return false;  // a folder on the way is gone (or is no longer a folder)
  }
}

std::string DirectoryTree::read_small(const std::string& rel, size_t cap) const {
  TreeFile f(*this, rel);
  KVT_CHECK(f.file().size() <= cap, IO_ERROR,
            "'" << root_ << "/" << rel << "' is " << f.file().size() << " bytes; at most " << cap << " are read");
  std::string text(static_cast<size_t>(f.file().size()), '\0');
  f.file().pread_exact(0, text.size(), text.data());
  return text;
}

TreeFile::TreeFile(const DirectoryTree& tree, const std::string& rel)
    : fd_(tree.open_file(rel)), file_(RandomAccessFile::borrow(fd_, "'" + tree.root() + "/" + rel + "'")) {}

TreeFile::~TreeFile() { ::close(fd_); }

}  // namespace kvtool
