// A directory tree another program wrote (a cache store: formats/cache-stores.md), listed without
// ever following a link: the root is the user's path (it may be a link), and everything below it
// is reached relative to directory descriptors opened with O_NOFOLLOW, so a link, FIFO, socket or
// device inside the tree is reported for what it is and never opened. Files are opened the same
// way (openat + O_NOFOLLOW + O_NONBLOCK), so a FIFO planted under a block's name cannot hang a
// reader and a link planted there cannot redirect it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kvtool/random_access_file.h"

namespace kvtool {

struct TreeEntry {
  enum class Type { file, directory, link, other };
  std::string path;  // relative to the root, '/'-separated
  Type type = Type::other;
  uint64_t size = 0;   // regular files
  uint64_t links = 1;  // st_nlink: a block file with more than one name is reported
  uint64_t device = 0, inode = 0;
  int64_t mtime_ns = 0;
};

const char* tree_entry_type_name(TreeEntry::Type t);

class DirectoryTree {
 public:
  // Opens `root` (IO_ERROR when it cannot be opened or is not a directory).
  explicit DirectoryTree(const std::string& root);
  ~DirectoryTree();
  DirectoryTree(const DirectoryTree&) = delete;
  DirectoryTree& operator=(const DirectoryTree&) = delete;

  const std::string& root() const { return root_; }

  // Every entry below the root, depth first, each directory's entries sorted by name; directories
  // are listed and descended into, other types only listed. At most `max_depth` levels and
  // `max_entries` entries (IO_ERROR beyond: a store deeper or larger than any stack writes is
  // refused before it exhausts memory). An entry removed between listing and stat is skipped.
  std::vector<TreeEntry> list(int max_depth, size_t max_entries) const;

  // The regular file at `rel` (a path list() returned), opened through the tree without following
  // any link: the descriptor, which the caller closes (TreeFile does). IO_ERROR when it is gone, a
  // link or not a regular file.
  int open_file(const std::string& rel) const;

  // Whether an entry is at `rel` now (of any type, never following a link): a file that cannot be
  // opened is told apart from one removed since the listing (a live store's eviction).
  bool exists(const std::string& rel) const;

  // Up to `cap` bytes of the small regular file at `rel` (IO_ERROR past `cap`).
  std::string read_small(const std::string& rel, size_t cap) const;

 private:
  int open_parent(const std::string& rel, std::string& leaf) const;
  std::string root_;
  int fd_ = -1;
};

// A file of a tree, open for reading (closed on destruction); `file` reads it at offsets.
class TreeFile {
 public:
  TreeFile(const DirectoryTree& tree, const std::string& rel);
  ~TreeFile();
  TreeFile(const TreeFile&) = delete;
  TreeFile& operator=(const TreeFile&) = delete;
  const RandomAccessFile& file() const { return file_; }
  int fd() const { return fd_; }

 private:
  int fd_;
  RandomAccessFile file_;
};

}  // namespace kvtool
