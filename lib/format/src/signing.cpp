#include "kvtool/signing.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "kvtool/error.h"

namespace kvtool {

namespace {
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string read_small_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  KVT_CHECK(f, IO_ERROR, "cannot open key file '" << path << "': " << std::strerror(errno));
  std::string s(65536, '\0');
  size_t n = std::fread(s.data(), 1, s.size(), f.get());
  s.resize(n);
  return s;
}

PublicKeyRaw raw_public(EVP_PKEY* p, const std::string& path) {
  KVT_CHECK(EVP_PKEY_id(p) == EVP_PKEY_ED25519, BAD_KEY, "'" << path << "' is not an Ed25519 key");
  PublicKeyRaw pub{};
  size_t len = pub.size();
  KVT_CHECK(EVP_PKEY_get_raw_public_key(p, pub.data(), &len) == 1 && len == 32, BAD_KEY,
            "cannot extract the public key from '" << path << "'");
  KVT_CHECK(!is_weak_public_key(pub), BAD_KEY,
            "'" << path << "' is a small-order or non-canonical Ed25519 public key; it cannot be trusted");
  return pub;
}

// y coordinates (little-endian, sign bit of x cleared) of the 8 small-order points of Ed25519:
// 0 (order 4), 1 (identity), the two order-8 values and p - 1 (order 2). Non-canonical encodings
// (y >= p, including p and p + 1, aliases of 0 and 1) are refused separately.
const uint8_t kSmallOrderY[5][32] = {
    {0},
    {1},
    {0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
     0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
    {0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
     0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a},
    {0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
};
// The group order L = 2^252 + 27742317777372353535851937790883648493, little-endian.
const uint8_t kOrderL[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7,
                             0xa2, 0xde, 0xf9, 0xde, 0x14, 0,    0,    0,    0,    0,    0,
                             0,    0,    0,    0,    0,    0,    0,    0,    0,    0x10};

bool weak_point(const uint8_t* enc) {
  uint8_t y[32];
  std::memcpy(y, enc, 32);
  y[31] &= 0x7f;  // the sign of x does not change the order
  // y >= p = 2^255 - 19: bytes 1..30 are 0xff, byte 31 is 0x7f and byte 0 is at least 0xed.
  bool high_ones = y[31] == 0x7f;
  for (int i = 1; i < 31 && high_ones; ++i) high_ones = y[i] == 0xff;
  if (high_ones && y[0] >= 0xed) return true;
  for (const auto& s : kSmallOrderY)
    if (std::memcmp(y, s, 32) == 0) return true;
  return false;
}

void write_new_file(const std::string& path, const std::string& data, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
  KVT_CHECK(fd >= 0, errno == EEXIST ? OUTPUT_EXISTS : IO_ERROR,
            "cannot create '" << path << "': " << std::strerror(errno)
                              << (errno == EEXIST ? " (refusing to overwrite)" : ""));
  fchmod(fd, mode);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t w = write(fd, data.data() + off, data.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      unlink(path.c_str());
      KVT_THROW(IO_ERROR, "cannot write '" << path << "'");
    }
    off += static_cast<size_t>(w);
  }
  fsync(fd);
  close(fd);
}

std::string pem_of(EVP_PKEY* p, bool priv) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  int ok = priv ? PEM_write_bio_PrivateKey(bio.get(), p, nullptr, nullptr, 0, nullptr, nullptr)
                : PEM_write_bio_PUBKEY(bio.get(), p);
  KVT_CHECK(ok == 1, INTERNAL, "cannot encode PEM");
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// OpenSSL's PEM readers take the first block and ignore the rest, so a file with several keys
// would sign or trust with whichever comes first, silently: a key file must hold exactly one.
void check_one_pem_block(const std::string& pem, const std::string& path) {
  size_t blocks = 0;
  for (size_t at = pem.find("-----BEGIN "); at != std::string::npos; at = pem.find("-----BEGIN ", at + 1)) ++blocks;
  KVT_CHECK(blocks <= 1, BAD_KEY,
            "'" << path << "' holds " << blocks << " PEM blocks; a key file must hold exactly one key");
}
}  // namespace

std::string dsse_pae(const Digest& d) {
  std::string type = kSignaturePayloadType;
  std::string body(reinterpret_cast<const char*>(d.data()), d.size());
  return "DSSEv1 " + std::to_string(type.size()) + " " + type + " " + std::to_string(body.size()) + " " + body;
}

std::string key_id(const PublicKeyRaw& pub) { return to_hex(sha256(pub.data(), pub.size())); }

SigningKey SigningKey::load(const std::string& path) {
  std::string pem = read_small_file(path);
  check_one_pem_block(pem, path);
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EVP_PKEY* p = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  KVT_CHECK(p, BAD_KEY, "'" << path << "' is not a PEM private key");
  SigningKey k;
  k.pkey_ = p;
  k.pub_ = raw_public(p, path);
  return k;
}

SigningKey::~SigningKey() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }
SigningKey::SigningKey(SigningKey&& o) noexcept : pkey_(o.pkey_), pub_(o.pub_) { o.pkey_ = nullptr; }

SignatureRaw SigningKey::sign(const std::string& msg) const {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  SignatureRaw sig{};
  size_t len = sig.size();
  KVT_CHECK(ctx && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, static_cast<EVP_PKEY*>(pkey_)) == 1 &&
                EVP_DigestSign(ctx.get(), sig.data(), &len, reinterpret_cast<const unsigned char*>(msg.data()),
                               msg.size()) == 1 &&
                len == 64,
            INTERNAL, "Ed25519 signing failed");
  return sig;
}

std::string public_key_path_for(const std::string& priv) {
  std::string base = priv;
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".pem") == 0) base.resize(base.size() - 4);
  return base + ".pub.pem";
}

std::string generate_keypair(const std::string& priv_path) {
  std::string pub_path = public_key_path_for(priv_path);
  struct stat st {};
  KVT_CHECK(stat(priv_path.c_str(), &st) != 0, OUTPUT_EXISTS,
            "'" << priv_path << "' already exists; refusing to overwrite a key");
  KVT_CHECK(stat(pub_path.c_str(), &st) != 0, OUTPUT_EXISTS,
            "'" << pub_path << "' already exists; refusing to overwrite a key");
  std::unique_ptr<EVP_PKEY_CTX, void (*)(EVP_PKEY_CTX*)> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr),
                                                             &EVP_PKEY_CTX_free);
  EVP_PKEY* raw = nullptr;
  KVT_CHECK(ctx && EVP_PKEY_keygen_init(ctx.get()) == 1 && EVP_PKEY_keygen(ctx.get(), &raw) == 1, INTERNAL,
            "Ed25519 key generation failed");
  PkeyPtr p(raw);
  write_new_file(priv_path, pem_of(p.get(), true), 0600);
  try {
    write_new_file(pub_path, pem_of(p.get(), false), 0644);
  } catch (...) {
    unlink(priv_path.c_str());
    throw;
  }
  return pub_path;
}

PublicKeyRaw load_public_key(const std::string& path) {
  std::string pem = read_small_file(path);
  check_one_pem_block(pem, path);
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr p(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (!p) {
    std::unique_ptr<BIO, BioFree> bio2(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    p.reset(PEM_read_bio_PrivateKey(bio2.get(), nullptr, nullptr, nullptr));
  }
  KVT_CHECK(p, BAD_KEY, "'" << path << "' is not a PEM Ed25519 public key");
  return raw_public(p.get(), path);
}

std::vector<PublicKeyRaw> load_trusted_keys(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), &closedir);
  KVT_CHECK(d, IO_ERROR, "cannot open trusted key directory '" << dir << "'");
  std::vector<std::string> names;
  while (dirent* e = readdir(d.get())) {
    std::string n = e->d_name;
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".pem") == 0) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::vector<PublicKeyRaw> keys;
  for (const auto& n : names) keys.push_back(load_public_key(dir + "/" + n));
  return keys;
}

bool is_weak_public_key(const PublicKeyRaw& pub) { return weak_point(pub.data()); }

bool is_canonical_signature(const SignatureRaw& sig) {
  if (weak_point(sig.data())) return false;
  for (int i = 31; i >= 0; --i) {  // S (bytes 32..63, little-endian) must be below L
    if (sig[32 + i] != kOrderL[i]) return sig[32 + i] < kOrderL[i];
  }
  return false;  // S == L
}

bool verify_signature(const PublicKeyRaw& pub, const std::string& msg, const SignatureRaw& sig) {
  if (is_weak_public_key(pub) || !is_canonical_signature(sig)) return false;
  PkeyPtr p(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, pub.data(), pub.size()));
  if (!p) return false;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, p.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), reinterpret_cast<const unsigned char*>(msg.data()),
                          msg.size()) == 1;
}

}  // namespace kvtool
