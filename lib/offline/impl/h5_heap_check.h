// Variable-length strings read without letting libhdf5 follow the global heap (formats/kvdump-v1.md,
// "Storage and limits").
#pragma once
#include <hdf5.h>

#include <string>

namespace kvtool::h5 {

// The value of the single variable-length string held by attribute `attr` (named `name`, for
// messages). HDF5 hands over only the attribute's stored heap reference (sequence length, collection
// address, object index); the string is then read from the file here, after its global heap
// collection has been checked to be well formed and to lie inside the file. A collection that lies
// is [NOT_A_DUMP]; a NUL inside the string is [BAD_ATTRIBUTE]. Caller holds h5_mutex().
std::string read_vlen_string_attr(hid_t attr, const char* name);

}  // namespace kvtool::h5
