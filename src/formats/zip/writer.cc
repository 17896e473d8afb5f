#include "formats/zip/writer.h"

#include <algorithm>
#include <deque>

#include "ckpt/error.h"
#include "core/checksum.h"

namespace ckpt::zip_detail {
namespace {

constexpr uint32_t kMaxAlignment = 32768;
constexpr uint64_t kZip64LocalExtraSize = kExtraHeaderSize + 16;  // uncompressed + compressed size
// Entries below this size get their CRC-32 before the writes, so that their
// headers can be gathered with their data (as AtomicFile gathers spans).
constexpr uint64_t kPrecomputeCrcBelow = 256 * 1024;

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace

ZipWriter::ZipWriter(ZipWriterOptions options) : options_(options) {
  const uint32_t alignment = options_.alignment;
  if (alignment == 0 || alignment > kMaxAlignment || (alignment & (alignment - 1)) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "zip alignment must be a power of two up to 32768, not " + std::to_string(alignment));
  }
  if (options_.comment.size() > kMaxCommentLength) {
    throw Error(ErrorCode::kInvalidArgument, "a zip archive comment has at most 65535 bytes, not " +
                                                 std::to_string(options_.comment.size()));
  }
  if (options_.comment.find(kEndRecordSignatureBytes) != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                "a zip archive comment cannot hold the end record's signature PK\\5\\6 "
                "(readers scanning for the end record would stop there)");
  }
}

void ZipWriter::add(std::string name, std::string prefix, Buffer data) {
  if (name.empty() || name.size() > 0xFFFF || name.find('\0') != std::string::npos) {
    throw Error(ErrorCode::kInvalidArgument,
                "a zip entry name must have 1 to 65535 bytes and no NUL byte", {.entry = name});
  }
  if (!names_.insert(name).second) {
    throw Error(ErrorCode::kInvalidArgument, "duplicate zip entry name", {.entry = name});
  }
  Entry entry;
  entry.size = prefix.size() + data.size();
  entry.name = std::move(name);
  entry.prefix = std::move(prefix);
  entry.data = std::move(data);
  entries_.push_back(std::move(entry));
}

void ZipWriter::lay_out(Entry& entry, uint64_t& cursor) const {
  entry.local_header_offset = cursor;
  entry.local_zip64 = options_.force_zip64_local || entry.size > options_.zip64_limit;
  uint64_t extra = entry.local_zip64 ? kZip64LocalExtraSize : 0;
  if (options_.alignment > 1) {
    const uint64_t start = cursor + kLocalHeaderSize + entry.name.size() + extra + kExtraHeaderSize;
    const uint64_t padding = (options_.alignment - start % options_.alignment) % options_.alignment;
    extra += kExtraHeaderSize + padding;
  }
  entry.extra_length = static_cast<uint16_t>(extra);
  entry.data_offset = cursor + kLocalHeaderSize + entry.name.size() + extra;
  cursor = entry.data_offset + entry.size;
  if (has_descriptor(entry)) cursor += entry.local_zip64 ? kDataDescriptorSize64 : kDataDescriptorSize32;
}

std::string ZipWriter::local_header(const Entry& entry) const {
  const bool descriptor = has_descriptor(entry);
  const uint16_t flags = static_cast<uint16_t>(utf8_flag(entry) | (descriptor ? kFlagDataDescriptor : 0));
  // With a data descriptor, crc and sizes are zero here (as Python writes them).
  const uint64_t size = descriptor ? 0 : entry.size;
  const uint32_t crc = descriptor ? 0 : entry.crc32;
  const uint32_t size32 = entry.local_zip64 ? kZip64Sentinel32 : static_cast<uint32_t>(size);

  std::string out;
  out.reserve(kLocalHeaderSize + entry.name.size() + entry.extra_length + entry.prefix.size());
  append_u32(out, kLocalHeaderSignature);
  append_u16(out, entry.local_zip64 ? kVersionZip64 : options_.version);
  append_u16(out, flags);
  append_u16(out, kMethodStored);
  append_u16(out, options_.dos_time);
  append_u16(out, options_.dos_date);
  append_u32(out, crc);
  append_u32(out, size32);  // compressed
  append_u32(out, size32);  // uncompressed
  append_u16(out, static_cast<uint16_t>(entry.name.size()));
  append_u16(out, entry.extra_length);
  out += entry.name;
  if (entry.local_zip64) {
    append_u16(out, kZip64ExtraId);
    append_u16(out, 16);
    append_u64(out, size);  // uncompressed
    append_u64(out, size);  // compressed
  }
  if (options_.alignment > 1) {
    const uint16_t padding = static_cast<uint16_t>(entry.extra_length - (entry.local_zip64 ? kZip64LocalExtraSize : 0) -
                                                   kExtraHeaderSize);
    append_u16(out, options_.padding_extra_id);
    append_u16(out, padding);
    out.append(padding, static_cast<char>(options_.padding_fill));
  }
  out += entry.prefix;
  return out;
}

std::string ZipWriter::data_descriptor(const Entry& entry) const {
  std::string out;
  append_u32(out, kDataDescriptorSignature);
  append_u32(out, entry.crc32);
  if (entry.local_zip64) {
    append_u64(out, entry.size);
    append_u64(out, entry.size);
  } else {
    append_u32(out, static_cast<uint32_t>(entry.size));
    append_u32(out, static_cast<uint32_t>(entry.size));
  }
  return out;
}

void ZipWriter::append_central_header(std::string& out, const Entry& entry) const {
  const bool zip64_sizes = entry.size > options_.zip64_limit;
  const bool zip64_offset = entry.local_header_offset > options_.zip64_limit;
  const uint16_t version = (entry.local_zip64 || zip64_sizes || zip64_offset) ? kVersionZip64 : options_.version;
  const uint16_t flags =
      static_cast<uint16_t>(utf8_flag(entry) | (has_descriptor(entry) ? kFlagDataDescriptor : 0));
  const uint16_t extra_length =
      static_cast<uint16_t>(zip64_sizes || zip64_offset ? kExtraHeaderSize + 16 * zip64_sizes + 8 * zip64_offset : 0);
  const uint32_t size32 = zip64_sizes ? kZip64Sentinel32 : static_cast<uint32_t>(entry.size);

  append_u32(out, kCentralHeaderSignature);
  append_u16(out, static_cast<uint16_t>(options_.made_by_system << 8 | version));
  append_u16(out, version);
  append_u16(out, flags);
  append_u16(out, kMethodStored);
  append_u16(out, options_.dos_time);
  append_u16(out, options_.dos_date);
  append_u32(out, entry.crc32);
  append_u32(out, size32);  // compressed
  append_u32(out, size32);  // uncompressed
  append_u16(out, static_cast<uint16_t>(entry.name.size()));
  append_u16(out, extra_length);
  append_u16(out, 0);  // comment length
  append_u16(out, 0);  // disk number start
  append_u16(out, 0);  // internal attributes
  append_u32(out, options_.external_attributes);
  append_u32(out, zip64_offset ? kZip64Sentinel32 : static_cast<uint32_t>(entry.local_header_offset));
  out += entry.name;
  if (extra_length > 0) {
    append_u16(out, kZip64ExtraId);
    append_u16(out, static_cast<uint16_t>(extra_length - kExtraHeaderSize));
    if (zip64_sizes) {
      append_u64(out, entry.size);  // uncompressed
      append_u64(out, entry.size);  // compressed
    }
    if (zip64_offset) append_u64(out, entry.local_header_offset);
  }
}

std::string ZipWriter::end_records(uint64_t directory_offset, uint64_t directory_size) const {
  const uint64_t count = entries_.size();
  std::string out;
  const bool zip64 = options_.zip64_end_always || count > kZip64Sentinel16 ||
                     directory_offset > options_.zip64_limit || directory_size > options_.zip64_limit;
  if (zip64) {
    const uint64_t record_offset = directory_offset + directory_size;
    append_u32(out, kZip64EndRecordSignature);
    append_u64(out, kZip64EndRecordRemainder);
    append_u16(out, options_.zip64_end_made_by);  // Python: no host byte; miniz: UNIX 3.0
    append_u16(out, kVersionZip64);               // needed
    append_u32(out, 0);              // this disk
    append_u32(out, 0);              // disk with the central directory
    append_u64(out, count);
    append_u64(out, count);
    append_u64(out, directory_size);
    append_u64(out, directory_offset);
    append_u32(out, kZip64EndLocatorSignature);
    append_u32(out, 0);  // disk with the zip64 end record
    append_u64(out, record_offset);
    append_u32(out, 1);  // total disks
  }
  const auto count16 = static_cast<uint16_t>(std::min<uint64_t>(count, kZip64Sentinel16));
  append_u32(out, kEndRecordSignature);
  append_u16(out, 0);
  append_u16(out, 0);
  append_u16(out, count16);
  append_u16(out, count16);
  append_u32(out, static_cast<uint32_t>(std::min<uint64_t>(directory_size, kZip64Sentinel32)));
  append_u32(out, static_cast<uint32_t>(std::min<uint64_t>(directory_offset, kZip64Sentinel32)));
  append_u16(out, static_cast<uint16_t>(options_.comment.size()));
  out += options_.comment;
  return out;
}

bool ZipWriter::has_descriptor(const Entry& entry) const {
  return options_.data_descriptor && !(options_.no_descriptor_when_empty && entry.size == 0);
}

uint16_t ZipWriter::utf8_flag(const Entry& entry) const {
  return options_.utf8_flag_always || !is_ascii(entry.name) ? kFlagUtf8 : 0;
}

uint64_t ZipWriter::write(detail::AtomicFile& file) {
  uint64_t cursor = 0;
  for (Entry& entry : entries_) lay_out(entry, cursor);
  const uint64_t directory_offset = cursor;

  // Small entries: CRC-32 now, so that header, data and descriptor go out as
  // neighbouring spans that AtomicFile gathers into one large write.
  std::vector<bool> crc_known(entries_.size(), false);
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& entry = entries_[i];
    if (entry.size >= kPrecomputeCrcBelow) continue;
    entry.crc32 = detail::crc32(entry.data.bytes(), detail::crc32(std::as_bytes(std::span(entry.prefix))));
    crc_known[i] = true;
  }

  std::deque<std::string> headers;  // stable addresses for the spans
  std::vector<uint32_t> crcs(entries_.size());
  std::vector<detail::WriteSpan> spans;
  spans.reserve(entries_.size() * 3);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    // The local header holds the CRC unless a data descriptor does.
    if (crc_known[i] || has_descriptor(entry)) {
      const std::string& header = headers.emplace_back(local_header(entry));
      spans.push_back({.bytes = std::as_bytes(std::span(header)), .offset = entry.local_header_offset});
    }
    if (!entry.data.empty()) {
      detail::WriteSpan span{.bytes = entry.data.bytes(), .offset = entry.data_offset + entry.prefix.size()};
      if (!crc_known[i]) {
        crcs[i] = detail::crc32(std::as_bytes(std::span(entry.prefix)));
        uint32_t* crc = &crcs[i];
        span.on_chunk = [crc](std::span<const std::byte> chunk) { *crc = detail::crc32(chunk, *crc); };
      }
      spans.push_back(std::move(span));
    }
    if (crc_known[i] && has_descriptor(entry)) {
      const std::string& descriptor = headers.emplace_back(data_descriptor(entry));
      spans.push_back({.bytes = std::as_bytes(std::span(descriptor)), .offset = entry.data_offset + entry.size});
    }
  }
  if (options_.file_offset != 0) {
    for (detail::WriteSpan& span : spans) span.offset += options_.file_offset;
  }
  file.write_parallel(spans, options_.threads);

  // Large entries: what needs their CRC, now that it is known.
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (crc_known[i]) continue;
    Entry& entry = entries_[i];
    entry.crc32 = crcs[i];
    if (has_descriptor(entry)) {
      const std::string descriptor = data_descriptor(entry);
      file.write_at(std::as_bytes(std::span(descriptor)), options_.file_offset + entry.data_offset + entry.size);
    } else {
      const std::string header = local_header(entry);
      file.write_at(std::as_bytes(std::span(header)), options_.file_offset + entry.local_header_offset);
    }
  }

  std::string directory;
  directory.reserve(entries_.size() * (kCentralHeaderSize + 32));
  for (const Entry& entry : entries_) append_central_header(directory, entry);
  const std::string end = end_records(directory_offset, directory.size());
  directory += end;
  file.write_at(std::as_bytes(std::span(directory)), options_.file_offset + directory_offset);
  return directory_offset + directory.size();
}

}  // namespace ckpt::zip_detail
