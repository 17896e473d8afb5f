#include "formats/torch/writer.h"

#include <algorithm>
#include <unordered_map>

#include "ckpt/error.h"
#include "core/checksum.h"
#include "core/strided.h"
#include "core/text.h"
#include "formats/torch/layout.h"
#include "formats/torch/pickle_reader.h"
#include "formats/torch/pickle_writer.h"
#include "formats/zip/writer.h"
#include "io/atomic_file.h"

namespace ckpt::torch_detail {
namespace {

// Python's pickler batches SETITEMS / APPENDS by this many items.
constexpr size_t kBatch = 1000;

// One tensor leaf as a view of some bytes in memory.
struct View {
  const Tensor* tensor = nullptr;
  std::string name;
  Buffer base;       // the bytes the view looks into
  uint64_t offset = 0;  // elements into base
  std::vector<int64_t> strides;
  size_t storage = 0;   // index into the storages, once grouped
  uint64_t storage_offset = 0;  // elements into that storage
};

struct StorageOut {
  std::string key;
  DType dtype = DType::kFloat32;
  Buffer bytes;
};

View view_of(const Tensor& tensor, std::string name) {
  View view{.tensor = &tensor, .name = std::move(name)};
  if (const detail::StridedLayout* layout = detail::strided_layout(tensor.buffer())) {
    view.base = layout->base;
    view.offset = layout->offset;
    view.strides = layout->strides;
  } else {
    view.base = tensor.buffer();
    view.strides = detail::contiguous_strides(tensor.shape());
  }
  return view;
}

// Groups views whose bytes overlap in memory into one storage each (tied
// weights, views of one torch storage), in order of first appearance.
// Views that overlap but cannot share a torch storage (different dtypes, an
// offset that is not a whole number of elements) get storages of their own.
std::vector<StorageOut> group_storages(std::vector<View>& views) {
  std::vector<size_t> order;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].base.address() != nullptr && !views[i].base.empty()) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const std::byte* pa = views[a].base.address();
    const std::byte* pb = views[b].base.address();
    return pa != pb ? pa < pb : a < b;
  });
  // Each run of overlapping views: [start, end) in memory.
  constexpr size_t kNone = SIZE_MAX;
  std::vector<size_t> group_of(views.size(), kNone);
  struct Group {
    const std::byte* start;
    const std::byte* end;
    std::vector<size_t> members;
  };
  std::vector<Group> groups;
  for (size_t i : order) {
    const std::byte* start = views[i].base.address();
    const std::byte* end = start + views[i].base.size();
    if (!groups.empty() && start < groups.back().end) {
      groups.back().end = std::max(groups.back().end, end);
      groups.back().members.push_back(i);
    } else {
      groups.push_back({start, end, {i}});
    }
  }
  std::vector<std::vector<size_t>> storage_members;  // final groups
  std::vector<const std::byte*> storage_start;
  for (Group& group : groups) {
    const DType dtype = views[group.members.front()].tensor->dtype();
    const size_t element_size = dtype_size(dtype);
    bool shareable = (group.end - group.start) % static_cast<std::ptrdiff_t>(element_size) == 0;
    for (size_t i : group.members) {
      shareable = shareable && views[i].tensor->dtype() == dtype &&
                  (views[i].base.address() - group.start) % static_cast<std::ptrdiff_t>(element_size) == 0;
    }
    if (shareable || group.members.size() == 1) {
      storage_members.push_back(group.members);
      storage_start.push_back(group.start);
    } else {
      for (size_t i : group.members) {
        storage_members.push_back({i});
        storage_start.push_back(views[i].base.address());
      }
    }
  }
  for (size_t g = 0; g < storage_members.size(); ++g) {
    for (size_t i : storage_members[g]) group_of[i] = g;
  }

  // Keys in order of first appearance in the tree, as torch numbers them.
  std::vector<StorageOut> storages;
  std::vector<size_t> key_of_group(storage_members.size(), kNone);
  for (size_t i = 0; i < views.size(); ++i) {
    View& view = views[i];
    const size_t element_size = dtype_size(view.tensor->dtype());
    const size_t group = group_of[i];
    if (group == kNone) {  // empty tensor: a storage of its own, no bytes
      view.storage = storages.size();
      view.storage_offset = 0;
      storages.push_back({std::to_string(storages.size()), view.tensor->dtype(), Buffer()});
      continue;
    }
    if (key_of_group[group] == kNone) {
      key_of_group[group] = storages.size();
      const std::byte* start = storage_start[group];
      const std::byte* end = start;
      for (size_t member : storage_members[group]) {
        end = std::max(end, views[member].base.address() + views[member].base.size());
      }
      Buffer bytes = Buffer::view(view.base.storage(), {start, static_cast<size_t>(end - start)});
      storages.push_back({std::to_string(storages.size()), view.tensor->dtype(), std::move(bytes)});
    }
    view.storage = key_of_group[group];
    view.storage_offset =
        static_cast<uint64_t>(view.base.address() - storage_start[group]) / element_size + view.offset;
  }
  return storages;
}

class PickleEmitter {
 public:
  PickleEmitter(PickleWriter& out, const std::vector<View>& views, const std::vector<StorageOut>& storages)
      : out_(out), views_(views), storages_(storages) {
    for (size_t i = 0; i < views.size(); ++i) by_tensor_.emplace(views[i].tensor, i);
  }

  void value(const Tree& tree, const std::string& name) {
    switch (tree.kind()) {
      case Tree::Kind::kNone: out_.none(); return;
      case Tree::Kind::kBool: out_.boolean(tree.boolean()); return;
      case Tree::Kind::kInt: out_.integer(tree.integer()); return;
      case Tree::Kind::kFloat: out_.real(tree.real()); return;
      case Tree::Kind::kString: text(tree.string(), name); return;
      case Tree::Kind::kBytes: out_.bytes(tree.bytes().data); return;
      case Tree::Kind::kTensor: tensor(views_[by_tensor_.at(&tree.tensor())]); return;
      case Tree::Kind::kList: {
        out_.empty_list();
        const auto& entries = tree.entries();
        for (size_t first = 0; first < entries.size(); first += kBatch) {
          out_.mark();
          const size_t last = std::min(entries.size(), first + kBatch);
          for (size_t i = first; i < last; ++i) value(entries[i].value, child(name, entries[i].key));
          out_.appends();
        }
        return;
      }
      case Tree::Kind::kMap: {
        // A map of tensors is a state dict, which torch makes an OrderedDict.
        const auto& entries = tree.entries();
        const bool state_dict = !entries.empty() && std::all_of(entries.begin(), entries.end(), [](const TreeEntry& e) {
          return e.value.is_tensor();
        });
        if (state_dict) {
          out_.global("collections", "OrderedDict");
          out_.empty_tuple();
          out_.reduce();
        } else {
          out_.empty_dict();
        }
        for (size_t first = 0; first < entries.size(); first += kBatch) {
          out_.mark();
          const size_t last = std::min(entries.size(), first + kBatch);
          for (size_t i = first; i < last; ++i) {
            const Key& key = entries[i].key;
            if (const auto* text_key = std::get_if<std::string>(&key)) {
              text(*text_key, name);
            } else {
              out_.integer(std::get<int64_t>(key));
            }
            value(entries[i].value, child(name, key));
          }
          out_.setitems();
        }
        return;
      }
    }
  }

 private:
  static std::string child(const std::string& name, const Key& key) {
    return join_name(name, key_to_string(key));
  }

  void text(const std::string& value, const std::string& name) {
    if (!detail::valid_utf8(value, kPickleUtf8)) {
      throw Error(ErrorCode::kUnsupported, "string is not valid UTF-8, which torch cannot load", {.entry = name});
    }
    out_.str(value);
  }

  void int_tuple(std::span<const int64_t> values) {
    if (values.size() > 3) out_.mark();
    for (int64_t value : values) out_.integer(value);
    out_.tuple(values.size());
  }

  void tensor(const View& view) {
    const DType dtype = view.tensor->dtype();
    const DTypeInfo& info = dtype_info(dtype);
    const StorageOut& storage = storages_[view.storage];
    const bool typed = !info.torch_storage.empty();
    out_.global("torch._utils", typed ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    out_.mark();
    // The persistent id ('storage', class, key, location, numel).
    out_.mark();
    out_.memo_str("storage");
    if (typed) {
      out_.global("torch", info.torch_storage);
    } else {
      out_.global("torch.storage", "UntypedStorage");
    }
    out_.str(storage.key);
    out_.memo_str("cpu");
    out_.integer(static_cast<int64_t>(typed ? storage.bytes.size() / info.size : storage.bytes.size()));
    out_.tuple(5);
    out_.binpersid();
    out_.integer(static_cast<int64_t>(view.storage_offset));
    int_tuple(view.tensor->shape());
    int_tuple(view.strides);
    out_.boolean(false);  // requires_grad
    out_.global("collections", "OrderedDict");  // backward hooks
    out_.empty_tuple();
    out_.reduce();
    if (!typed) out_.global("torch", info.torch);
    out_.tuple(typed ? 6 : 7);
    out_.reduce();
  }

  PickleWriter& out_;
  const std::vector<View>& views_;
  const std::vector<StorageOut>& storages_;
  std::unordered_map<const Tensor*, size_t> by_tensor_;
};

std::string archive_name(const std::filesystem::path& path) {
  std::string name = path.filename().string();
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos) name.resize(dot);
  return name.empty() ? "archive" : name;
}

// 40 decimal digits, as torch writes: here derived from the pickle and the
// storages' sizes, so that saving the same state twice gives the same bytes.
std::string serialization_id(std::string_view pickle, const std::vector<StorageOut>& storages) {
  uint64_t a = detail::xxh3_64(std::as_bytes(std::span(pickle)));
  std::string sizes;
  for (const StorageOut& storage : storages) sizes += std::to_string(storage.bytes.size()) + ",";
  uint64_t b = detail::xxh3_64(std::as_bytes(std::span(sizes)));
  std::string id;
  for (uint64_t part : {a, b}) {
    std::string digits(20, '0');
    for (int i = 19; i >= 0; --i, part /= 10) digits[static_cast<size_t>(i)] = static_cast<char>('0' + part % 10);
    id += digits;
  }
  return id;
}

}  // namespace

uint64_t write_archive(detail::AtomicFile& file, uint64_t offset, const Tree& tree, std::string_view name,
                       const SaveOptions& options) {
  const std::filesystem::path& path = file.final_path();
  std::vector<View> views;
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) {
    const Tensor& tensor = leaf.value->tensor();
    if (tensor.nbytes() != tensor.numel() * dtype_size(tensor.dtype())) {
      throw Error(ErrorCode::kInvalidArgument, "tensor's buffer does not match its dtype and shape",
                  {.path = path, .entry = leaf.name});
    }
    views.push_back(view_of(tensor, leaf.name));
  }
  // The same Tensor object twice in a tree (shared Tree copies) is one view.
  std::vector<StorageOut> storages = group_storages(views);

  PickleWriter pickle;
  PickleEmitter emitter(pickle, views, storages);
  try {
    emitter.value(tree, "");
  } catch (Error& error) {
    throw error.with_path(path);
  }

  const std::string prefix = std::string(name) + "/";
  zip_detail::ZipWriter zip({.alignment = kStorageAlignment,
                             .data_descriptor = true,
                             .no_descriptor_when_empty = true,
                             .dos_time = 0,
                             .dos_date = 0,
                             .made_by_system = 0,
                             .external_attributes = 0,
                             .version = 0,
                             .utf8_flag_always = true,
                             .zip64_end_always = true,
                             .zip64_end_made_by = 0x031e,
                             .threads = options.threads,
                             .file_offset = offset});
  const std::string pickle_bytes = pickle.finish();
  const std::string id = serialization_id(pickle_bytes, storages);
  zip.add(prefix + std::string(kPickleRecord), pickle_bytes, Buffer());
  zip.add(prefix + std::string(kFormatVersionRecord), std::string(kFormatVersion), Buffer());
  zip.add(prefix + std::string(kStorageAlignmentRecord), std::to_string(kStorageAlignment), Buffer());
  zip.add(prefix + std::string(kByteOrderRecord), std::string(kLittleEndian), Buffer());
  // In key order 0, 1, 2, ... (first appearance): with .format_version 1,
  // torch may compute record offsets itself assuming exactly this order.
  for (const StorageOut& storage : storages) {
    zip.add(prefix + std::string(kStorageFolder) + storage.key, "", storage.bytes);
  }
  zip.add(prefix + std::string(kVersionRecord), std::string(kVersion), Buffer());
  if (options.extras && !options.metadata.empty()) {
    // User metadata (torch has no place for it): a pickled dict of strings in
    // a record torch.load does not read.
    PickleWriter metadata;
    metadata.empty_dict();
    metadata.mark();
    for (const auto& [key, value] : options.metadata) {
      if (!detail::valid_utf8(key, kPickleUtf8) || !detail::valid_utf8(value, kPickleUtf8)) {
        throw Error(ErrorCode::kUnsupported, "metadata is not valid UTF-8", {.path = path, .entry = key});
      }
      metadata.str(key);
      metadata.str(value);
    }
    metadata.setitems();
    zip.add(prefix + std::string(kMetadataRecord), metadata.finish(), Buffer());
  }
  zip.add(prefix + std::string(kSerializationIdRecord), id, Buffer());

  return zip.write(file);
}

void write_file(const std::filesystem::path& path, const Tree& tree, const SaveOptions& options) {
  detail::AtomicFile file(path, {.fsync = options.fsync});
  write_archive(file, 0, tree, archive_name(path), options);
  file.commit();
}

}  // namespace ckpt::torch_detail
