// The zip container of .npz files (kvtool/tensor_file.h): the central directory, zip64 records
// as NumPy writes them, stored members (CRC-32 checked at open) and deflated ones (inflated on
// read, the cursor restarted when a read goes backwards). Every offset and size a record claims is
// checked against the file's real size before anything is read or allocated.
#include <algorithm>
#include <set>

#include "impl/tensor_file_impl.h"

namespace kvtool {

using impl::kMaxDeflateRatio;
using impl::kMaxHeader;
using impl::kMaxZipEntries;
using impl::le;
using impl::type_size;

namespace {

// zip64 extended information (extra field 0x0001): the 64-bit values of the fields set to 0xFFFFFFFF.
void zip64_extra(const uint8_t* p, size_t n, ZipEntry& e, bool u_big, bool c_big, bool l_big, const std::string& what) {
  size_t i = 0;
  while (i + 4 <= n) {
    const uint16_t id = static_cast<uint16_t>(le(p + i, 2)), len = static_cast<uint16_t>(le(p + i + 2, 2));
    KVT_CHECK(i + 4 + len <= n, BAD_TENSOR_FILE, what << ": a zip extra field runs past its record");
    if (id == 1) {
      size_t j = i + 4, end = i + 4 + len;
      auto take = [&](uint64_t& v) {
        KVT_CHECK(j + 8 <= end, BAD_TENSOR_FILE, what << ": a zip64 extra field is too short");
        v = le(p + j, 8);
        j += 8;
      };
      if (u_big) take(e.usize);
      if (c_big) take(e.csize);
      if (l_big) take(e.local);
      return;
    }
    i += 4 + len;
  }
  KVT_CHECK(!(u_big || c_big || l_big), BAD_TENSOR_FILE, what << ": a zip64 size has no zip64 extra field");
}

}  // namespace

// The zip central directory: where the end record (or its zip64 form) says it is.
ZipDirectory TensorFile::Impl::find_zip_directory() const {
  // The end of central directory record: 22 bytes plus a comment of at most 65535.
  const uint64_t tail = std::min<uint64_t>(size, 22 + 65535 + 20);
  std::vector<uint8_t> t(static_cast<size_t>(tail));
  pread_all(size - tail, t.size(), t.data());
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail) - 22; i >= 0; --i)
    if (le(&t[static_cast<size_t>(i)], 4) == 0x06054b50u) {
      eocd = i;
      break;
    }
  KVT_CHECK(eocd >= 0, TRUNCATED, "'" << path << "' is a zip file without its end record (truncated .npz?)");
  const uint8_t* e = &t[static_cast<size_t>(eocd)];
  ZipDirectory dir{le(e + 10, 2), le(e + 16, 4), le(e + 12, 4), size - tail + static_cast<uint64_t>(eocd)};
  if (dir.entries == 0xffff || dir.size == 0xffffffffu || dir.offset == 0xffffffffu) {
    KVT_CHECK(eocd >= 20 && le(e - 20, 4) == 0x07064b50u, BAD_TENSOR_FILE,
              "'" << path << "' needs a zip64 end record and has none");
    const uint64_t rec = le(e - 20 + 8, 8);
    uint8_t z[56];
    KVT_CHECK(rec <= dir.end && dir.end - rec >= 56, TRUNCATED,
              "'" << path << "': the zip64 end record is outside the file");
    pread_all(rec, 56, z);
    KVT_CHECK(le(z, 4) == 0x06064b50u, BAD_TENSOR_FILE, "'" << path << "': bad zip64 end record signature");
    dir.entries = le(z + 32, 8);
    dir.size = le(z + 40, 8);
    dir.offset = le(z + 48, 8);
  }
  KVT_CHECK(dir.entries <= kMaxZipEntries, BAD_TENSOR_FILE,
            "'" << path << "' claims " << dir.entries << " zip members");
  KVT_CHECK(dir.offset <= dir.end && dir.size <= dir.end - dir.offset, TRUNCATED,
            "'" << path << "': the zip central directory is outside the file");
  return dir;
}

namespace {

// One central directory entry at cd[pos]; advances pos past it.
ZipEntry read_zip_entry(const std::vector<uint8_t>& cd, size_t& pos, const std::string& what) {
  KVT_CHECK(pos + 46 <= cd.size() && le(&cd[pos], 4) == 0x02014b50u, BAD_TENSOR_FILE,
            what << ": bad central directory entry");
  const uint8_t* c = &cd[pos];
  ZipEntry z;
  z.flags = static_cast<uint16_t>(le(c + 8, 2));
  z.method = static_cast<uint16_t>(le(c + 10, 2));
  z.crc = static_cast<uint32_t>(le(c + 16, 4));
  z.csize = le(c + 20, 4);
  z.usize = le(c + 24, 4);
  const size_t nlen = le(c + 28, 2), xlen = le(c + 30, 2), clen = le(c + 32, 2);
  z.local = le(c + 42, 4);
  KVT_CHECK(pos + 46 + nlen + xlen + clen <= cd.size(), BAD_TENSOR_FILE, what << ": entry runs past the directory");
  z.name.assign(reinterpret_cast<const char*>(c + 46), nlen);
  zip64_extra(c + 46 + nlen, xlen, z, z.usize == 0xffffffffu, z.csize == 0xffffffffu, z.local == 0xffffffffu, what);
  pos += 46 + nlen + xlen + clen;
  return z;
}

}  // namespace

// Where a member's bytes are: after its local header, whose name and extra lengths are its own.
Storage TensorFile::Impl::zip_member_storage(const ZipEntry& z, uint64_t cd_off, const std::string& what) const {
  KVT_CHECK((z.flags & 1) == 0, BAD_TENSOR_FILE, what << " ('" << z.name << "') is encrypted");
  KVT_CHECK(
      z.method == 0 || z.method == 8, BAD_TENSOR_FILE,
      what << " ('" << z.name << "') uses zip compression method " << z.method << " (stored and deflated are read)");
  uint8_t lh[30];
  KVT_CHECK(z.local <= cd_off && cd_off - z.local >= 30, TRUNCATED, what << ": local header outside the file");
  pread_all(z.local, 30, lh);
  KVT_CHECK(le(lh, 4) == 0x04034b50u, BAD_TENSOR_FILE, what << ": bad local header signature");
  Storage st;
  st.offset = z.local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
  KVT_CHECK(st.offset <= cd_off && z.csize <= cd_off - st.offset, TRUNCATED,
            what << " ('" << z.name << "'): its " << z.csize << " bytes run past the zip directory");
  st.csize = z.csize;
  st.usize = z.usize;
  st.crc = z.crc;
  st.deflated = z.method == 8;
  st.span_begin = st.offset;
  st.span_end = st.offset + z.csize;
  if (!st.deflated) {
    KVT_CHECK(z.csize == z.usize, BAD_TENSOR_FILE, what << ": a stored member with two sizes");
    check_stored_crc(st, what + " ('" + z.name + "')");
  }
  KVT_CHECK(z.usize <= z.csize * kMaxDeflateRatio + 1024, BAD_TENSOR_FILE,
            what << " ('" << z.name << "') claims " << z.usize << " bytes from " << z.csize
                 << " compressed: more than deflate can produce");
  return st;
}

// One .npy member: registered, then its npy header read through the member's own reader (inflated
// when deflated) and its data size checked against the header's shape.
// A stored member's CRC-32, checked once at open as NumPy's zipfile does on read (a deflated
// member's is checked as it is inflated).
void TensorFile::Impl::check_stored_crc(const Storage& st, const std::string& what) const {
  std::vector<uint8_t> buf(1 << 20);
  uLong crc = crc32(0, nullptr, 0);
  for (uint64_t done = 0; done < st.csize;) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(buf.size(), st.csize - done));
    pread_all(st.offset + done, k, buf.data());
    crc = crc32(crc, buf.data(), static_cast<uInt>(k));
    done += k;
  }
  KVT_CHECK(static_cast<uint32_t>(crc) == st.crc, BAD_TENSOR_FILE, what << " fails its CRC-32 (damaged file)");
}

void TensorFile::Impl::add_npz_member(const ZipEntry& z, const Storage& st, const std::string& what) {
  TensorInfo info;
  info.name = z.name.substr(0, z.name.size() - 4);
  const uint64_t hn = std::min<uint64_t>(z.usize, kMaxHeader + 12);
  std::vector<uint8_t> head(static_cast<size_t>(hn));
  add(info, st);  // registered first so that the inflater below can read it
  const size_t idx = tensors.size() - 1;
  where[idx].skip = 0;
  read_bytes(idx, 0, head.size(), head.data());
  TensorInfo parsed;
  const uint64_t hdr = parse_npy(head.data(), head.size(), what + " ('" + z.name + "')", parsed);
  parsed.name = info.name;
  parsed.elements = checked_elements(parsed.shape, what);
  tensors[idx] = parsed;
  where[idx].skip = hdr;
  if (!st.deflated) where[idx].offset = st.offset + hdr;
  cursors[idx].reset();  // the header read is not where the data reads start
  const uint64_t data = z.usize - hdr, esize = type_size(parsed.type);
  if (esize == 0) return;
  KVT_CHECK(static_cast<uint64_t>(parsed.elements) <= data / esize, TRUNCATED,
            what << " ('" << z.name << "') holds " << data << " data bytes; its shape needs " << parsed.elements
                 << " x " << esize);
  KVT_CHECK(static_cast<uint64_t>(parsed.elements) * esize == data, BAD_LAYOUT,
            what << " ('" << z.name << "') has bytes after the array its header describes");
}

void TensorFile::Impl::open_npz() {
  format = "npz";
  const ZipDirectory dir = find_zip_directory();
  std::vector<uint8_t> cd(static_cast<size_t>(dir.size));
  pread_all(dir.offset, cd.size(), cd.data());
  size_t pos = 0;
  std::set<std::string> names;
  for (uint64_t k = 0; k < dir.entries; ++k) {
    const std::string what = "'" + path + "' zip member " + std::to_string(k);
    const ZipEntry z = read_zip_entry(cd, pos, what);
    // NumPy returns the last of two members of one name; refused, so no reader sees another array.
    KVT_CHECK(names.insert(z.name).second, BAD_TENSOR_FILE,
              what << " repeats the name '" << z.name << "': which array is meant is ambiguous");
    if (z.name.size() < 5 || z.name.compare(z.name.size() - 4, 4, ".npy") != 0) continue;  // not an array
    add_npz_member(z, zip_member_storage(z, dir.offset, what), what);
  }
  check_no_overlap();
}

void TensorFile::Impl::inflate_range(size_t idx, uint64_t pos, size_t n, uint8_t* out) const {
  const Storage& s = where[idx];
  const std::string what = "'" + path + "' member '" + tensors[idx].name + ".npy'";
  KVT_CHECK(pos <= s.usize && n <= s.usize - pos, INTERNAL, "read past a member");
  auto& cur = cursors[idx];
  if (!cur || cur->out_pos > pos) {
    cur = std::make_unique<Inflater>();
    KVT_CHECK(inflateInit2(&cur->z, -MAX_WBITS) == Z_OK, OUT_OF_MEMORY, "zlib could not start");
    cur->live = true;
    cur->crc = static_cast<uint32_t>(crc32(0, nullptr, 0));
    cur->in.resize(1 << 16);
  }
  Inflater& f = *cur;
  std::vector<uint8_t> sink;
  while (n > 0) {
    uint8_t* dst = out;
    size_t want = n;
    if (f.out_pos < pos) {  // skip forward to `pos`
      sink.resize(static_cast<size_t>(std::min<uint64_t>(pos - f.out_pos, 1 << 16)));
      dst = sink.data();
      want = sink.size();
    }
    if (f.z.avail_in == 0 && f.in_pos < s.csize) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(f.in.size(), s.csize - f.in_pos));
      pread_all(s.offset + f.in_pos, k, f.in.data());
      f.in_pos += k;
      f.z.next_in = f.in.data();
      f.z.avail_in = static_cast<uInt>(k);
    }
    f.z.next_out = dst;
    f.z.avail_out = static_cast<uInt>(std::min<size_t>(want, 1u << 30));
    const int rc = inflate(&f.z, Z_NO_FLUSH);
    const size_t got = static_cast<size_t>(f.z.next_out - dst);
    KVT_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, BAD_TENSOR_FILE,
              what << " is not a valid deflate stream");
    f.crc = static_cast<uint32_t>(crc32(f.crc, dst, static_cast<uInt>(got)));
    f.out_pos += got;
    if (dst == out) {
      out += got;
      n -= got;
    }
    if (f.out_pos == s.usize) KVT_CHECK(f.crc == s.crc, BAD_TENSOR_FILE, what << " fails its CRC-32 (damaged file)");
    const bool exhausted = f.z.avail_in == 0 && f.in_pos == s.csize;
    KVT_CHECK(got > 0 || !(rc == Z_STREAM_END || exhausted), TRUNCATED,
              what << " ends before its claimed " << s.usize << " bytes");
  }
}

}  // namespace kvtool
