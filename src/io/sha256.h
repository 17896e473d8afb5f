#pragma once
// SHA-256 (OpenSSL's libcrypto, EVP): the hash that names a downloaded
// checkpoint (ckpt/url.h), as torch.hub and Hugging Face name theirs.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace ckpt::detail {

// Incremental SHA-256, fed chunk by chunk.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const std::byte> bytes);
  void update(std::string_view text) { update(std::as_bytes(std::span(text.data(), text.size()))); }
  // 64 lower-case hex digits of the hash of everything fed so far; the
  // hasher starts again afterwards.
  std::string hex();

 private:
  void* context_;  // EVP_MD_CTX
};

// The hex SHA-256 of `text`.
std::string sha256_hex(std::string_view text);

// The hex SHA-256 of the first `size` bytes of the open file `fd`, read
// with positioned reads. Throws Error{kIo} naming `path` when a read fails
// or the file is shorter.
std::string sha256_of_file(int fd, uint64_t size, const std::filesystem::path& path);

// True if `text` is 64 hex digits.
bool is_sha256_hex(std::string_view text);

}  // namespace ckpt::detail
