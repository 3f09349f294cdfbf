// The rules for a command's output path, shared by every command that writes a file (import,
// build, append, merge, export, synth, dump): the library's AtomicOutput applies the same check.
#pragma once
#include <string>

namespace kvtool {

// OUTPUT_EXISTS when `path` exists (a symlink, even a dangling one, counts), with the message
// AtomicOutput(path, overwrite=false) gives. For callers that must refuse before any work.
void refuse_existing_output(const std::string& path);

// True when `a` and `b` name the same existing file (same device and inode, through any path or
// symlink); false when either does not exist.
bool same_file(const std::string& a, const std::string& b);

}  // namespace kvtool
