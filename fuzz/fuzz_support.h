#pragma once
// What every fuzz target shares: the input written where a reader can open
// it (a file in /dev/shm, or a small directory unpacked from the input), the
// walk a user's commands make over what was read (inspect --json, a lazy
// load that reads every tensor, verify), and the memory bound.
//
// The contract of a target: bytes in, and either a result or a ckpt::Error.
// A crash, a sanitizer report, any other exception (std::bad_alloc, a
// std::out_of_range from a library), a hang (libFuzzer's -timeout) or a heap
// that grows past kMemoryFactor × the input + kMemorySlack is a finding.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/format.h"

namespace ckpt::fuzz {

// The memory bound: live heap during one input (ckpt's allocations and the
// harness's copies of tensor bytes) may grow by at most this much. Mapped
// files are not heap. 64 × the input is what issue 15 asks of a tree; the
// slack covers fixed costs (parser buffers, thread stacks, the registry).
inline constexpr uint64_t kMemoryFactor = 64;
inline constexpr uint64_t kMemorySlack = 32ull << 20;

// Tensors larger than this bound are not read in full by the walk (a small
// file can claim them only through views or fill values, which a lazy load
// keeps lazy); their size is still checked against the bound by the reader.
uint64_t memory_bound(size_t input_size);

// A fresh scratch directory for this process (under /dev/shm where it
// exists), emptied before each use; removed at exit.
const std::filesystem::path& scratch();

// Writes `data` to scratch()/name, replacing what was there; returns the path.
std::filesystem::path write_file(std::string_view name, std::span<const uint8_t> data);

// Unpacks a directory from `data` into scratch()/root (emptied first) and
// returns that path. The packing (fuzz/README.md, scripts/fuzz-seeds packs
// real directories into it): a sequence of files, each
//   "\n@@" PATH "\n" CONTENTS
// where PATH is relative, '/'-separated, of [A-Za-z0-9._-] components other
// than "." and ".."; CONTENTS runs up to the next "\n@@" or the end. Bytes
// before the first marker are ignored; a file with a bad path is skipped;
// at most 64 files, 8 levels deep.
std::filesystem::path unpack_directory(std::string_view root, std::span<const uint8_t> data);

// The packed files of `data` (the packing above), in order: each its PATH as
// written (unchecked) and its CONTENTS.
struct PackedFile {
  std::string_view name;
  std::string_view contents;
};
std::vector<PackedFile> packed_files(std::string_view data);

// Walks the checkpoint at `path` as ckpt's users do: ckpt::open (lazy, with
// `format`), the inspect document rendered as JSON, every tensor's bytes read
// (those within the memory bound), a non-lazy load, and ckpt::verify. A
// ckpt::Error at any step ends that step; anything else propagates.
void walk_checkpoint(const std::filesystem::path& path, const std::string& format, size_t input_size);

// What walk_checkpoint does after opening, for contents read another way
// (open_bytes).
void walk_contents(const std::filesystem::path& path, Contents& contents, size_t input_size);

// Arms the memory bound for one input of `input_size` bytes: records the
// live heap now; check_memory() aborts with a report when the peak since
// exceeded the bound.
void begin_input(size_t input_size);
void check_memory();

// begin_input, body, check_memory: what each LLVMFuzzerTestOneInput does.
template <class Body>
int run_one(size_t input_size, Body&& body) {
  begin_input(input_size);
  body();
  check_memory();
  return 0;
}

}  // namespace ckpt::fuzz
