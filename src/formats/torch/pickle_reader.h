#pragma once
// A restricted unpickler: runs the pickle virtual machine (protocols 0 to 5)
// over the bytes of a torch file's data.pkl (or a legacy file's pickles) and
// builds plain values. It understands exactly what a state dict or a training
// checkpoint holds; the only "globals" it accepts are the ones in
// resolve_global() (OrderedDict, torch's tensor rebuild functions, storage
// classes, dtypes, torch.Size, torch.device, ...), which it interprets
// itself. Any other global (os.system, builtins.eval, a user's class) is
// refused by name when the GLOBAL opcode names it: nothing from the file is
// ever imported or called. Byte layout: docs/formats/torch.md.
//
// Memory is bounded by the input: every opcode creates at most one object,
// sizes are checked against the bytes that remain, and the memo grows only
// as far as the opcodes that fill it.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/tensor.h"
#include "core/text.h"

namespace ckpt::torch_detail {

// The globals a checkpoint may name; each is interpreted, never imported.
enum class Global : uint8_t {
  kOrderedDict,       // collections.OrderedDict (and Counter): an empty dict
  kSet,               // builtins.set / frozenset
  kByteArray,         // builtins.bytearray
  kCodecsEncode,      // _codecs.encode(str, "latin1"): how protocol 2 stores bytes
  kRebuildTensor,     // torch._utils._rebuild_tensor
  kRebuildTensorV2,   // torch._utils._rebuild_tensor_v2
  kRebuildTensorV3,   // torch._utils._rebuild_tensor_v3 (explicit dtype)
  kRebuildParameter,  // torch._utils._rebuild_parameter(_with_state)
  kRebuildFromType,   // torch._tensor._rebuild_from_type_v2
  kTensorType,        // torch.Tensor, torch.nn.Parameter (as types only)
  kSize,              // torch.Size(tuple)
  kDevice,            // torch.device("cuda", 0)
  kLayout,            // torch.serialization._get_layout("torch.strided")
  kStorageType,       // torch.FloatStorage, ..., torch.UntypedStorage
  kDType,             // torch.float32, ...
  kPlainClass,        // a class of UnpickleOptions::plain_classes
};

// A storage the pickle refers to by persistent id.
struct StorageRef {
  std::string key;             // the record name under data/ (zip) or the legacy key
  std::optional<DType> dtype;  // nullopt: untyped storage, numel counts bytes
  uint64_t numel = 0;          // as the persistent id declares it
  std::string location;        // "cpu", "cuda:0", ...
};

// One _rebuild_tensor_* call.
struct TensorRef {
  uint32_t storage = 0;       // index into Pickle::storages
  DType dtype = DType::kFloat32;
  uint64_t offset = 0;        // in elements of dtype (legacy storage views added in)
  Shape shape;
  std::vector<int64_t> strides;
  bool parameter = false;     // came through _rebuild_parameter
  // Lazy conjugate / negative views (torch's conj and neg bits, saved in the
  // rebuild call's metadata dict): the stored values are the base's.
  bool conj = false;
  bool neg = false;
};

struct PickleValue;

// The items of a container: up to six inline (every tuple of a tensor's
// rebuild call fits, so parsing a tensor allocates nothing for them), more
// on the heap.
class ItemList {
 public:
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  PickleValue* const* begin() const noexcept { return size_ > kInline ? heap_.data() : inline_; }
  PickleValue* const* end() const noexcept { return begin() + size_; }
  PickleValue* operator[](size_t i) const noexcept { return begin()[i]; }
  PickleValue* front() const noexcept { return begin()[0]; }
  void push_back(PickleValue* item) {
    if (size_ < kInline) {
      inline_[size_++] = item;
      return;
    }
    if (size_ == kInline) heap_.assign(inline_, inline_ + kInline);
    heap_.push_back(item);
    ++size_;
  }
  template <class Iterator>
  void append(Iterator first, Iterator last) {
    for (; first != last; ++first) push_back(*first);
  }
  template <class Iterator>
  void assign(Iterator first, Iterator last) {
    size_ = 0;
    heap_.clear();
    append(first, last);
  }

 private:
  static constexpr size_t kInline = 6;
  PickleValue* inline_[kInline] = {};
  size_t size_ = 0;
  std::vector<PickleValue*> heap_;  // all items once there are more than kInline
};

// One object the unpickler made: what a Python object of the pickle stands
// for, as far as a checkpoint needs it (not CPython's PyObject).
struct PickleValue {
  enum class Kind : uint8_t {
    kNone, kBool, kInt, kBigInt, kFloat, kStr, kBytes,
    kTuple, kList, kDict, kSet, kGlobal, kStorage, kTensor,
    kObject,  // an instance of a plain class (UnpickleOptions::plain_classes)
  };
  Kind kind = Kind::kNone;
  bool flag = false;          // bool's value; a dict that is an OrderedDict
  bool memoized = false;      // stored in the memo (PUT, MEMOIZE): GETs may share it
  Global global = Global::kOrderedDict;  // kGlobal
  std::optional<DType> dtype;            // kGlobal: kDType or typed kStorageType
  int64_t integer = 0;        // kInt; kStorage/kTensor: index into storages/tensors
  uint64_t view_offset = 0;   // kStorage: legacy storage view, in elements
  double real = 0;            // kFloat
  std::string text;           // kStr (UTF-8), kBytes, kBigInt (little-endian two's complement), kGlobal name;
                              // kObject: its class as module.name
  ItemList items;             // tuple/list/set; dict: key, value, key, value, ...;
                              // kObject: its constructor's arguments (a tuple), then its BUILD state
                              // (the argument of BUILD, as is: a dict, a tuple, ...) if it had one
};

struct UnpickleOptions {
  // Offset of the pickle's first byte in the file, for error messages.
  uint64_t file_offset = 0;
  // Persistent ids of the legacy format carry a sixth field (view metadata).
  bool legacy = false;
  // Qualified names ("module.name") of classes that the caller's format
  // knows as plain records of data (PyTorch DCP's metadata dataclasses),
  // allowed besides resolve_global()'s list. Calling one (REDUCE, NEWOBJ)
  // makes a kObject that keeps the class name and the arguments; BUILD
  // attaches its state once. Nothing is imported or called; the caller
  // interprets the objects. Not consulted by pickle_to_tree(), which
  // refuses kObject as "not data".
  std::span<const std::string_view> plain_classes;
};

// What a pickle held. Owns every object it made.
struct Pickle {
  PickleValue* root = nullptr;
  size_t end = 0;  // bytes consumed, up to and including STOP
  std::vector<StorageRef> storages;
  std::vector<TensorRef> tensors;
  // Every object, in chunks that never move.
  std::vector<std::unique_ptr<PickleValue[]>> arena;
  size_t arena_used = 0;  // objects used in the last chunk
  std::unordered_map<std::string, uint32_t> storage_index;  // key → index
};

// Runs the pickle at the start of `bytes` up to its STOP opcode.
// Throws Error{kCorrupt} (with the file offset of the opcode) for truncated
// or malformed pickles, unknown opcodes, stack underflow or bad arguments;
// Error{kUnsupported} naming the global for any global outside the allowlist
// and for valid features ckpt does not read (quantized tensors, out-of-band
// buffers, the extension registry).
Pickle unpickle(std::span<const std::byte> bytes, const UnpickleOptions& options = {});

// UTF-8 as Python's pickle accepts it: surrogates allowed, as str pickles
// them with "surrogatepass" (detail::valid_utf8(text, kPickleUtf8)).
inline constexpr detail::Utf8Options kPickleUtf8{.allow_surrogates = true};

// The allowlisted meaning of module.name, or nullopt.
struct GlobalInfo {
  Global global;
  std::optional<DType> dtype;
};
std::optional<GlobalInfo> resolve_global(std::string_view module, std::string_view name);

}  // namespace ckpt::torch_detail
