#pragma once
// Writing safetensors files in the reference writer's layout. Layout: layout.h.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/format.h"

namespace ckpt::safetensors_detail {

// Writes `tree` to `path` atomically: tensors ordered as the reference
// writer orders them (dtype rank descending, then name), compact JSON header
// with __metadata__ first, padded with spaces to a multiple of 8. With
// options.extras off and a flat map of names to tensors, the bytes equal
// those of huggingface's safetensors `save_file` for the same tensors and
// (at most one key of) metadata.
// Tied tensors (Tensor::same_memory, same dtype and shape): with extras the
// bytes are stored once, under the first leaf's name in tree order, and the
// others are recorded as aliases of it; without extras each leaf gets its own
// copy of the bytes.
// Throws Error{kUnsupported} if the file cannot hold the tree: without extras,
// any non-tensor leaf, list, integer key, empty nested container, or leaf
// names that collide; always, names or metadata that are not valid UTF-8, a
// tensor named "__metadata__", complex128 without extras, a 0-d
// float4_e2m1fn_x2 tensor (F4 doubles the last dimension), a header over
// kMaxHeaderSize. {kInvalidArgument} if options.metadata uses ckpt's own key
// (kCkptKey, reserved with or without extras). {kIo} from the file system.
void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options);

// One safetensors file checked and laid out (as write_file does it, with the
// same errors, thrown by the constructor) but not yet written: its size is
// known first, so its bytes can go into memory the caller allocates (a
// Python bytes object) as well as to a file. `tree` and the tensors it holds
// must outlive the PlannedFile.
class PlannedFile {
 public:
  PlannedFile(const Tree& tree, const SaveOptions& options);
  ~PlannedFile();
  PlannedFile(const PlannedFile&) = delete;
  PlannedFile& operator=(const PlannedFile&) = delete;

  // The file's size in bytes.
  uint64_t size() const;
  // The whole file into `out`, which must be size() bytes (else
  // Error{kInvalidArgument}); tensors are copied on options.threads threads.
  void write_to(std::span<std::byte> out) const;
  // The file at `path`, atomically (what write_file does).
  void write_file(const std::filesystem::path& path) const;

 private:
  struct Plan;
  void fill_digests(std::string& header, const std::vector<std::string>& digests) const;
  std::unique_ptr<Plan> plan_;
};

}  // namespace ckpt::safetensors_detail
