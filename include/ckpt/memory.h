#pragma once
// Checkpoints in memory: the native format (safetensors) read from memory the
// caller owns, and laid out before it is written, so that its bytes can go
// into memory the caller allocates (a Python bytes object) as well as to a
// file. Files on disk go through checkpoint.h.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "ckpt/buffer.h"
#include "ckpt/format.h"
#include "ckpt/tree.h"

namespace ckpt {

// Reads the safetensors file held whole in `bytes`, validated as
// ckpt::open() validates a file: the tensors view `bytes`, which they keep
// alive. `label` names the source in errors (it need not exist as a file).
// options.format must be empty or "safetensors"; options.lazy is ignored
// (nothing is read from elsewhere).
// Throws Error{kCorrupt} naming `label`, the entry and the offset,
// {kUnsupported} for another format.
Contents open_bytes(const Buffer& bytes, const std::filesystem::path& label, const LoadOptions& options = {});

// One safetensors file checked and laid out as save() would write it, with
// the same errors (thrown by the constructor), but not yet written: its size
// is known first. `tree` and the tensors it holds must outlive the
// PlannedFile. options.format must be empty or "safetensors".
class PlannedFile {
 public:
  PlannedFile(const Tree& tree, const SaveOptions& options);
  ~PlannedFile();
  PlannedFile(PlannedFile&&) noexcept;
  PlannedFile& operator=(PlannedFile&&) noexcept;

  // The file's size in bytes.
  uint64_t size() const;
  // The whole file into `out`, which must be size() bytes (else
  // Error{kInvalidArgument}); tensors are copied on options.threads threads.
  void write_to(std::span<std::byte> out) const;
  // The file at `path`, atomically, as save() writes it.
  void write_file(const std::filesystem::path& path) const;

 private:
  struct Plan;
  std::unique_ptr<Plan> plan_;
};

}  // namespace ckpt
