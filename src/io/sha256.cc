#include "io/sha256.h"

#include <openssl/evp.h>

#include <cctype>
#include <new>

#include "core/text.h"

namespace ckpt::detail {

namespace {
EVP_MD_CTX* evp(void* context) { return static_cast<EVP_MD_CTX*>(context); }
}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr || EVP_DigestInit_ex(evp(context_), EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
}

Sha256::~Sha256() { EVP_MD_CTX_free(evp(context_)); }

void Sha256::update(std::span<const std::byte> bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(evp(context_), bytes.data(), bytes.size());
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(evp(context_), digest, &size);
  EVP_DigestInit_ex(evp(context_), EVP_sha256(), nullptr);
  std::string out;
  out.reserve(2 * size);
  for (unsigned int i = 0; i < size; ++i) out += hex_digits(digest[i], 2);
  return out;
}

std::string sha256_hex(std::string_view text) {
  Sha256 hash;
  hash.update(text);
  return hash.hex();
}

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace ckpt::detail
