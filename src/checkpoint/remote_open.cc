#include "checkpoint/remote_open.h"

#include <cstring>
#include <map>
#include <mutex>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "core/checksum.h"
#include "io/mapped_file.h"
#include "io/url_cache.h"

namespace ckpt::detail {
namespace {

// The first bytes fetched of a lazily opened file: a safetensors header of
// up to this size arrives with one request.
constexpr uint64_t kRemoteHead = uint64_t{64} << 10;

// The bytes of one tensor in a remote file: fetched and checked on first use.
class RemoteRange final : public Storage {
 public:
  RemoteRange(std::shared_ptr<RemoteFile> file, Buffer mapped, ByteRange range, ChecksumKind kind,
              std::string checksum, std::string name)
      : file_(std::move(file)),
        mapped_(std::move(mapped)),
        range_(range),
        kind_(kind),
        checksum_(std::move(checksum)),
        name_(std::move(name)) {}

  StorageKind kind() const override { return StorageKind::kDeferred; }

  const std::byte* materialize() const override {
    std::call_once(ready_, [&] {
      file_->ensure({range_});
      if (kind_ != ChecksumKind::kNone && !checksum_.empty()) {
        const std::string actual = checksum_hex(kind_, mapped_.bytes());
        if (actual != checksum_) {
          file_->forget(range_);
          throw Error(ErrorCode::kCorrupt,
                      std::string(checksum_name(kind_)) + " checksum mismatch: stored " + checksum_ + ", fetched bytes have " +
                          actual,
                      {.path = file_->url(), .entry = name_, .offset = range_.begin});
        }
      }
    });
    return mapped_.address();
  }

  void copy_out(const std::byte*, std::span<std::byte> dst) const override {
    const std::byte* bytes = materialize();
    if (!dst.empty()) std::memcpy(dst.data(), bytes, dst.size());
  }

  const std::shared_ptr<RemoteFile>& file() const { return file_; }
  ByteRange range() const { return range_; }

 private:
  std::shared_ptr<RemoteFile> file_;
  Buffer mapped_;
  ByteRange range_;
  ChecksumKind kind_;
  std::string checksum_;
  std::string name_;
  mutable std::once_flag ready_;
};

uint64_t read_le64(const std::byte* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint64_t>(bytes[i]);
  return value;
}

}  // namespace

Contents open_remote(const std::string& url, const LoadOptions& options) {
  LoadOptions local = options;
  local.remote_lazy = false;
  const std::shared_ptr<RemoteFile> file = RemoteFile::open(url, options.fetch, kRemoteHead);
  const Format& safetensors = format_by_id("safetensors");
  bool lazy_format = false;
  if (!file->complete() && (options.format.empty() || options.format == "safetensors")) {
    const FileHead head = read_head(file->path(), 16);
    lazy_format = !file->complete() && head.head.size() >= 8;
    if (lazy_format) {
      const uint64_t header = read_le64(head.head.data());
      // An absurd length is the reader's to name; fetch what exists of it.
      file->ensure({{0, 8 + std::min(header, file->size())}});
      const FileHead start = read_head(file->path(), 4096);
      lazy_format = safetensors.detect(start.head, start.size);
    }
  }
  if (!lazy_format) {
    // Another format (or the whole file is here already): as without remote_lazy.
    if (!file->complete()) file->ensure({{0, file->size()}});
    return open(file->path(), local);
  }
  Contents contents = naming_file(url, [&] {
    local.verify = false;
    local.lazy = true;
    local.format = "safetensors";
    return safetensors.read(file->path(), local);
  });
  // Stored tensors by their place in the file, for their checksums.
  std::map<std::pair<uint64_t, uint64_t>, const EntryInfo*> stored;
  for (const EntryInfo& entry : contents.entries) stored.emplace(std::make_pair(entry.offset, entry.nbytes), &entry);
  std::map<std::pair<const std::byte*, size_t>, std::shared_ptr<const RemoteRange>> made;  // ties share one
  const std::byte* base = nullptr;
  contents.tree.for_each_tensor([&](Tensor& tensor) {
    const Buffer& buffer = tensor.buffer();
    if (buffer.kind() != StorageKind::kMapped || buffer.empty()) return;
    const auto* mapped = dynamic_cast<const MappedFile*>(buffer.storage().get());
    if (mapped == nullptr) return;
    base = mapped->bytes().data();
    const uint64_t offset = static_cast<uint64_t>(buffer.address() - base);
    std::shared_ptr<const RemoteRange>& storage = made[{buffer.address(), buffer.size()}];
    if (storage == nullptr) {
      const auto found = stored.find({offset, buffer.size()});
      const EntryInfo* entry = found == stored.end() ? nullptr : found->second;
      storage = std::make_shared<RemoteRange>(file, buffer, ByteRange{offset, offset + buffer.size()},
                                              entry ? contents.checksum : ChecksumKind::kNone,
                                              entry ? entry->checksum : std::string(), entry ? entry->name : "");
    }
    tensor = Tensor(tensor.dtype(), tensor.shape(), Buffer::deferred(storage, buffer.size()));
  });
  if (options.verify || !options.lazy) {
    std::vector<const Tensor*> tensors;
    contents.tree.for_each_tensor([&](Tensor& tensor) { tensors.push_back(&tensor); });
    prefetch_remote(tensors);
    for (const Tensor* tensor : tensors) {
      if (tensor->buffer().deferred()) tensor->buffer().data();  // checks the checksum
    }
    if (!options.lazy) materialize(contents.tree, options.threads);
  }
  return contents;
}

void prefetch_remote(const std::vector<const Tensor*>& tensors) {
  std::map<RemoteFile*, std::pair<std::shared_ptr<RemoteFile>, std::vector<ByteRange>>> wanted;
  for (const Tensor* tensor : tensors) {
    const Buffer& buffer = tensor->buffer();
    if (!buffer.deferred()) continue;
    const auto* remote = dynamic_cast<const RemoteRange*>(buffer.storage().get());
    if (remote == nullptr) continue;
    auto& [file, ranges] = wanted[remote->file().get()];
    file = remote->file();
    ranges.push_back(remote->range());
  }
  for (auto& [key, request] : wanted) request.first->ensure(std::move(request.second));
}

}  // namespace ckpt::detail
