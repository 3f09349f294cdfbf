// Ed25519 signing of artifact manifests (OpenSSL EVP). The signed message is a DSSE-style
// pre-authentication encoding of the manifest SHA-256 (formats/kvi-v1.md §Signature).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "kvtool/sha256.h"

namespace kvtool {

using PublicKeyRaw = std::array<uint8_t, 32>;
using SignatureRaw = std::array<uint8_t, 64>;

inline constexpr const char* kSignaturePayloadType = "application/vnd.kvtool.kvi-manifest-digest.v1";
std::string dsse_pae(const Digest& manifest_digest);
std::string key_id(const PublicKeyRaw& pub);  // hex SHA-256 of the raw 32-byte public key

class SigningKey {
 public:
  static SigningKey load(const std::string& pem_path);  // BAD_KEY / IO_ERROR
  ~SigningKey();
  SigningKey(SigningKey&& o) noexcept;
  SigningKey(const SigningKey&) = delete;
  SignatureRaw sign(const std::string& message) const;
  const PublicKeyRaw& public_key() const { return pub_; }

 private:
  SigningKey() = default;
  void* pkey_ = nullptr;
  PublicKeyRaw pub_{};
};

// Writes PRIVATE (mode 0600) and its public key next to it (PRIVATE minus ".pem" + ".pub.pem").
// Refuses to overwrite either file (OUTPUT_EXISTS). Returns the public key path.
std::string generate_keypair(const std::string& private_pem_path);
std::string public_key_path_for(const std::string& private_pem_path);
PublicKeyRaw load_public_key(const std::string& pem_path);  // public or private PEM; BAD_KEY when weak
// Loads every *.pem in a directory as a trusted public key.
std::vector<PublicKeyRaw> load_trusted_keys(const std::string& dir);
// True for an encoding no honest key has: a point of small order (the 8 torsion points, which
// verify a forged signature for every message, e.g. identity key, R = identity, S = 0) or a
// non-canonical encoding (y >= p). Checked before OpenSSL, which accepts both.
bool is_weak_public_key(const PublicKeyRaw& pub);
// False when R is a weak point (as above) or S is not below the group order L.
bool is_canonical_signature(const SignatureRaw& sig);
// False also for weak keys and non-canonical signatures.
bool verify_signature(const PublicKeyRaw& pub, const std::string& message, const SignatureRaw& sig);

}  // namespace kvtool
