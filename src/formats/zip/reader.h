#pragma once
// ZipReader: the directory of a zip archive held in a mapped file, and the
// bytes of its entries. Shared by the formats that are zips (npz, torch).
// Byte layout: docs/formats/zip.md, layout.h.
//
//   auto file = detail::MappedFile::open(path);
//   zip_detail::ZipReader zip(file);
//   for (const zip_detail::ZipEntry& entry : zip.entries()) {
//     Buffer bytes = zip.read(entry);   // stored: a view of the mapping
//   }

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/buffer.h"
#include "io/mapped_file.h"

namespace ckpt::zip_detail {

// One member of the archive, as its central directory header describes it
// (zip64 values resolved), plus where its data starts in the file (from its
// local header).
struct ZipEntry {
  std::string name;               // UTF-8 (names without the UTF-8 flag are CP437, as APPNOTE says)
  uint16_t method = 0;            // kMethodStored or kMethodDeflated (others fail in read())
  uint16_t flags = 0;             // general purpose bit flags
  uint32_t crc32 = 0;             // of the uncompressed bytes
  uint64_t compressed_size = 0;   // bytes in the file
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;       // first byte of the (compressed) data in the file
};

struct ZipReadOptions {
  // Check the CRC-32 of a stored entry (reads every byte). Deflated entries
  // are always checked, since inflating touches every byte anyway.
  bool verify_crc = false;
};

struct ZipOpenOptions {
  // Off: only the end records and the central directory are read (entries'
  // data_offset stays 0, read() may not be called): what a reader of a file
  // that has not arrived whole needs to know where the local headers are.
  bool local_headers = true;
  // The archive occupies [window_offset, window_offset + window_size) of the
  // file (an archive embedded in a larger file, as PyTorch DCP's .distcp
  // files hold one torch.save archive per item); the default is the whole
  // file. Offsets inside the archive, ZipEntry's and those of error messages,
  // count from the window's start.
  uint64_t window_offset = 0;
  uint64_t window_size = UINT64_MAX;
};

class ZipReader {
 public:
  // Parses the end of central directory record (and the zip64 locator and
  // record when present), every central directory header and every local
  // header, validating each size, offset and count against the file with
  // checked arithmetic: entries must lie before the central directory, must
  // not overlap, and must have unique names.
  // Throws Error{kCorrupt} naming the file, the entry and the byte offset of
  // the first defect; {kUnsupported} for split (multi-disk) archives and
  // encrypted entries, {kCorrupt} if the window does not lie inside the file.
  explicit ZipReader(std::shared_ptr<const detail::MappedFile> file, const ZipOpenOptions& options = {});

  // Entries in central directory order.
  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  // The entry named `name`, or nullptr.
  const ZipEntry* find(std::string_view name) const;

  // The uncompressed bytes of `entry` (one of entries()). Stored entries are
  // views of the mapping (no copy); deflated entries are inflated into heap
  // memory of exactly the declared uncompressed size.
  // Throws Error{kCorrupt} if the deflate stream is damaged, inflates to
  // another size than declared, declares a size deflate cannot reach, or the
  // CRC-32 disagrees; {kUnsupported} for methods other than stored/deflated.
  Buffer read(const ZipEntry& entry, const ZipReadOptions& options = {}) const;

  // Where the central directory starts: every entry's data ends before it.
  uint64_t directory_offset() const noexcept { return directory_offset_; }
  // The archive comment (the bytes after the end record: a view of the
  // mapping), and where it starts in the file.
  std::string_view comment() const noexcept { return comment_; }
  uint64_t comment_offset() const noexcept { return comment_offset_; }
  const detail::MappedFile& file() const noexcept { return *file_; }
  const std::filesystem::path& path() const noexcept { return file_->path(); }

 private:
  struct Directory {
    uint64_t entries = 0;
    uint64_t size = 0;
    uint64_t offset = 0;
    uint64_t end_limit = 0;  // the directory must end at or before this offset
  };
  Directory read_end_records();
  void read_central_directory(const Directory& directory);
  void read_local_headers();
  void check_no_overlap() const;

  std::shared_ptr<const detail::MappedFile> file_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string_view, size_t> index_;  // name (viewing entries_) → position
  uint64_t base_ = 0;  // the window's offset in the file
  uint64_t size_ = 0;  // the window's size
  uint64_t directory_offset_ = 0;
  std::string_view comment_;
  uint64_t comment_offset_ = 0;
};

// True if `head` (the first bytes of a file) starts with a zip local file
// header or, for an archive without entries, an end of central directory
// record that spans the whole file of `file_size` bytes.
bool detect_zip(std::span<const std::byte> head, uint64_t file_size);

// The name of the first local header in `head`, if `head` holds all of it;
// empty otherwise. Used by detect() to tell npz from torch zips.
std::string_view first_entry_name(std::span<const std::byte> head);

}  // namespace ckpt::zip_detail
