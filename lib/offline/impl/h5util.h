// Small HDF5 C-API helpers shared by the dump reader/writer and the artifact exporter.
#pragma once
#include <hdf5.h>

#include <mutex>
#include <string>
#include <vector>
#include <cstring>

#include "kvtool/error.h"
#include "impl/h5_heap_check.h"

namespace kvtool::h5 {

// The HDF5 library build in Debian is not thread-safe; every call goes through this lock.
inline std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

// libhdf5 prints its error stack on stderr by default. kvtool reports errors itself (a reason and a
// sentence), so the stacks are off unless set_hdf5_error_stacks(true) (kvtool/dump.h) asked for them.
inline bool& h5_error_stacks_wanted() {
  static bool wanted = false;
  return wanted;
}
inline void apply_h5_error_printing() {
  if (h5_error_stacks_wanted())
    H5Eset_auto2(H5E_DEFAULT, reinterpret_cast<H5E_auto2_t>(H5Eprint2), stderr);
  else
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
inline void silence_h5() {
  static const bool once = (apply_h5_error_printing(), true);
  (void)once;
}

// RAII for hid_t handles.
struct Hid {
  hid_t id = -1;
  herr_t (*closer)(hid_t) = nullptr;
  Hid() = default;
  Hid(hid_t i, herr_t (*c)(hid_t)) : id(i), closer(c) {}
  Hid(Hid&& o) noexcept : id(o.id), closer(o.closer) { o.id = -1; }
  Hid& operator=(Hid&& o) noexcept {
    reset();
    id = o.id;
    closer = o.closer;
    o.id = -1;
    return *this;
  }
  ~Hid() { reset(); }
  void reset() {
    if (id >= 0 && closer) closer(id);
    id = -1;
  }
  operator hid_t() const { return id; }
  bool ok() const { return id >= 0; }
};

inline hid_t f16_type() {
  static hid_t t = [] {
    hid_t x = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(x, 15, 10, 5, 0, 10);
    H5Tset_size(x, 2);
    H5Tset_ebias(x, 15);
    H5Tset_precision(x, 16);
    return x;
  }();
  return t;
}

inline bool has_attr(hid_t loc, const char* name) { return H5Aexists(loc, name) > 0; }

// An attribute of `loc` opened, its type of class `cls` (`what`: "a string", "an integer"), with its
// type and dataspace; none open (a.ok() false) when it is absent and not required.
struct OpenAttr {
  Hid a, type, space;
};
inline OpenAttr open_attr(hid_t loc, const char* name, bool required, const std::string& where, H5T_class_t cls,
                          const char* what) {
  OpenAttr at;
  if (!has_attr(loc, name)) {
    KVT_CHECK(!required, MISSING_ATTRIBUTE, where << " has no attribute '" << name << "'");
    return at;
  }
  at.a = Hid(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  KVT_CHECK(at.a.ok(), HDF5_ERROR, "cannot open attribute '" << name << "'");
  at.type = Hid(H5Aget_type(at.a), H5Tclose);
  KVT_CHECK(H5Tget_class(at.type) == cls, MISSING_ATTRIBUTE,
            "attribute '" << name << "' of " << where << " must be " << what);
  at.space = Hid(H5Aget_space(at.a), H5Sclose);
  return at;
}

inline std::string read_str_attr(hid_t loc, const char* name, bool required, const std::string& where) {
  OpenAttr at = open_attr(loc, name, required, where, H5T_STRING, "a string");
  if (!at.a.ok()) return {};
  const Hid &a = at.a, &ft = at.type, &sp = at.space;
  KVT_CHECK(H5Sget_simple_extent_npoints(sp) == 1, BAD_ATTRIBUTE, "attribute '" << name << "' must be a single string");
  // Variable-length (h5py's str): never through H5Aread into a char*, which lets libhdf5 follow the
  // file's global heap unchecked (h5_heap_check.h).
  if (H5Tis_variable_str(ft) > 0) return read_vlen_string_attr(a, name);
  // Fixed-length: read the full stored bytes in the file's own type (no conversion that would stop
  // at a NUL), so that "a\0b" is seen whole and rejected instead of read as "a".
  size_t n = H5Tget_size(ft);
  KVT_CHECK(n > 0 && n < (1u << 24), BAD_ATTRIBUTE, "attribute '" << name << "' is implausibly large");
  std::string buf(n, '\0');
  KVT_CHECK(H5Aread(a, ft, buf.data()) >= 0, HDF5_ERROR, "cannot read attribute '" << name << "'");
  const bool spacepad = H5Tget_strpad(ft) == H5T_STR_SPACEPAD;
  size_t end = spacepad ? buf.find_last_not_of(' ') + 1 : buf.find('\0');
  if (end == std::string::npos) end = n;
  KVT_CHECK(buf.find_first_not_of(spacepad ? ' ' : '\0', end) == std::string::npos && buf.find('\0') >= end,
            BAD_ATTRIBUTE, "attribute '" << name << "' holds a NUL character inside the string");
  buf.resize(end);
  return buf;
}

inline std::vector<int64_t> read_int_attr(hid_t loc, const char* name, bool required, const std::string& where) {
  const OpenAttr at = open_attr(loc, name, required, where, H5T_INTEGER, "an integer");
  if (!at.a.ok()) return {};
  hssize_t n = H5Sget_simple_extent_npoints(at.space);
  KVT_CHECK(n >= 0 && n < (1 << 20), BAD_ATTRIBUTE, "attribute '" << name << "' has a bad size");
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (n > 0)
    KVT_CHECK(H5Aread(at.a, H5T_NATIVE_INT64, v.data()) >= 0, HDF5_ERROR, "cannot read attribute '" << name << "'");
  return v;
}

inline int64_t read_int_scalar(hid_t loc, const char* name, bool required, int64_t dflt) {
  auto v = read_int_attr(loc, name, required, "the dump root");
  if (v.empty()) return dflt;
  KVT_CHECK(v.size() == 1, BAD_ATTRIBUTE, "attribute '" << name << "' must be a single integer");
  return v[0];
}

inline void write_str_attr(hid_t loc, const char* name, const std::string& value) {
  Hid t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  Hid sp(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* p = value.c_str();
  KVT_CHECK(a.ok() && H5Awrite(a, t, &p) >= 0, IO_ERROR, "cannot write attribute '" << name << "'");
}

inline void write_i64_attr(hid_t loc, const char* name, int64_t v) {
  Hid sp(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  KVT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0, IO_ERROR, "cannot write attribute '" << name << "'");
}

inline void write_i32_array_attr(hid_t loc, const char* name, const std::vector<int32_t>& v) {
  hsize_t n = v.size();
  Hid sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid a(H5Acreate2(loc, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  KVT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_INT32, v.data()) >= 0, IO_ERROR,
            "cannot write attribute '" << name << "'");
}

inline std::vector<hsize_t> dims_of(hid_t ds) {
  Hid sp(H5Dget_space(ds), H5Sclose);
  int r = H5Sget_simple_extent_ndims(sp);
  std::vector<hsize_t> d(r > 0 ? r : 0);
  if (r > 0) H5Sget_simple_extent_dims(sp, d.data(), nullptr);
  return d;
}

}  // namespace kvtool::h5
