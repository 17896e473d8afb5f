#pragma once
// ZipWriter: lays out a zip archive of stored (uncompressed) entries and
// writes it through an AtomicFile in large positioned writes, computing each
// entry's CRC-32 while its bytes are written. Shared by the formats that are
// zips (npz, torch). Byte layout: docs/formats/zip.md, layout.h.
//
//   zip_detail::ZipWriter zip({.alignment = 64});
//   zip.add("a.npy", header_a, tensor_a.buffer());
//   zip.add("b.npy", header_b, tensor_b.buffer());
//   detail::AtomicFile file(path);
//   zip.write(file);
//   file.commit();

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "ckpt/buffer.h"
#include "formats/zip/layout.h"
#include "io/atomic_file.h"

namespace ckpt::zip_detail {

struct ZipWriterOptions {
  // Each entry's data starts at a multiple of this (a power of two up to
  // 32768; 1 = no padding). The padding is an extra field of the local
  // header with id `padding_extra_id` and data bytes `padding_fill`, present
  // in every local header when alignment > 1 (as PyTorch writes it).
  uint32_t alignment = 1;
  uint16_t padding_extra_id = kPaddingExtraId;
  std::byte padding_fill = kPaddingFill;
  // A size or offset above this is written in zip64 form. APPNOTE allows
  // 32-bit values up to 0xFFFFFFFE; Python's zipfile (and so np.savez) uses
  // zip64 above 2^31 - 1.
  uint64_t zip64_limit = 0xFFFFFFFE;
  // Give every local header a zip64 extra field, whatever the size (np.savez
  // passes force_zip64=True).
  bool force_zip64_local = false;
  // Write crc and sizes in a data descriptor after each entry's data (flag
  // bit 3) instead of in the local header.
  bool data_descriptor = false;
  // ...except for empty entries, which then have neither the flag nor the
  // descriptor (miniz).
  bool no_descriptor_when_empty = false;
  uint16_t dos_time = kDosTimeMidnight;
  uint16_t dos_date = kDosDate1980;
  uint16_t made_by_system = kSystemUnix;
  // Unix mode 0600 in the high half, as Python's zipfile writes it.
  uint32_t external_attributes = 0600u << 16;
  // "Version needed to extract" of entries that need no zip64 (and the low
  // byte of "version made by"); PyTorch's miniz writes 0.
  uint16_t version = kVersionDefault;
  // Set the UTF-8 flag on every entry, not only on non-ASCII names (miniz).
  bool utf8_flag_always = false;
  // Write the zip64 end record and locator even when nothing needs them
  // (miniz), with this "version made by".
  bool zip64_end_always = false;
  uint16_t zip64_end_made_by = kVersionZip64;
  // Threads for the data writes; 0 picks AtomicFile's default.
  unsigned threads = 0;
  // The archive comment, written after the end record (empty: none). At most
  // 65535 bytes (its length is a u16), and free of the end record's
  // signature "PK\5\6": readers find the end record by scanning backwards
  // for it (Python's zipfile takes the last one), so a comment holding it
  // would hide the real one.
  std::string comment;
  // write() puts the archive at this offset of its file (an archive embedded
  // in a larger file, as PyTorch DCP's .distcp files hold one per item);
  // offsets inside the archive, data_offset() included, count from its start.
  uint64_t file_offset = 0;
};

class ZipWriter {
 public:
  // Throws Error{kInvalidArgument} for an alignment that is not a power of
  // two up to 32768, or a comment longer than 65535 bytes or holding "PK\5\6".
  explicit ZipWriter(ZipWriterOptions options = {});

  // Adds a stored entry whose bytes are `prefix` followed by `data` (for npz:
  // the .npy header, then the tensor's bytes). `data` is kept alive and read
  // only during write(). Names with a non-ASCII byte get the UTF-8 flag.
  // Throws Error{kInvalidArgument} for a duplicate name, an empty name, a
  // name with a NUL byte or one longer than 65535 bytes.
  void add(std::string name, std::string prefix, Buffer data);

  size_t size() const noexcept { return entries_.size(); }

  // Lays the archive out and writes all of it through `file` in parallel
  // positioned writes, headers and small entries gathered into large writes
  // (their CRC-32 computed up front; large entries' while they are written,
  // their CRC-holding headers after). Then the central directory.
  // Commit is the caller's. Returns the archive's size in bytes.
  // Throws whatever `file` throws (Error{kIo}).
  uint64_t write(detail::AtomicFile& file);

  // After write(): the offset of entry `index`'s data (its prefix) in the archive.
  uint64_t data_offset(size_t index) const { return entries_.at(index).data_offset; }

 private:
  struct Entry {
    std::string name;
    std::string prefix;
    Buffer data;
    uint64_t size = 0;  // prefix + data
    uint64_t local_header_offset = 0;
    uint64_t data_offset = 0;
    bool local_zip64 = false;
    uint16_t extra_length = 0;
    uint32_t crc32 = 0;
  };
  void lay_out(Entry& entry, uint64_t& cursor) const;
  std::string local_header(const Entry& entry) const;
  std::string data_descriptor(const Entry& entry) const;
  uint16_t utf8_flag(const Entry& entry) const;
  bool has_descriptor(const Entry& entry) const;
  void append_central_header(std::string& out, const Entry& entry) const;
  std::string end_records(uint64_t directory_offset, uint64_t directory_size) const;

  ZipWriterOptions options_;
  std::vector<Entry> entries_;
  std::unordered_set<std::string> names_;
};

}  // namespace ckpt::zip_detail
