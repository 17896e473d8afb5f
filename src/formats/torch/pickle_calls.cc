// The calls a pickle may make, interpreted by ckpt: the allowlist of globals
// (resolve_global), and what each allowed global does when called (a dict, a
// set, bytes, a tensor rebuilt from a storage, ...). Nothing is imported.

#include <optional>
#include <string>

#include "formats/torch/pickle_machine.h"

namespace ckpt::torch_detail {
namespace {

// Latin-1 code points of a UTF-8 string as bytes; false if one exceeds 255.
bool latin1_bytes(std::string_view utf8, std::string& out) {
  out.clear();
  out.reserve(utf8.size());
  const auto* s = reinterpret_cast<const unsigned char*>(utf8.data());
  for (size_t i = 0; i < utf8.size();) {
    if (s[i] < 0x80) {
      out.push_back(static_cast<char>(s[i++]));
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < utf8.size()) {
      const uint32_t code = (s[i] & 0x1Fu) << 6 | (s[i + 1] & 0x3Fu);
      if (code > 0xFF) return false;
      out.push_back(static_cast<char>(code));
      i += 2;
    } else {
      return false;
    }
  }
  return true;
}

struct TypedStorageName {
  std::string_view name;
  DType dtype;
};
constexpr TypedStorageName kTypedStorages[] = {
    {"FloatStorage", DType::kFloat32},   {"DoubleStorage", DType::kFloat64},
    {"HalfStorage", DType::kFloat16},    {"BFloat16Storage", DType::kBFloat16},
    {"LongStorage", DType::kInt64},      {"IntStorage", DType::kInt32},
    {"ShortStorage", DType::kInt16},     {"CharStorage", DType::kInt8},
    {"ByteStorage", DType::kUInt8},      {"BoolStorage", DType::kBool},
    {"ComplexFloatStorage", DType::kComplex64}, {"ComplexDoubleStorage", DType::kComplex128},
};

struct DTypeAlias {
  std::string_view name;
  DType dtype;
};
constexpr DTypeAlias kDTypeAliases[] = {
    {"float", DType::kFloat32}, {"double", DType::kFloat64}, {"half", DType::kFloat16},
    {"long", DType::kInt64},    {"int", DType::kInt32},      {"short", DType::kInt16},
    {"cfloat", DType::kComplex64}, {"cdouble", DType::kComplex128},
};

// Globals that are torch's own but describe what ckpt does not read; they
// get a more useful message than "refused".
std::optional<std::string> unsupported_torch_global(std::string_view module, std::string_view name) {
  if (module == "torch._utils") {
    if (name == "_rebuild_qtensor") return "quantized tensors are not supported";
    if (name.starts_with("_rebuild_sparse")) return "sparse tensors are not supported";
    if (name == "_rebuild_nested_tensor") return "nested tensors are not supported";
    if (name == "_rebuild_meta_tensor_no_storage") return "meta tensors (no data) are not supported";
    if (name == "_rebuild_wrapper_subclass") return "tensor subclasses are not supported";
    if (name == "_rebuild_device_tensor_from_numpy") return "device tensors saved through numpy are not supported";
  }
  if ((module == "torch" || module == "torch.cuda") && name.starts_with("Q") && name.ends_with("Storage")) {
    return "quantized storages are not supported";
  }
  return std::nullopt;
}

}  // namespace

PickleValue* Machine::make_global(std::string_view module, std::string_view name) {
  std::optional<GlobalInfo> info = resolve_global(module, name);
  const std::string full = std::string(module) + "." + std::string(name);
  if (!info) {
    for (std::string_view plain : options_.plain_classes) {
      if (plain == full) info = GlobalInfo{Global::kPlainClass};
    }
  }
  if (!info) {
    if (std::optional<std::string> why = unsupported_torch_global(module, name)) {
      fail(*why + " (" + detail::quoted(full) + ")", ErrorCode::kUnsupported);
    }
    fail("refused global " + detail::quoted(full) +
             ": ckpt reads tensors and plain values only and never imports or calls code from a checkpoint",
         ErrorCode::kUnsupported);
  }
  PickleValue* object = make_text(Kind::kGlobal, full);
  object->global = info->global;
  object->dtype = info->dtype;
  return object;
}

PickleValue* Machine::call(PickleValue* callable, PickleValue* args) {
  if (callable->kind != Kind::kGlobal) fail("call of a value that is not a global");
  switch (callable->global) {
    case Global::kOrderedDict: {
      const auto& items = arguments(args, callable->text.c_str(), 0, 1);
      PickleValue* dict = make(Kind::kDict);
      dict->flag = callable->text == "collections.OrderedDict";
      if (!items.empty()) {  // OrderedDict([(k, v), ...]) or Counter({...})
        PickleValue* source = items[0];
        if (source->kind == Kind::kDict) {
          charge_copy(source->items.size());
          dict->items = source->items;
        } else if (source->kind == Kind::kList || source->kind == Kind::kTuple) {
          for (PickleValue* pair : source->items) {
            if (pair->kind != Kind::kTuple || pair->items.size() != 2) fail("OrderedDict item is not a pair");
            dict->items.push_back(pair->items[0]);
            dict->items.push_back(pair->items[1]);
          }
        } else {
          fail("OrderedDict from a value that is not a dict or a list of pairs");
        }
      }
      return dict;
    }
    case Global::kSet: {
      const auto& items = arguments(args, "set", 0, 1);
      PickleValue* set = make(Kind::kSet);
      if (!items.empty()) {
        if (items[0]->kind != Kind::kList && items[0]->kind != Kind::kTuple && items[0]->kind != Kind::kSet) {
          fail("set from a value that is not a list");
        }
        charge_copy(items[0]->items.size());
        set->items = items[0]->items;
      }
      return set;
    }
    case Global::kByteArray:
    case Global::kCodecsEncode: {
      const auto& items = arguments(args, callable->text.c_str(), callable->global == Global::kByteArray ? 0 : 1, 2);
      if (items.empty()) return make(Kind::kBytes);
      if (items[0]->kind == Kind::kBytes) return items[0];
      if (items[0]->kind != Kind::kStr) fail(callable->text + " of a value that is not a string");
      std::string encoding = "utf-8";
      if (items.size() == 2) {
        if (items[1]->kind != Kind::kStr) fail(callable->text + ": encoding is not a string");
        encoding = items[1]->text;
      }
      if (encoding == "latin1" || encoding == "latin-1" || encoding == "iso-8859-1") {
        std::string bytes;
        if (!latin1_bytes(items[0]->text, bytes)) fail(callable->text + ": text is not Latin-1");
        return make_text(Kind::kBytes, std::move(bytes));
      }
      if (encoding == "utf-8" || encoding == "utf8") return make_text(Kind::kBytes, items[0]->text);
      fail(callable->text + ": encoding " + detail::quoted(encoding) + " is not supported", ErrorCode::kUnsupported);
    }
    case Global::kSize: {
      const auto& items = arguments(args, "torch.Size", 0, 1);
      PickleValue* tuple = make(Kind::kTuple);
      if (!items.empty()) {
        int_tuple(items[0], "torch.Size");
        charge_copy(items[0]->items.size());
        tuple->items = items[0]->items;
      }
      return tuple;
    }
    case Global::kDevice: {
      const auto& items = arguments(args, "torch.device", 1, 2);
      if (items[0]->kind != Kind::kStr) fail("torch.device: type is not a string");
      std::string name = items[0]->text;
      if (items.size() == 2 && items[1]->kind != Kind::kNone) {
        name += ":" + std::to_string(int_argument(items[1], "torch.device index"));
      }
      return make_text(Kind::kStr, std::move(name));
    }
    case Global::kLayout: {
      const auto& items = arguments(args, "torch.serialization._get_layout", 1, 1);
      if (items[0]->kind != Kind::kStr) fail("_get_layout: name is not a string");
      if (items[0]->text != "torch.strided") {
        fail("tensor layout " + detail::quoted(items[0]->text) + " is not supported", ErrorCode::kUnsupported);
      }
      return items[0];
    }
    case Global::kRebuildTensor:
    case Global::kRebuildTensorV2:
    case Global::kRebuildTensorV3: return rebuild_tensor(callable->global, args);
    case Global::kRebuildParameter: {
      const auto& items = arguments(args, "_rebuild_parameter", 3, 4);
      PickleValue* tensor = items[0];
      if (tensor->kind != Kind::kTensor) fail("_rebuild_parameter of a value that is not a tensor");
      result_.tensors[static_cast<size_t>(tensor->integer)].parameter = true;
      return tensor;
    }
    case Global::kRebuildFromType: {
      // _rebuild_from_type_v2(func, new_type, args, state): a tensor or
      // Parameter whose Python type is recorded; only plain types pass.
      const auto& items = arguments(args, "_rebuild_from_type_v2", 4, 4);
      if (items[1]->kind != Kind::kGlobal || items[1]->global != Global::kTensorType) {
        fail("_rebuild_from_type_v2: type is not torch.Tensor or torch.nn.Parameter", ErrorCode::kUnsupported);
      }
      // torch nests this call once; anything deeper is an attack on the stack.
      if (items[0]->kind != Kind::kGlobal || items[0]->global == Global::kRebuildFromType) {
        fail("_rebuild_from_type_v2 must call a tensor rebuild function");
      }
      PickleValue* tensor = call(items[0], items[2]);
      if (tensor->kind != Kind::kTensor) fail("_rebuild_from_type_v2 did not rebuild a tensor");
      if (items[1]->text.ends_with("Parameter")) result_.tensors[static_cast<size_t>(tensor->integer)].parameter = true;
      return tensor;
    }
    case Global::kPlainClass: {
      if (args->kind != Kind::kTuple) fail(callable->text + ": arguments are not a tuple");
      PickleValue* object = make(Kind::kObject);
      object->text = callable->text;
      object->items.push_back(args);
      return object;
    }
    case Global::kTensorType:
    case Global::kStorageType:
    case Global::kDType: fail("call of " + detail::quoted(callable->text) + " is not supported", ErrorCode::kUnsupported);
  }
  fail("call of " + detail::quoted(callable->text));
}

PickleValue* Machine::rebuild_tensor(Global which, PickleValue* args) {
  const char* what = which == Global::kRebuildTensor     ? "_rebuild_tensor"
                     : which == Global::kRebuildTensorV2 ? "_rebuild_tensor_v2"
                                                         : "_rebuild_tensor_v3";
  const size_t min = which == Global::kRebuildTensor ? 4 : which == Global::kRebuildTensorV2 ? 6 : 7;
  const auto& items = arguments(args, what, min, min + 1);
  PickleValue* storage = items[0];
  if (storage->kind != Kind::kStorage) fail(std::string(what) + ": first argument is not a storage");
  TensorRef tensor;
  tensor.storage = static_cast<uint32_t>(storage->integer);
  const StorageRef& ref = result_.storages[tensor.storage];
  if (which == Global::kRebuildTensorV3) {
    PickleValue* dtype = items[6];
    if (dtype->kind != Kind::kGlobal || dtype->global != Global::kDType) fail("_rebuild_tensor_v3: bad dtype");
    tensor.dtype = *dtype->dtype;
  } else if (ref.dtype) {
    tensor.dtype = *ref.dtype;
  } else {
    fail(std::string(what) + " of an untyped storage has no dtype");
  }
  if (ref.dtype && *ref.dtype != tensor.dtype) {
    fail(std::string(what) + ": dtype " + std::string(dtype_name(tensor.dtype)) + " differs from its storage's " +
         std::string(dtype_name(*ref.dtype)));
  }
  const int64_t offset = int_argument(items[1], "storage offset");
  if (offset < 0) fail("negative storage offset");
  tensor.offset = static_cast<uint64_t>(offset) + storage->view_offset;
  tensor.shape = int_tuple(items[2], "tensor size");
  tensor.strides = int_tuple(items[3], "tensor stride");
  if (tensor.shape.size() != tensor.strides.size()) fail("tensor size and stride have different lengths");
  for (size_t i = 0; i < tensor.shape.size(); ++i) {
    if (tensor.shape[i] < 0 || tensor.strides[i] < 0) fail("negative tensor size or stride");
  }
  // The optional metadata dict (torch._utils.get_tensor_metadata): the
  // conj and neg bits of lazy views.
  const size_t metadata_at = which == Global::kRebuildTensorV2 ? 6 : 7;
  if (which != Global::kRebuildTensor && items.size() > metadata_at) {
    const PickleValue* metadata = items[metadata_at];
    if (metadata->kind == Kind::kDict) {
      for (size_t i = 0; i + 1 < metadata->items.size(); i += 2) {
        const PickleValue* key = metadata->items[i];
        const PickleValue* value = metadata->items[i + 1];
        const bool on = value->kind == Kind::kBool && value->flag;
        if (key->kind == Kind::kStr && key->text == "conj") {
          tensor.conj = on;
        } else if (key->kind == Kind::kStr && key->text == "neg") {
          tensor.neg = on;
        } else {
          fail("tensor metadata " + (key->kind == Kind::kStr ? detail::quoted(key->text) : std::string("'?'")) +
                   " is not supported",
               ErrorCode::kUnsupported);
        }
      }
    } else if (metadata->kind != Kind::kNone) {
      fail(std::string(what) + ": metadata is not a dict");
    }
  }
  PickleValue* object = make(Kind::kTensor);
  object->integer = static_cast<int64_t>(result_.tensors.size());
  result_.tensors.push_back(std::move(tensor));
  return object;
}

void Machine::build(PickleValue* target, PickleValue* state) {
  // OrderedDict state dicts carry `_metadata` (module versions) as instance
  // state; it is accepted and not kept. Nothing else has state.
  if (target->kind == Kind::kDict && (state->kind == Kind::kDict || state->kind == Kind::kNone)) return;
  if (target->kind == Kind::kTensor && state->kind == Kind::kNone) return;
  if (target->kind == Kind::kObject) {
    if (target->items.size() != 1) fail("BUILD of " + detail::quoted(target->text) + " twice");
    target->items.push_back(state);
    return;
  }
  fail("BUILD (object state) is only accepted on dicts", ErrorCode::kUnsupported);
}

PickleValue* Machine::persistent_load(PickleValue* pid) {
  const size_t fields = options_.legacy ? 6 : 5;
  if (pid->kind != Kind::kTuple || pid->items.size() != fields || pid->items[0]->kind != Kind::kStr ||
      pid->items[0]->text != "storage") {
    fail("persistent id is not a " + std::to_string(fields) + "-tuple ('storage', ...)");
  }
  const auto& items = pid->items;
  PickleValue* type = items[1];
  if (type->kind != Kind::kGlobal || type->global != Global::kStorageType) {
    fail("persistent id names no storage class");
  }
  if (items[2]->kind != Kind::kStr) fail("storage key is not a string");
  if (items[3]->kind != Kind::kStr) fail("storage location is not a string");
  const int64_t numel = int_argument(items[4], "storage size");
  if (numel < 0) fail("negative storage size");

  const std::string& key = items[2]->text;
  uint32_t index = 0;
  if (auto found = result_.storage_index.find(key); found != result_.storage_index.end()) {
    index = found->second;
    if (result_.storages[index].dtype != type->dtype) fail("storage " + detail::quoted(key) + " is used with two types");
  } else {
    index = static_cast<uint32_t>(result_.storages.size());
    result_.storages.push_back({.key = key, .dtype = type->dtype, .numel = static_cast<uint64_t>(numel),
                                .location = items[3]->text});
    result_.storage_index.emplace(key, index);
  }
  PickleValue* storage = make(Kind::kStorage);
  storage->integer = index;
  if (options_.legacy && items[5]->kind != Kind::kNone) {
    // (view_key, offset, size): a view of the root storage `key`.
    PickleValue* view = items[5];
    if (view->kind != Kind::kTuple || view->items.size() != 3) fail("legacy storage view is not a 3-tuple");
    const int64_t view_offset = int_argument(view->items[1], "storage view offset");
    const int64_t view_size = int_argument(view->items[2], "storage view size");
    if (view_offset < 0 || view_size < 0 || static_cast<uint64_t>(view_offset) + static_cast<uint64_t>(view_size) >
                                                static_cast<uint64_t>(numel)) {
      fail("legacy storage view lies outside its storage");
    }
    storage->view_offset = static_cast<uint64_t>(view_offset);
  }
  return storage;
}

std::optional<GlobalInfo> resolve_global(std::string_view module, std::string_view name) {
  if (module == "collections" && (name == "OrderedDict" || name == "Counter")) return GlobalInfo{Global::kOrderedDict};
  if (module == "builtins" || module == "__builtin__") {
    if (name == "set" || name == "frozenset") return GlobalInfo{Global::kSet};
    // bytes(): protocol 2's empty bytes; bytearray(...): a bytearray.
    if (name == "bytearray" || name == "bytes") return GlobalInfo{Global::kByteArray};
    return std::nullopt;
  }
  if (module == "_codecs" && name == "encode") return GlobalInfo{Global::kCodecsEncode};
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor") return GlobalInfo{Global::kRebuildTensor};
    if (name == "_rebuild_tensor_v2") return GlobalInfo{Global::kRebuildTensorV2};
    if (name == "_rebuild_tensor_v3") return GlobalInfo{Global::kRebuildTensorV3};
    if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state") {
      return GlobalInfo{Global::kRebuildParameter};
    }
    return std::nullopt;
  }
  if (module == "torch._tensor" && name == "_rebuild_from_type_v2") return GlobalInfo{Global::kRebuildFromType};
  if (module == "torch.serialization" && name == "_get_layout") return GlobalInfo{Global::kLayout};
  if ((module == "torch.nn.parameter" || module == "torch.nn") && name == "Parameter") {
    return GlobalInfo{Global::kTensorType};
  }
  if (module == "torch.storage" && (name == "UntypedStorage" || name == "_UntypedStorage")) {
    return GlobalInfo{Global::kStorageType};
  }
  if (module == "torch" || module == "torch.cuda") {
    for (const TypedStorageName& storage : kTypedStorages) {
      if (name == storage.name) return GlobalInfo{Global::kStorageType, storage.dtype};
    }
    if (name == "UntypedStorage") return GlobalInfo{Global::kStorageType};
  }
  if (module == "torch") {
    if (name == "Size") return GlobalInfo{Global::kSize};
    if (name == "device") return GlobalInfo{Global::kDevice};
    if (name == "Tensor") return GlobalInfo{Global::kTensorType};
    for (const DTypeInfo& info : all_dtypes()) {
      if (name == info.torch) return GlobalInfo{Global::kDType, info.dtype};
    }
    for (const DTypeAlias& alias : kDTypeAliases) {
      if (name == alias.name) return GlobalInfo{Global::kDType, alias.dtype};
    }
  }
  return std::nullopt;
}

}  // namespace ckpt::torch_detail
