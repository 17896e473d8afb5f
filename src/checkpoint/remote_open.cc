#include "checkpoint/remote_open.h"

#include <cstring>
#include <map>
#include <mutex>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/registry.h"
#include "core/checksum.h"
#include "formats/zip/reader.h"
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

namespace {

// The format of a file of which only the head is held: by content, the
// name's extension breaking ties (as detect() does).
const Format* detect_head(const std::filesystem::path& path, const FileHead& head) {
  const Format* hinted = format_for_extension(path);
  if (hinted && hinted->capabilities().read && hinted->detect(head.head, head.size)) return hinted;
  for (const Format* format : formats()) {
    if (format->capabilities().read && format->detect(head.head, head.size)) return format;
  }
  return nullptr;
}

// A safetensors file: the 8-byte length and the header are all its reader
// reads before the tensors.
Contents read_safetensors_head(RemoteFile& file, const LoadOptions& options, const FileHead& head) {
  const uint64_t header = read_le64(head.head.data());
  // An absurd length is the reader's to name; fetch what exists of it.
  file.ensure({{0, 8 + std::min(header, file.size())}});
  return format_by_id("safetensors").read(file.path(), options);
}

// Whether a torch zip member holds a storage (".../data/<key>"): its bytes
// are fetched when a tensor is used; every other member (data.pkl, version,
// byteorder) is read with the archive.
bool is_storage_member(std::string_view name) {
  const size_t slash = name.find('/');
  return slash != std::string_view::npos && name.substr(slash + 1).rfind("data/", 0) == 0 &&
         !name.ends_with(".pkl");
}

// A torch zip: the end records and the central directory (the file's tail,
// fetched in growing pieces until the directory parses), each member's local
// header, and the members other than storages, whole. Throws Error{kCorrupt}
// when the archive's structure does not parse from what was fetched (the
// caller then downloads the file whole and reads it as open() does).
Contents read_torch_zip_head(RemoteFile& file, const LoadOptions& options) {
  const uint64_t size = file.size();
  std::vector<zip_detail::ZipEntry> entries;
  uint64_t directory_offset = 0;
  for (uint64_t tail = kRemoteHead;; tail *= 4) {
    tail = std::min(tail, size);
    file.ensure({{size - tail, size}});
    try {
      const zip_detail::ZipReader zip(MappedFile::open(file.path()), {.local_headers = false});
      entries = zip.entries();
      directory_offset = zip.directory_offset();
      break;
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kCorrupt || tail == size) throw;
    }
  }
  // A local header is 30 bytes, the name, and an extra field the central
  // directory does not tell (torch pads data to 64 bytes with it).
  constexpr uint64_t kLocalHeaderRoom = 30 + 1024;
  std::vector<ByteRange> wanted;
  for (const zip_detail::ZipEntry& entry : entries) {
    uint64_t end = entry.local_header_offset + kLocalHeaderRoom + entry.name.size();
    if (!is_storage_member(entry.name)) end += entry.compressed_size;
    wanted.push_back({entry.local_header_offset, std::min(end, directory_offset)});
  }
  file.ensure(std::move(wanted));
  return format_by_id("torch").read(file.path(), options);
}

// Every tensor of `contents` that views the sparse file becomes a deferred
// buffer that fetches (and checks) its bytes on first use. Returns false
// when some tensor was already made from the file's bytes another way (a
// deferred gather, a decoded copy): those cannot wait for the network.
bool defer_tensors(Contents& contents, const std::shared_ptr<RemoteFile>& file) {
  bool all_views = true;
  contents.tree.for_each_tensor([&](Tensor& tensor) {
    const StorageKind kind = tensor.buffer().kind();
    if (kind == StorageKind::kDeferred || (kind == StorageKind::kHeap && !tensor.buffer().empty())) all_views = false;
  });
  if (!all_views) return false;
  // Stored tensors by their place in the file, for their checksums.
  std::map<std::pair<uint64_t, uint64_t>, const EntryInfo*> stored;
  for (const EntryInfo& entry : contents.entries) stored.emplace(std::make_pair(entry.offset, entry.nbytes), &entry);
  std::map<std::pair<const std::byte*, size_t>, std::shared_ptr<const RemoteRange>> made;  // ties share one
  contents.tree.for_each_tensor([&](Tensor& tensor) {
    const Buffer& buffer = tensor.buffer();
    if (buffer.kind() != StorageKind::kMapped || buffer.empty()) return;
    const auto* mapped = dynamic_cast<const MappedFile*>(buffer.storage().get());
    if (mapped == nullptr) return;
    const uint64_t offset = static_cast<uint64_t>(buffer.address() - mapped->bytes().data());
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
  return true;
}

}  // namespace

Contents open_remote(const std::string& url, const LoadOptions& options) {
  LoadOptions local = options;
  local.remote_lazy = false;
  const std::shared_ptr<RemoteFile> file = RemoteFile::open(url, options.fetch, kRemoteHead);
  const auto whole = [&] {
    // Another format, or one whose structure could not be read piecewise: as without remote_lazy.
    file->ensure({{0, file->size()}});
    return open(file->path(), local);
  };
  if (file->complete()) return open(file->path(), local);
  const FileHead head = read_head(file->path(), 4096);
  const Format* format = options.format.empty() ? detect_head(file->path(), head) : &format_by_id(options.format);
  if (format == nullptr || (format->id() != "safetensors" && format->id() != "torch") || head.head.size() < 8) {
    return whole();
  }
  LoadOptions piecewise = local;
  piecewise.verify = false;
  piecewise.lazy = true;
  piecewise.format = std::string(format->id());
  Contents contents;
  try {
    contents = naming_file(url, [&] {
      return format->id() == "torch" ? read_torch_zip_head(*file, piecewise)
                                     : read_safetensors_head(*file, piecewise, head);
    });
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kCorrupt) throw;
    return whole();  // the reader of the whole file names the defect, if there is one
  }
  if (!defer_tensors(contents, file)) return whole();
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
