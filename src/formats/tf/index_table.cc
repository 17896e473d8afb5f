#include "formats/tf/index_table.h"

#include <leveldb/comparator.h>
#include <leveldb/env.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/table.h>
#include <leveldb/table_builder.h>

#include <cstring>
#include <memory>

#include "ckpt/error.h"
#include "formats/tf/layout.h"

namespace ckpt::tf_detail {
namespace {

// The mapped .index bytes as LevelDB's file: reads return views of the
// mapping (LevelDB then uses the block in place instead of copying it).
class MappedTableFile final : public leveldb::RandomAccessFile {
 public:
  explicit MappedTableFile(std::span<const std::byte> bytes) : bytes_(bytes) {}
  leveldb::Status Read(uint64_t offset, size_t n, leveldb::Slice* result, char* scratch) const override {
    if (offset > bytes_.size()) {
      *result = leveldb::Slice();
      return leveldb::Status::Corruption("block offset past the end of the file");
    }
    const size_t available = bytes_.size() - static_cast<size_t>(offset);
    *result = leveldb::Slice(reinterpret_cast<const char*>(bytes_.data()) + offset, std::min(n, available));
    return leveldb::Status::OK();
  }

 private:
  std::span<const std::byte> bytes_;
};

// The table's bytes collected in memory (the caller writes them atomically).
class StringTableFile final : public leveldb::WritableFile {
 public:
  leveldb::Status Append(const leveldb::Slice& data) override {
    bytes_.append(data.data(), data.size());
    return leveldb::Status::OK();
  }
  leveldb::Status Close() override { return leveldb::Status::OK(); }
  leveldb::Status Flush() override { return leveldb::Status::OK(); }
  leveldb::Status Sync() override { return leveldb::Status::OK(); }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

leveldb::Options table_options() {
  leveldb::Options options;
  options.comparator = leveldb::BytewiseComparator();
  options.compression = leveldb::kNoCompression;
  options.block_size = kTableBlockSize;
  options.block_restart_interval = kTableBlockRestartInterval;
  options.paranoid_checks = true;  // the index block's CRC is checked on open
  return options;
}

// Bounds-checked reading of the varints that block handles are made of.
struct Cursor {
  std::span<const std::byte> bytes;
  size_t position = 0;
  bool varint(uint64_t& value) {
    value = 0;
    for (int shift = 0; shift <= 63 && position < bytes.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(bytes[position++]);
      value |= uint64_t(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
};

// Checks what LevelDB's reader trusts before it checks anything itself: the
// footer's block handles and those in the index block must lie inside the
// file (LevelDB allocates and reads handle.size + 5 bytes unchecked).
void check_block_handles(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  const uint64_t blocks_end = bytes.size() - kTableFooterSize;
  auto check = [&](uint64_t offset, uint64_t size, std::string_view what) {
    if (offset > blocks_end || size > blocks_end - offset || blocks_end - offset - size < kBlockTrailerSize) {
      throw Error(ErrorCode::kCorrupt,
                  std::string(what) + " block [" + std::to_string(offset) + ", +" + std::to_string(size) +
                      ") runs past the table's blocks (" + std::to_string(blocks_end) + " bytes)",
                  {.path = path, .offset = offset});
    }
  };
  Cursor footer{bytes.subspan(static_cast<size_t>(blocks_end), kTableFooterSize)};
  uint64_t meta_offset = 0, meta_size = 0, index_offset = 0, index_size = 0;
  if (!footer.varint(meta_offset) || !footer.varint(meta_size) || !footer.varint(index_offset) ||
      !footer.varint(index_size)) {
    throw Error(ErrorCode::kCorrupt, "malformed table footer", {.path = path, .offset = blocks_end});
  }
  check(meta_offset, meta_size, "metaindex");
  check(index_offset, index_size, "index");
  // The index block: entries (shared, non-shared, value length, key delta,
  // value = data block handle), then the restart array and its count.
  const auto block = bytes.subspan(static_cast<size_t>(index_offset), static_cast<size_t>(index_size));
  uint32_t restarts = 0;
  if (block.size() >= 4) std::memcpy(&restarts, block.data() + block.size() - 4, 4);
  if (block.size() < 4 || restarts > (block.size() - 4) / 4) {
    throw Error(ErrorCode::kCorrupt, "malformed index block", {.path = path, .offset = index_offset});
  }
  Cursor entries{block.first(block.size() - 4 - 4 * size_t{restarts})};
  while (entries.position < entries.bytes.size()) {
    uint64_t shared = 0, non_shared = 0, value_length = 0;
    if (!entries.varint(shared) || !entries.varint(non_shared) || !entries.varint(value_length) ||
        non_shared > entries.bytes.size() - entries.position ||
        value_length > entries.bytes.size() - entries.position - non_shared) {
      throw Error(ErrorCode::kCorrupt, "malformed index block", {.path = path, .offset = index_offset});
    }
    entries.position += static_cast<size_t>(non_shared);
    Cursor value{entries.bytes.subspan(entries.position, static_cast<size_t>(value_length))};
    entries.position += static_cast<size_t>(value_length);
    uint64_t offset = 0, size = 0;
    if (!value.varint(offset) || !value.varint(size)) {
      throw Error(ErrorCode::kCorrupt, "malformed block handle in the index block", {.path = path, .offset = index_offset});
    }
    check(offset, size, "data");
  }
}

[[noreturn]] void fail(const std::filesystem::path& path, const leveldb::Status& status, std::string_view what) {
  throw Error(ErrorCode::kCorrupt, std::string(what) + ": " + status.ToString(), {.path = path});
}

}  // namespace

bool has_table_magic(std::span<const std::byte> tail) {
  if (tail.size() < kTableFooterSize) return false;
  uint64_t magic = 0;
  std::memcpy(&magic, tail.data() + tail.size() - 8, 8);  // fixed64, little-endian
  return magic == kTableMagic;
}

std::vector<IndexRecord> read_index_table(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  if (bytes.size() < kTableFooterSize) {
    throw Error(ErrorCode::kCorrupt,
                "index of " + std::to_string(bytes.size()) + " bytes is shorter than the " +
                    std::to_string(kTableFooterSize) + "-byte LevelDB table footer",
                {.path = path, .offset = 0});
  }
  if (!has_table_magic(bytes)) {
    throw Error(ErrorCode::kCorrupt, "not a LevelDB table: bad footer magic",
                {.path = path, .offset = bytes.size() - 8});
  }
  check_block_handles(bytes, path);
  MappedTableFile file(bytes);
  leveldb::Table* opened = nullptr;
  const leveldb::Options options = table_options();
  leveldb::Status status = leveldb::Table::Open(options, &file, bytes.size(), &opened);
  std::unique_ptr<leveldb::Table> table(opened);
  if (!status.ok()) fail(path, status, "cannot open the index table");
  leveldb::ReadOptions read;
  read.verify_checksums = true;
  read.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(table->NewIterator(read));
  std::vector<IndexRecord> records;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const leveldb::Slice key = it->key();
    const leveldb::Slice value = it->value();
    if (!records.empty() && leveldb::Slice(records.back().first).compare(key) >= 0) {
      throw Error(ErrorCode::kCorrupt, "index keys out of order", {.path = path, .entry = key.ToString()});
    }
    records.emplace_back(key.ToString(), value.ToString());
  }
  if (!it->status().ok()) fail(path, it->status(), "cannot read the index table");
  return records;
}

std::string build_index_table(const std::vector<IndexRecord>& records) {
  StringTableFile file;
  const leveldb::Options options = table_options();
  leveldb::TableBuilder builder(options, &file);
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0 && records[i - 1].first >= records[i].first) {
      throw Error(ErrorCode::kInvalidArgument, "index keys must be sorted and unique",
                  {.entry = records[i].first});
    }
    builder.Add(records[i].first, records[i].second);
  }
  const leveldb::Status status = builder.Finish();
  if (!status.ok()) throw Error(ErrorCode::kIo, "cannot build the index table: " + status.ToString());
  return file.take();
}

}  // namespace ckpt::tf_detail
