#include "formats/zip/reader.h"

#include <libdeflate.h>

#include <algorithm>
#include <array>
#include <optional>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/text.h"
#include "formats/zip/layout.h"

namespace ckpt::zip_detail {
namespace {

// Deflate's best case is a 258-byte match per 2 bits of code, so a stream
// inflates to at most about 1032 times its size (zlib's tech notes). A
// declared size beyond this bound is a lie, refused before allocating.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kDeflateSlack = 1024;

// CP437, the code page of names without the UTF-8 flag (APPNOTE appendix D):
// the Unicode code points of bytes 0x80..0xFF (bytes below are ASCII).
// Generated from Python's codec: bytes(range(128, 256)).decode('cp437').
constexpr std::array<uint16_t, 128> kCp437High = {
    0x00C7, 0x00FC, 0x00E9, 0x00E2, 0x00E4, 0x00E0, 0x00E5, 0x00E7,
    0x00EA, 0x00EB, 0x00E8, 0x00EF, 0x00EE, 0x00EC, 0x00C4, 0x00C5,
    0x00C9, 0x00E6, 0x00C6, 0x00F4, 0x00F6, 0x00F2, 0x00FB, 0x00F9,
    0x00FF, 0x00D6, 0x00DC, 0x00A2, 0x00A3, 0x00A5, 0x20A7, 0x0192,
    0x00E1, 0x00ED, 0x00F3, 0x00FA, 0x00F1, 0x00D1, 0x00AA, 0x00BA,
    0x00BF, 0x2310, 0x00AC, 0x00BD, 0x00BC, 0x00A1, 0x00AB, 0x00BB,
    0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562, 0x2556,
    0x2555, 0x2563, 0x2551, 0x2557, 0x255D, 0x255C, 0x255B, 0x2510,
    0x2514, 0x2534, 0x252C, 0x251C, 0x2500, 0x253C, 0x255E, 0x255F,
    0x255A, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550, 0x256C, 0x2567,
    0x2568, 0x2564, 0x2565, 0x2559, 0x2558, 0x2552, 0x2553, 0x256B,
    0x256A, 0x2518, 0x250C, 0x2588, 0x2584, 0x258C, 0x2590, 0x2580,
    0x03B1, 0x00DF, 0x0393, 0x03C0, 0x03A3, 0x03C3, 0x00B5, 0x03C4,
    0x03A6, 0x0398, 0x03A9, 0x03B4, 0x221E, 0x03C6, 0x03B5, 0x2229,
    0x2261, 0x00B1, 0x2265, 0x2264, 0x2320, 0x2321, 0x00F7, 0x2248,
    0x00B0, 0x2219, 0x00B7, 0x221A, 0x207F, 0x00B2, 0x25A0, 0x00A0,
};

std::string cp437_to_utf8(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x80) {
      out.push_back(c);
      continue;
    }
    const uint16_t code = kCp437High[byte - 0x80];
    if (code < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    } else {
      out.push_back(static_cast<char>(0xE0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    }
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
  return out;
}

// a + b <= limit, without overflow.
bool fits(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

[[noreturn]] void corrupt(const detail::MappedFile& file, std::string message, std::optional<uint64_t> offset,
                          std::string entry = {}) {
  throw Error(ErrorCode::kCorrupt, std::move(message),
              {.path = file.path(), .entry = std::move(entry), .offset = offset});
}

[[noreturn]] void unsupported(const detail::MappedFile& file, std::string message, std::optional<uint64_t> offset,
                              std::string entry = {}) {
  throw Error(ErrorCode::kUnsupported, std::move(message),
              {.path = file.path(), .entry = std::move(entry), .offset = offset});
}

}  // namespace

ZipReader::ZipReader(std::shared_ptr<const detail::MappedFile> file, const ZipOpenOptions& options)
    : file_(std::move(file)) {
  base_ = options.window_offset;
  size_ = options.window_size == UINT64_MAX && base_ <= file_->size() ? file_->size() - base_ : options.window_size;
  if (!fits(base_, size_, file_->size())) {
    corrupt(*file_, "zip archive (" + std::to_string(size_) + " bytes at offset " + std::to_string(base_) +
                        ") extends past the end of the file (" + std::to_string(file_->size()) + " bytes)", base_);
  }
  const Directory directory = read_end_records();
  read_central_directory(directory);
  if (!options.local_headers) return;
  read_local_headers();
  check_no_overlap();
}

ZipReader::Directory ZipReader::read_end_records() {
  const detail::MappedFile& file = *file_;
  const uint64_t size = size_;
  const std::byte* data = file.bytes().data() + base_;
  if (size < kEndRecordSize) {
    corrupt(file, "too small for a zip archive (" + std::to_string(size) +
                      " bytes; the end of central directory record alone takes 22)", std::nullopt);
  }

  // The end record is the last 22 bytes plus a comment of up to 65535 bytes.
  // Scan backwards for its signature; the right one's comment length reaches
  // exactly to the end of the file.
  const uint64_t last = size - kEndRecordSize;
  const uint64_t first = last > kMaxCommentLength ? last - kMaxCommentLength : 0;
  std::optional<uint64_t> end_offset;
  std::optional<uint64_t> lying_candidate;
  for (uint64_t at = last + 1; at-- > first;) {
    if (load_u32(data + at) != kEndRecordSignature) continue;
    const uint16_t comment_length = load_u16(data + at + end_record::kCommentLength);
    if (at + kEndRecordSize + comment_length == size) {
      end_offset = at;
      break;
    }
    if (!lying_candidate) lying_candidate = at;
  }
  if (!end_offset) {
    if (lying_candidate) {
      corrupt(file, "the end of central directory record's comment length (" +
                        std::to_string(load_u16(data + *lying_candidate + end_record::kCommentLength)) +
                        ") does not reach the end of the file", *lying_candidate + end_record::kCommentLength);
    }
    corrupt(file, "no end of central directory record (not a zip archive, or truncated)", std::nullopt);
  }
  const std::byte* end = data + *end_offset;
  comment_ = std::string_view(reinterpret_cast<const char*>(end + kEndRecordSize),
                              static_cast<size_t>(size - *end_offset - kEndRecordSize));
  comment_offset_ = *end_offset + kEndRecordSize;

  if (load_u16(end + end_record::kDisk) != 0 || load_u16(end + end_record::kDirectoryDisk) != 0) {
    unsupported(file, "split (multi-disk) zip archives are not supported", *end_offset + end_record::kDisk);
  }
  Directory directory;
  const uint16_t entries_on_disk = load_u16(end + end_record::kEntriesOnDisk);
  const uint16_t entries16 = load_u16(end + end_record::kEntries);
  const uint32_t size32 = load_u32(end + end_record::kDirectorySize);
  const uint32_t offset32 = load_u32(end + end_record::kDirectoryOffset);
  if (entries_on_disk != entries16) {
    corrupt(file, "end record counts " + std::to_string(entries_on_disk) + " entries on this disk but " +
                      std::to_string(entries16) + " in total", *end_offset + end_record::kEntriesOnDisk);
  }
  directory.entries = entries16;
  directory.size = size32;
  directory.offset = offset32;
  directory.end_limit = *end_offset;

  // Zip64: a locator right before the end record points at the zip64 end record.
  const bool has_locator = *end_offset >= kZip64LocatorSize &&
                           load_u32(data + *end_offset - kZip64LocatorSize) == kZip64EndLocatorSignature;
  if (!has_locator) return directory;

  const uint64_t locator_offset = *end_offset - kZip64LocatorSize;
  const std::byte* locator = data + locator_offset;
  if (load_u32(locator + zip64_locator::kDisk) != 0 || load_u32(locator + zip64_locator::kDiskCount) > 1) {
    unsupported(file, "split (multi-disk) zip64 archives are not supported", locator_offset + zip64_locator::kDisk);
  }
  const uint64_t record_offset = load_u64(locator + zip64_locator::kRecordOffset);
  if (!fits(record_offset, kZip64EndRecordSize, locator_offset)) {
    corrupt(file, "zip64 locator points at offset " + std::to_string(record_offset) +
                      ", where no 56-byte zip64 end record fits before the locator",
            locator_offset + zip64_locator::kRecordOffset);
  }
  const std::byte* record = data + record_offset;
  if (load_u32(record) != kZip64EndRecordSignature) {
    corrupt(file, "zip64 locator does not point at a zip64 end of central directory record", record_offset);
  }
  const uint64_t record_size = load_u64(record + zip64_end::kRecordSize);
  if (record_size < kZip64EndRecordRemainder || !fits(record_offset + 12, record_size, locator_offset)) {
    corrupt(file, "zip64 end record declares an impossible size of " + std::to_string(record_size),
            record_offset + zip64_end::kRecordSize);
  }
  if (load_u32(record + zip64_end::kDisk) != 0 || load_u32(record + zip64_end::kDirectoryDisk) != 0) {
    unsupported(file, "split (multi-disk) zip64 archives are not supported", record_offset + zip64_end::kDisk);
  }
  const uint64_t entries64 = load_u64(record + zip64_end::kEntries);
  if (load_u64(record + zip64_end::kEntriesOnDisk) != entries64) {
    corrupt(file, "zip64 end record: entry counts disagree", record_offset + zip64_end::kEntriesOnDisk);
  }
  const uint64_t size64 = load_u64(record + zip64_end::kDirectorySize);
  const uint64_t offset64 = load_u64(record + zip64_end::kDirectoryOffset);
  // Each 32-bit field is either the sentinel or the same value.
  if ((entries16 != kZip64Sentinel16 && entries16 != entries64) ||
      (size32 != kZip64Sentinel32 && size32 != size64) || (offset32 != kZip64Sentinel32 && offset32 != offset64)) {
    corrupt(file, "end record and zip64 end record disagree about the central directory", *end_offset);
  }
  directory.entries = entries64;
  directory.size = size64;
  directory.offset = offset64;
  directory.end_limit = record_offset;
  return directory;
}

void ZipReader::read_central_directory(const Directory& directory) {
  const detail::MappedFile& file = *file_;
  const std::byte* data = file.bytes().data() + base_;
  if (!fits(directory.offset, directory.size, directory.end_limit)) {
    corrupt(file, "central directory (" + std::to_string(directory.size) + " bytes at offset " +
                      std::to_string(directory.offset) + ") extends past the end records at offset " +
                      std::to_string(directory.end_limit), directory.offset);
  }
  // Every header takes at least 46 bytes: this bounds the count (and memory).
  if (directory.entries > directory.size / kCentralHeaderSize) {
    corrupt(file, "end record counts " + std::to_string(directory.entries) +
                      " entries, more than a central directory of " + std::to_string(directory.size) +
                      " bytes can hold", directory.offset);
  }
  directory_offset_ = directory.offset;
  const uint64_t directory_end = directory.offset + directory.size;
  entries_.reserve(static_cast<size_t>(directory.entries));
  index_.reserve(static_cast<size_t>(directory.entries));
  uint64_t at = directory.offset;
  for (uint64_t i = 0; i < directory.entries; ++i) {
    if (!fits(at, kCentralHeaderSize, directory_end)) {
      corrupt(file, "central directory ends inside header " + std::to_string(i) + " of " +
                        std::to_string(directory.entries), at);
    }
    const std::byte* header = data + at;
    if (load_u32(header) != kCentralHeaderSignature) {
      corrupt(file, "central directory header " + std::to_string(i) + " has a wrong signature", at);
    }
    const uint16_t name_length = load_u16(header + central::kNameLength);
    const uint16_t extra_length = load_u16(header + central::kExtraLength);
    const uint16_t comment_length = load_u16(header + central::kCommentLength);
    const uint64_t record_size = kCentralHeaderSize + uint64_t{name_length} + extra_length + comment_length;
    if (!fits(at, record_size, directory_end)) {
      corrupt(file, "central directory header " + std::to_string(i) +
                        "'s name, extra field and comment extend past the central directory", at);
    }
    ZipEntry entry;
    const std::string_view raw_name(reinterpret_cast<const char*>(header + kCentralHeaderSize), name_length);
    entry.flags = load_u16(header + central::kFlags);
    if (raw_name.find('\0') != std::string_view::npos) {
      corrupt(file, "entry name contains a NUL byte", at + kCentralHeaderSize);
    }
    if (entry.flags & kFlagUtf8) {
      if (!detail::valid_utf8(raw_name)) {
        corrupt(file, "entry name is flagged UTF-8 but is not valid UTF-8", at + kCentralHeaderSize);
      }
      entry.name = std::string(raw_name);
    } else {
      entry.name = cp437_to_utf8(raw_name);
    }
    if (entry.flags & (kFlagEncrypted | kFlagStrongEncryption)) {
      unsupported(file, "encrypted zip entries are not supported", at + central::kFlags, entry.name);
    }
    entry.method = load_u16(header + central::kMethod);
    entry.crc32 = load_u32(header + central::kCrc32);
    entry.compressed_size = load_u32(header + central::kCompressedSize);
    entry.uncompressed_size = load_u32(header + central::kUncompressedSize);
    entry.local_header_offset = load_u32(header + central::kLocalHeaderOffset);
    const uint16_t disk = load_u16(header + central::kDiskStart);

    // Zip64 extended information: the 64-bit values of the fields that hold
    // the sentinel, in APPNOTE 4.5.3's order.
    const bool need_uncompressed = entry.uncompressed_size == kZip64Sentinel32;
    const bool need_compressed = entry.compressed_size == kZip64Sentinel32;
    const bool need_offset = entry.local_header_offset == kZip64Sentinel32;
    const bool need_disk = disk == kZip64Sentinel16;
    bool found_zip64 = false;
    const uint64_t extra_offset = at + kCentralHeaderSize + name_length;
    uint64_t field = 0;
    while (field < extra_length) {
      if (extra_length - field < kExtraHeaderSize) {
        corrupt(file, "truncated extra field", extra_offset + field, entry.name);
      }
      const std::byte* extra = data + extra_offset + field;
      const uint16_t id = load_u16(extra);
      const uint16_t length = load_u16(extra + 2);
      if (length > extra_length - field - kExtraHeaderSize) {
        corrupt(file, "extra field 0x" + detail::hex_digits(id, 4) + " extends past the extra data",
                extra_offset + field, entry.name);
      }
      if (id == kZip64ExtraId && !found_zip64) {
        found_zip64 = true;
        const uint64_t wanted = 8 * (uint64_t{need_uncompressed} + need_compressed + need_offset) + 4 * need_disk;
        if (length < wanted) {
          corrupt(file, "zip64 extra field holds " + std::to_string(length) + " bytes, " +
                            std::to_string(wanted) + " needed", extra_offset + field, entry.name);
        }
        const std::byte* value = extra + kExtraHeaderSize;
        if (need_uncompressed) entry.uncompressed_size = load_u64(value), value += 8;
        if (need_compressed) entry.compressed_size = load_u64(value), value += 8;
        if (need_offset) entry.local_header_offset = load_u64(value), value += 8;
        if (need_disk && load_u32(value) != 0) {
          unsupported(file, "split (multi-disk) zip archives are not supported", at + central::kDiskStart,
                      entry.name);
        }
      }
      field += kExtraHeaderSize + length;
    }
    // Without a zip64 field a sentinel is the literal value; the checks below
    // judge sizes and offsets. A disk other than 0 is a split archive.
    if ((need_disk && !found_zip64) || (!need_disk && disk != 0)) {
      unsupported(file, "split (multi-disk) zip archives are not supported", at + central::kDiskStart, entry.name);
    }
    if (entry.method == kMethodStored && entry.compressed_size != entry.uncompressed_size) {
      corrupt(file, "stored entry has compressed size " + std::to_string(entry.compressed_size) +
                        " but uncompressed size " + std::to_string(entry.uncompressed_size), at, entry.name);
    }
    // The index views the names in entries_, which never reallocates (reserved).
    entries_.push_back(std::move(entry));
    if (!index_.emplace(entries_.back().name, entries_.size() - 1).second) {
      corrupt(file, "duplicate entry name", at, entries_.back().name);
    }
    at += record_size;
  }
  if (at != directory_end) {
    corrupt(file, "central directory holds " + std::to_string(directory_end - at) +
                      " bytes after its " + std::to_string(directory.entries) +
                      " declared entries (entry count mismatch)", at);
  }
}

void ZipReader::read_local_headers() {
  const detail::MappedFile& file = *file_;
  const std::byte* data = file.bytes().data() + base_;
  std::vector<std::byte> header_buffer(kLocalHeaderSize + 256);
  for (ZipEntry& entry : entries_) {
    const uint64_t at = entry.local_header_offset;
    if (!fits(at, kLocalHeaderSize, directory_offset_)) {
      corrupt(file, "local header offset " + std::to_string(at) + " lies past the central directory", at, entry.name);
    }
    // The header and name are read with pread rather than through the
    // mapping: touching one page per entry (and unmapping them later) costs
    // more than the reads when an archive has thousands of entries.
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(kLocalHeaderSize + entry.name.size(), directory_offset_ - at));
    if (header_buffer.size() < want) header_buffer.resize(want);
    file.copy_out(data + at, std::span(header_buffer.data(), want));
    const std::byte* header = header_buffer.data();
    if (load_u32(header) != kLocalHeaderSignature) {
      corrupt(file, "local header has a wrong signature", at, entry.name);
    }
    const uint16_t name_length = load_u16(header + local::kNameLength);
    const uint16_t extra_length = load_u16(header + local::kExtraLength);
    const uint64_t data_offset = at + kLocalHeaderSize + name_length + extra_length;
    if (data_offset > directory_offset_) {
      corrupt(file, "local header's name and extra field extend past the central directory", at, entry.name);
    }
    // Decoded with the central header's flags, equal names mean equal bytes.
    // (A local name longer than what was read cannot equal the central one.)
    const std::string_view read_name(reinterpret_cast<const char*>(header + kLocalHeaderSize),
                                     kLocalHeaderSize + name_length <= want ? name_length : 0);
    const bool same = (entry.flags & kFlagUtf8) ? read_name.size() == name_length && read_name == entry.name
                                                : cp437_to_utf8(read_name) == entry.name &&
                                                      read_name.size() == name_length;
    if (!same) {
      const std::string_view shown(reinterpret_cast<const char*>(data + at + kLocalHeaderSize),
                                   static_cast<size_t>(std::min<uint64_t>(name_length, directory_offset_ - at -
                                                                                           kLocalHeaderSize)));
      const std::string decoded = (entry.flags & kFlagUtf8) ? std::string(shown) : cp437_to_utf8(shown);
      corrupt(file, "local header names the entry " + detail::quoted(decoded) + " instead", at + kLocalHeaderSize, entry.name);
    }
    if (load_u16(header + local::kMethod) != entry.method) {
      corrupt(file, "local header's compression method " + std::to_string(load_u16(header + local::kMethod)) +
                        " disagrees with the central directory's " + std::to_string(entry.method),
              at + local::kMethod, entry.name);
    }
    // Without a data descriptor the local sizes are real; where they are
    // 32-bit values (not the zip64 sentinel) they must agree.
    const uint16_t local_flags = load_u16(header + local::kFlags);
    if (!(local_flags & kFlagDataDescriptor)) {
      const uint32_t local_compressed = load_u32(header + local::kCompressedSize);
      if (local_compressed != kZip64Sentinel32 && local_compressed != entry.compressed_size) {
        corrupt(file, "local header's compressed size " + std::to_string(local_compressed) +
                          " disagrees with the central directory's " + std::to_string(entry.compressed_size),
                at + local::kCompressedSize, entry.name);
      }
    }
    if (!fits(data_offset, entry.compressed_size, directory_offset_)) {
      corrupt(file, "entry data (" + std::to_string(entry.compressed_size) + " bytes at offset " +
                        std::to_string(data_offset) + ") extends past the central directory at offset " +
                        std::to_string(directory_offset_), data_offset, entry.name);
    }
    entry.data_offset = data_offset;
  }
}

void ZipReader::check_no_overlap() const {
  std::vector<const ZipEntry*> by_offset;
  by_offset.reserve(entries_.size());
  for (const ZipEntry& entry : entries_) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->local_header_offset < b->local_header_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& previous = *by_offset[i - 1];
    const ZipEntry& next = *by_offset[i];
    if (previous.data_offset + previous.compressed_size > next.local_header_offset) {
      corrupt(*file_, "entry overlaps entry " + detail::quoted(previous.name), next.local_header_offset, next.name);
    }
  }
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  const auto found = index_.find(name);
  return found == index_.end() ? nullptr : &entries_[found->second];
}

Buffer ZipReader::read(const ZipEntry& entry, const ZipReadOptions& options) const {
  const detail::MappedFile& file = *file_;
  if (entry.method == kMethodStored) {
    Buffer bytes = file.slice(base_ + entry.data_offset, entry.compressed_size);
    if (options.verify_crc) {
      const uint32_t actual = detail::crc32(bytes.bytes());
      if (actual != entry.crc32) {
        corrupt(file, "CRC-32 mismatch: stored 0x" + detail::hex8(entry.crc32) + ", the data gives 0x" + detail::hex8(actual),
                entry.data_offset, entry.name);
      }
    }
    return bytes;
  }
  if (entry.method != kMethodDeflated) {
    unsupported(file, "compression method " + std::to_string(entry.method) +
                          " is not supported (only 0, stored, and 8, deflated)",
                entry.local_header_offset + local::kMethod, entry.name);
  }
  if (entry.uncompressed_size > entry.compressed_size * kMaxDeflateRatio + kDeflateSlack) {
    corrupt(file, "declared uncompressed size " + std::to_string(entry.uncompressed_size) +
                      " is more than deflate can produce from " + std::to_string(entry.compressed_size) + " bytes",
            entry.data_offset, entry.name);
  }
  if (entry.uncompressed_size > SIZE_MAX) {
    unsupported(file, "entry too large for this machine", entry.data_offset, entry.name);
  }
  Buffer output = Buffer::allocate(static_cast<size_t>(entry.uncompressed_size));
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> decompressor(
      libdeflate_alloc_decompressor(), libdeflate_free_decompressor);
  if (!decompressor) throw std::bad_alloc();
  const std::span<const std::byte> input = file.bytes().subspan(base_ + entry.data_offset, entry.compressed_size);
  const std::span<std::byte> out = output.mutable_bytes();
  size_t produced = 0;
  const libdeflate_result result = libdeflate_deflate_decompress(
      decompressor.get(), input.data(), input.size(), out.data(), out.size(), &produced);
  if (result == LIBDEFLATE_INSUFFICIENT_SPACE) {
    corrupt(file, "deflate stream inflates to more than the declared " + std::to_string(entry.uncompressed_size) +
                      " bytes", entry.data_offset, entry.name);
  }
  if (result != LIBDEFLATE_SUCCESS) {
    corrupt(file, "deflate stream is corrupt", entry.data_offset, entry.name);
  }
  if (produced != entry.uncompressed_size) {
    corrupt(file, "deflate stream inflates to " + std::to_string(produced) + " bytes, declared " +
                      std::to_string(entry.uncompressed_size), entry.data_offset, entry.name);
  }
  const uint32_t actual = detail::crc32(output.bytes());
  if (actual != entry.crc32) {
    corrupt(file, "CRC-32 mismatch: stored 0x" + detail::hex8(entry.crc32) + ", the data gives 0x" + detail::hex8(actual),
            entry.data_offset, entry.name);
  }
  return output;
}

bool detect_zip(std::span<const std::byte> head, uint64_t file_size) {
  if (head.size() >= 4 && load_u32(head.data()) == kLocalHeaderSignature) return true;
  if (head.size() >= kEndRecordSize && load_u32(head.data()) == kEndRecordSignature) {
    return file_size == kEndRecordSize + load_u16(head.data() + end_record::kCommentLength);
  }
  return false;
}

std::string_view first_entry_name(std::span<const std::byte> head) {
  if (head.size() < kLocalHeaderSize || load_u32(head.data()) != kLocalHeaderSignature) return {};
  const uint16_t name_length = load_u16(head.data() + local::kNameLength);
  if (head.size() - kLocalHeaderSize < name_length) return {};
  return {reinterpret_cast<const char*>(head.data() + kLocalHeaderSize), name_length};
}

}  // namespace ckpt::zip_detail
