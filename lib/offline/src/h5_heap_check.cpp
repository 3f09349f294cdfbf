// Variable-length string attributes read from their global heap collection by kvtool, not by
// libhdf5 (formats/kvdump-v1.md, "Storage and limits").
//
// Why: libhdf5 1.10 trusts a collection's object sizes and the attribute's object index. H5HG_read
// copies the size the collection claims into a buffer sized by the attribute's own length claim, and
// indexes its object table with the attribute's index unchecked; one flipped byte of a 22 KB dump
// made it copy a GiB past a 4 KiB buffer (fuzz/crashes/dump-hdf5-global-heap-vlen-attr.h5).
//
// Why not a whole-file scan for "GCOL" collections: it costs a read of the whole file on every open,
// K/V data can hold the signature by chance (float16 pairs), so a genuine dump could be refused,
// and a valid collection does not make the attribute's own length or index true. Why not a forked
// reader: a copy that does not crash may still read past the buffer and return other memory as the
// string. Here HDF5 hands over only the stored reference, and the one collection it names is
// checked whole before a byte of the string is used; HDF5 never loads a global heap collection.
#include "impl/h5_heap_check.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "impl/h5util.h"
#include "kvtool/random_access_file.h"
#include "kvtool/error.h"

namespace kvtool::h5 {
namespace {

// A string in the file is stored as a reference into the global heap: u32 sequence length, the
// collection's address (8 bytes in every file h5py writes) and u32 object index, little-endian.
constexpr size_t kRefBytes = 16;
constexpr char kRefTag[] = "kvtool.vlen-heap-reference";
constexpr uint64_t kHeaderBytes = 16;           // "GCOL", version 1, 3 reserved bytes, u64 collection size
constexpr uint64_t kObjHeaderBytes = 16;        // u16 index, u16 reference count, 4 reserved, u64 size
constexpr uint64_t kMaxCollection = 64u << 20;  // bounds the memory of one attribute read
constexpr uint64_t kMaxString = 1u << 24;       // the bound of a fixed-length string (h5util.h)

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A "conversion" from a variable-length string to the opaque kRefTag type that converts nothing:
// HDF5 passes it the attribute's stored bytes, the heap reference, and copies them out as they are.
// It accepts only that pair with equal sizes (the stored form, not the in-memory char*), so it
// changes no other conversion and HDF5 never dereferences the reference.
herr_t keep_reference(hid_t src, hid_t dst, H5T_cdata_t* cdata, size_t, size_t, size_t, void*, void*, hid_t) {
  if (cdata->command != H5T_CONV_INIT) return 0;
  if (H5Tis_variable_str(src) <= 0 || H5Tget_class(dst) != H5T_OPAQUE || H5Tget_size(src) != kRefBytes ||
      H5Tget_size(dst) != kRefBytes)
    return -1;
  char* tag = H5Tget_tag(dst);
  const bool ours = tag && std::strcmp(tag, kRefTag) == 0;
  if (tag) H5free_memory(tag);
  if (!ours) return -1;
  cdata->need_bkg = H5T_BKG_NO;
  return 0;
}

// The opaque type whose conversion from a stored string is keep_reference, registered once.
hid_t reference_type() {
  static const hid_t type = [] {
    hid_t t = H5Tcreate(H5T_OPAQUE, kRefBytes);
    Hid str(H5Tcopy(H5T_C_S1), H5Tclose);
    KVT_CHECK(t >= 0 && str.ok() && H5Tset_tag(t, kRefTag) >= 0 && H5Tset_size(str, H5T_VARIABLE) >= 0 &&
                  H5Tregister(H5T_PERS_SOFT, "kvtool_keep_reference", str, t, keep_reference) >= 0,
              INTERNAL, "cannot register the HDF5 conversion that reads string references");
    return t;
  }();
  return type;
}

struct HeapRef {
  uint64_t length, address, index;
};

// Where the file's bytes are: the sec2 driver's descriptor, the base address that HDF5 addresses are
// relative to (the user block), the file's size.
struct FileView {
  Hid file;
  std::optional<RandomAccessFile> bytes;  // HDF5's own descriptor, borrowed
  uint64_t base = 0, size = 0;
};

FileView file_of(hid_t attr, const char* name) {
  FileView v;
  v.file = Hid(H5Iget_file_id(attr), H5Fclose);
  KVT_CHECK(v.file.ok(), HDF5_ERROR, "cannot find the file of attribute '" << name << "'");
  Hid fcpl(H5Fget_create_plist(v.file), H5Pclose), fapl(H5Fget_access_plist(v.file), H5Pclose);
  size_t sizeof_addr = 0, sizeof_size = 0;
  hsize_t userblock = 0;
  KVT_CHECK(fcpl.ok() && fapl.ok() && H5Pget_sizes(fcpl, &sizeof_addr, &sizeof_size) >= 0 &&
                H5Pget_userblock(fcpl, &userblock) >= 0,
            HDF5_ERROR, "cannot read the file properties of attribute '" << name << "'");
  KVT_CHECK(sizeof_addr == 8 && sizeof_size == 8, NOT_A_DUMP,
            "attribute '" << name << "' is a variable-length string in a file with " << sizeof_addr
                          << "-byte addresses and " << sizeof_size
                          << "-byte lengths; kvtool reads such strings only with 8-byte ones (h5py's)");
  void* handle = nullptr;
  KVT_CHECK(H5Pget_driver(fapl) == H5FD_SEC2 && H5Fget_vfd_handle(v.file, fapl, &handle) >= 0 && handle, HDF5_ERROR,
            "cannot reach the file of attribute '" << name << "'");
  v.bytes.emplace(
      RandomAccessFile::borrow(*static_cast<int*>(handle), "the file of attribute '" + std::string(name) + "'"));
  v.base = userblock;
  v.size = v.bytes->size();
  return v;
}

std::vector<uint8_t> read_at(const FileView& v, uint64_t off, uint64_t n) {
  std::vector<uint8_t> b(n);
  const RandomAccessFile::Read r = v.bytes->pread_upto(off, static_cast<size_t>(n), b.data());
  KVT_CHECK(r.got == n, IO_ERROR, "cannot read " << n << " bytes at offset " << off << " of the dump");
  return b;
}

// The collection at `ref.address`, checked: its header, its size inside the file and under
// kMaxCollection.
std::vector<uint8_t> read_collection(const FileView& v, const HeapRef& ref, const std::string& what) {
  const uint64_t room = v.size > v.base ? v.size - v.base : 0;
  KVT_CHECK(ref.address < room && kHeaderBytes <= room - ref.address, NOT_A_DUMP,
            what << " lies beyond the end of the file");
  const uint64_t off = v.base + ref.address;
  const std::vector<uint8_t> h = read_at(v, off, kHeaderBytes);
  KVT_CHECK(std::memcmp(h.data(), "GCOL\x01\0\0\0", 8) == 0, NOT_A_DUMP,
            what << " is not a global heap collection (no \"GCOL\" version 1 header)");
  const uint64_t size = le(h.data() + 8, 8);
  KVT_CHECK(size >= kHeaderBytes && size <= v.size - off, NOT_A_DUMP,
            what << " claims " << size << " bytes, more than the file holds from there");
  KVT_CHECK(size <= kMaxCollection, NOT_A_DUMP,
            what << " is " << size << " bytes; kvtool reads collections of at most " << kMaxCollection << " bytes");
  return read_at(v, off, size);
}

// The bytes of object `ref.index` of collection `c`, after every object of `c` is found to lie inside
// it (the walk libhdf5's collection loader makes, with the bounds checks it lacks).
std::string heap_object(const std::vector<uint8_t>& c, const HeapRef& ref, const std::string& what) {
  const uint64_t size = c.size();
  const uint8_t* found = nullptr;
  uint64_t found_size = 0;
  for (uint64_t p = kHeaderBytes; size - p >= kObjHeaderBytes;) {  // a shorter tail is free space
    const uint64_t index = le(&c[p], 2), n = le(&c[p + 8], 8);
    // The free-space object (index 0) counts its own header; the others are padded to 8 bytes.
    const uint64_t need = index == 0 ? n : n > size ? size + 1 : kObjHeaderBytes + ((n + 7) & ~uint64_t(7));
    KVT_CHECK(need >= kObjHeaderBytes && need <= size - p, NOT_A_DUMP,
              what << ": object " << index << " at byte " << p << " claims " << n << " bytes, past the end of its "
                   << size << "-byte collection");
    if (index != 0 && index == ref.index) {
      KVT_CHECK(found == nullptr, NOT_A_DUMP, what << " holds object " << index << " twice");
      found = &c[p + kObjHeaderBytes];
      found_size = n;
    }
    p += need;
  }
  KVT_CHECK(found != nullptr, NOT_A_DUMP, what << " has no object " << ref.index);
  KVT_CHECK(
      found_size == ref.length, NOT_A_DUMP,
      what << ": object " << ref.index << " holds " << found_size << " bytes but the attribute claims " << ref.length);
  return std::string(reinterpret_cast<const char*>(found), found_size);
}

}  // namespace

std::string read_vlen_string_attr(hid_t attr, const char* name) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  const FileView v = file_of(attr, name);  // first: it checks the reference's size
  // HDF5 copies kRefBytes out of the stored value whatever size the attribute message gave it.
  const hsize_t stored = H5Aget_storage_size(attr);
  KVT_CHECK(stored == kRefBytes, NOT_A_DUMP,
            "attribute '" << name << "' stores " << stored << " bytes for a string reference of " << kRefBytes);
  uint8_t raw[kRefBytes] = {};
  KVT_CHECK(H5Aread(attr, reference_type(), raw) >= 0, HDF5_ERROR, "cannot read attribute '" << name << "'");
  const HeapRef ref{le(raw, 4), le(raw + 4, 8), le(raw + 12, 4)};
  if (ref.address == 0) {  // HDF5's null string
    KVT_CHECK(ref.length == 0, NOT_A_DUMP, "attribute '" << name << "' is a null string of length " << ref.length);
    return {};
  }
  KVT_CHECK(ref.length < kMaxString, BAD_ATTRIBUTE, "attribute '" << name << "' is implausibly large");
  const std::string what =
      "the global heap collection at address " + std::to_string(ref.address) + " holding attribute '" + name + "'";
  std::string s = heap_object(read_collection(v, ref, what), ref, what);
  KVT_CHECK(s.find('\0') == std::string::npos, BAD_ATTRIBUTE,
            "attribute '" << name << "' holds a NUL character inside the string");
  return s;
}

}  // namespace kvtool::h5
