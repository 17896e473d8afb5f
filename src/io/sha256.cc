#include "io/sha256.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <new>
#include <vector>

#include "core/text.h"
#include "io/file_system.h"

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

std::string sha256_of_file(int fd, uint64_t size, const std::filesystem::path& path) {
  Sha256 hash;
  std::vector<std::byte> buffer(size_t{4} << 20);
  uint64_t offset = 0;
  while (offset < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - offset));
    const ssize_t got = ::pread(fd, buffer.data(), want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw_io(path, "cannot read the download back", got < 0 ? errno : EIO, offset);
    hash.update(std::span(buffer.data(), static_cast<size_t>(got)));
    offset += static_cast<uint64_t>(got);
  }
  return hash.hex();
}

}  // namespace ckpt::detail
