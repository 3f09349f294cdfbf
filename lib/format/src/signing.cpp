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
  return pub;
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
}  // namespace

std::string dsse_pae(const Digest& d) {
  std::string type = kSignaturePayloadType;
  std::string body(reinterpret_cast<const char*>(d.data()), d.size());
  return "DSSEv1 " + std::to_string(type.size()) + " " + type + " " + std::to_string(body.size()) + " " + body;
}

std::string key_id(const PublicKeyRaw& pub) { return to_hex(sha256(pub.data(), pub.size())); }

SigningKey SigningKey::load(const std::string& path) {
  std::string pem = read_small_file(path);
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

bool verify_signature(const PublicKeyRaw& pub, const std::string& msg, const SignatureRaw& sig) {
  PkeyPtr p(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, pub.data(), pub.size()));
  if (!p) return false;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, p.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), reinterpret_cast<const unsigned char*>(msg.data()),
                          msg.size()) == 1;
}

}  // namespace kvtool
