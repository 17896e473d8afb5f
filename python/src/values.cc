#include "values.h"

#include <pybind11/numpy.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/error.h"

namespace ckpt::python {

// Helpers below have external linkage in ckpt::python but are declared only
// here; the module's entry points are in values.h.

// ---------------------------------------------------------------- dtypes

struct Frameworks {
  py::object numpy;
  py::object ml_dtypes;
  std::vector<py::object> numpy_dtypes;  // by DType
  std::unordered_map<PyObject*, DType> numpy_dtype_index;  // those dtype objects → DType
  py::object torch;                      // None until torch is first needed
  py::object torch_from_numpy;
  py::object torch_tensor_type;
  std::vector<py::object> torch_dtypes;  // by DType
  std::unordered_map<PyObject*, DType> torch_dtype_index;  // torch.dtype object → DType
  py::object torch_uint8;
  py::object torch_uint16;
};
Frameworks& frameworks() {
  static Frameworks* f = new Frameworks();
  return *f;
}

const py::object& numpy_dtype(DType dtype) {
  Frameworks& f = frameworks();
  if (f.numpy_dtypes.empty()) {
    f.numpy = py::module_::import("numpy");
    for (const DTypeInfo& info : all_dtypes()) {
      if (!info.numpy_descr.empty()) {
        f.numpy_dtypes.push_back(f.numpy.attr("dtype")(std::string(info.numpy_descr)));
      } else if (info.dtype == DType::kFloat4E2M1FNx2) {
        // Packed pairs have no numpy (or ml_dtypes) dtype: numpy sees the
        // bytes (the index below keeps uint8 for kUInt8).
        f.numpy_dtypes.push_back(f.numpy.attr("dtype")("|u1"));
      } else {
        if (!f.ml_dtypes) f.ml_dtypes = py::module_::import("ml_dtypes");
        f.numpy_dtypes.push_back(f.numpy.attr("dtype")(f.ml_dtypes.attr(std::string(info.name).c_str())));
      }
      f.numpy_dtype_index.emplace(f.numpy_dtypes.back().ptr(), info.dtype);
    }
  }
  return f.numpy_dtypes[static_cast<size_t>(dtype)];
}

bool torch_loaded() {
  if (frameworks().torch) return true;
  static py::object* modules = new py::object(py::module_::import("sys").attr("modules"));
  return modules->contains("torch");
}

Frameworks& torch_handles() {
  Frameworks& f = frameworks();
  if (f.torch) return f;
  // Importing may let other threads run (it can release the GIL): everything
  // is built in locals and published at once, under the GIL, by whichever
  // thread gets there first.
  py::object torch = py::module_::import("torch");
  std::vector<py::object> dtypes;
  std::unordered_map<PyObject*, DType> index;
  for (const DTypeInfo& info : all_dtypes()) {
    dtypes.push_back(torch.attr(std::string(info.torch).c_str()));
    index.emplace(dtypes.back().ptr(), info.dtype);
  }
  py::object from_numpy = torch.attr("from_numpy");
  py::object tensor_type = torch.attr("Tensor");
  py::object uint8 = torch.attr("uint8");
  py::object uint16 = torch.attr("uint16");
  if (f.torch) return f;  // another thread finished first
  f.torch_dtypes = std::move(dtypes);
  f.torch_dtype_index = std::move(index);
  f.torch_from_numpy = std::move(from_numpy);
  f.torch_tensor_type = std::move(tensor_type);
  f.torch_uint8 = std::move(uint8);
  f.torch_uint16 = std::move(uint16);
  f.torch = std::move(torch);  // last: the flag the check above reads
  return f;
}

// numpy cannot hold these natively: torch sees them as integers of their width.
bool numpy_lacks(DType dtype) { return dtype_info(dtype).numpy_descr.empty(); }

// ---------------------------------------------------------------- tensors out

Framework framework_from(const std::string& name) {
  if (name == "numpy" || name == "np") return Framework::kNumpy;
  if (name == "torch" || name == "pt") return Framework::kTorch;
  throw Error(ErrorCode::kInvalidArgument, "framework must be 'numpy' or 'torch', not '" + name + "'");
}

// The numpy dtype of `dtype`; `as_bits` gives dtypes numpy lacks as unsigned
// integers of their width (for torch).
const py::object& numpy_dtype_for(DType dtype, bool as_bits) {
  if (as_bits && numpy_lacks(dtype)) return numpy_dtype(dtype_size(dtype) == 2 ? DType::kUInt16 : DType::kUInt8);
  return numpy_dtype(dtype);
}

// The name of the capsules that hold the Buffer under an array ckpt made:
// saving a read-only one again hands the core that Buffer (a mapping of a
// file stays one, which an asynchronous save need not copy) instead of a
// loan of its memory (loaned_buffer).
constexpr const char* kBufferCapsule = "ckpt.Buffer";

void delete_buffer_capsule(PyObject* capsule) {
  delete static_cast<Buffer*>(PyCapsule_GetPointer(capsule, kBufferCapsule));
}

// A numpy array of `shape` and byte `strides` at `data`, which `buffer`
// keeps alive (held by a capsule).
py::array array_over(const Buffer& buffer, const void* data, DType dtype, bool as_bits, std::span<const int64_t> shape,
                     std::vector<py::ssize_t> strides, bool writable) {
  std::vector<py::ssize_t> sizes(shape.begin(), shape.end());
  py::capsule base(new Buffer(buffer), kBufferCapsule, &delete_buffer_capsule);
  py::array array(py::reinterpret_borrow<py::dtype>(numpy_dtype_for(dtype, as_bits)), sizes, strides, data, base);
  if (!writable) py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

// A numpy array viewing `tensor`'s memory, kept alive by a capsule. A view
// kept as strides over its storage (Tensor::strided_view: a torch view, an
// Orbax array of fill value) is viewed with those strides, never gathered,
// unless the array must be writable (several elements may be one byte).
py::array numpy_view(const Tensor& tensor, bool writable, bool as_bits) {
  static const std::byte kEmpty[64] = {};
  const size_t item = dtype_size(tensor.dtype());
  if (!writable) {
    if (const std::optional<StridedView> view = tensor.strided_view()) {
      std::vector<py::ssize_t> strides(view->strides.size());
      for (size_t i = 0; i < strides.size(); ++i) strides[i] = static_cast<py::ssize_t>(view->strides[i] * item);
      const std::byte* data = view->storage.data() + view->offset * item;  // the storage's bytes, never the view's
      return array_over(view->storage, data, tensor.dtype(), as_bits, tensor.shape(), std::move(strides), false);
    }
  }
  const Buffer& buffer = tensor.buffer();
  std::vector<py::ssize_t> strides(tensor.ndim());
  py::ssize_t stride = static_cast<py::ssize_t>(item);
  for (size_t i = tensor.ndim(); i-- > 0;) {
    strides[i] = stride;
    stride *= tensor.shape()[i] > 0 ? tensor.shape()[i] : 1;
  }
  const void* data = buffer.empty() ? static_cast<const void*>(kEmpty) : buffer.data();  // deferred: gathers here
  return array_over(buffer, data, tensor.dtype(), as_bits, tensor.shape(), std::move(strides), writable);
}

// A writable torch tensor over `tensor`'s memory (torch.from_numpy).
py::object torch_over(const Tensor& tensor) {
  Frameworks& f = torch_handles();
  py::object result = f.torch_from_numpy(numpy_view(tensor, /*writable=*/true, /*as_bits=*/true));
  if (numpy_lacks(tensor.dtype())) result = result.attr("view")(f.torch_dtypes[static_cast<size_t>(tensor.dtype())]);
  return result;
}

py::object tensor_out(const Tensor& tensor, Framework framework, bool writable_numpy) {
  if (framework == Framework::kNumpy) {
    // Read-only unless asked: every array over one loaded file views the
    // same mapping (tied weights are one Buffer).
    return numpy_view(tensor, writable_numpy, /*as_bits=*/false);
  }
  // torch tensors are writable; the mapping is private (copy on write), so a
  // write never reaches the file.
  if (const std::optional<StridedView> view = tensor.strided_view()) {
    // As torch.load builds it: the whole storage as a flat tensor, then
    // as_strided with the view's size, stride and storage offset.
    const size_t item = dtype_size(tensor.dtype());
    const size_t count = view->storage.size() / item;
    Buffer whole = view->storage;
    if (whole.size() != count * item) whole = whole.slice(0, count * item);
    const Tensor storage(tensor.dtype(), {static_cast<int64_t>(count)}, std::move(whole));
    py::tuple sizes(tensor.ndim()), strides(tensor.ndim());
    for (size_t i = 0; i < tensor.ndim(); ++i) {
      sizes[i] = py::int_(tensor.shape()[i]);
      strides[i] = py::int_(view->strides[i]);
    }
    return torch_over(storage).attr("as_strided")(sizes, strides, py::int_(view->offset));
  }
  return torch_over(tensor);
}

// Tensors already converted, by address: tied weights (leaves viewing the
// same bytes) come out as one Python object, so they stay tied.
using Converted = std::unordered_map<const std::byte*, std::pair<Tensor, py::object>>;

py::object tensor_out_once(const Tensor& tensor, Framework framework, Converted& converted) {
  const std::byte* address = tensor.buffer().address();
  if (address == nullptr || tensor.nbytes() == 0) return tensor_out(tensor, framework);
  const auto found = converted.find(address);
  if (found != converted.end() && found->second.first.same_memory(tensor) &&
      found->second.first.dtype() == tensor.dtype() && found->second.first.shape() == tensor.shape()) {
    return found->second.second;
  }
  py::object result = tensor_out(tensor, framework);
  converted.insert_or_assign(address, std::make_pair(tensor, result));
  return result;
}

// Text of a tree or a file as a Python str (see value_out).
py::str text_out(const std::string& text) {
  PyObject* str = PyUnicode_DecodeUTF8(text.data(), static_cast<py::ssize_t>(text.size()), "surrogatepass");
  if (str == nullptr) {
    PyErr_Clear();
    throw Error(ErrorCode::kCorrupt, "a string or key of " + std::to_string(text.size()) + " bytes is not valid UTF-8");
  }
  return py::reinterpret_steal<py::str>(str);
}

// Strings and bytes whose payload the tree shares (a pickle's memoized str
// referenced many times), by payload address: each becomes one Python
// object, referenced as often as the tree references it.
using SharedTexts = std::unordered_map<const void*, py::object>;

py::object leaf_text_out(const Tree& tree) {
  if (tree.kind() == Tree::Kind::kBytes) return py::bytes(tree.bytes().data);
  return text_out(tree.string());
}

py::object shared_text_out(const Tree& tree, SharedTexts& texts) {
  if (!tree.shared()) return leaf_text_out(tree);
  const void* payload = tree.kind() == Tree::Kind::kBytes ? static_cast<const void*>(&tree.bytes())
                                                          : static_cast<const void*>(&tree.string());
  auto [found, inserted] = texts.try_emplace(payload);
  if (inserted) found->second = leaf_text_out(tree);
  return found->second;
}

py::object value_out_at(const Tree& tree, Framework framework, size_t depth, Converted& converted,
                        SharedTexts& texts) {
  switch (tree.kind()) {
    case Tree::Kind::kNone: return py::none();
    case Tree::Kind::kBool: return py::bool_(tree.boolean());
    case Tree::Kind::kInt: return py::int_(tree.integer());
    case Tree::Kind::kFloat: return py::float_(tree.real());
    case Tree::Kind::kString:
    case Tree::Kind::kBytes: return shared_text_out(tree, texts);
    case Tree::Kind::kTensor: return tensor_out_once(tree.tensor(), framework, converted);
    case Tree::Kind::kList: {
      py::list list(tree.size());
      for (size_t i = 0; i < tree.size(); ++i) {
        list[i] = value_out_at(tree.child(i), framework, depth + 1, converted, texts);
      }
      return list;
    }
    case Tree::Kind::kMap: {
      py::dict dict;
      for (size_t i = 0; i < tree.size(); ++i) {
        const Key& entry_key = *tree.map_key(i);
        py::object key;
        if (const auto* text = std::get_if<std::string>(&entry_key)) {
          key = text_out(*text);
        } else {
          key = py::int_(std::get<int64_t>(entry_key));
        }
        dict[key] = value_out_at(tree.child(i), framework, depth + 1, converted, texts);
      }
      return dict;
    }
  }
  return py::none();
}

py::object value_out(const Tree& tree, Framework framework) {
  Converted converted;
  SharedTexts texts;
  return value_out_at(tree, framework, 0, converted, texts);
}

// ---------------------------------------------------------------- values in

constexpr size_t kMaxDepth = 512;

[[noreturn]] void type_error(const std::string& name, py::handle value, const std::string& why) {
  const std::string type = py::str(py::type::handle_of(value).attr("__name__"));
  throw py::type_error("cannot save " + (name.empty() ? std::string("the state") : "'" + name + "'") + " of type " +
                       type + ": " + why);
}

// The part of ckpt's own Buffer that a read-only, C-contiguous array made
// by array_over views (a loaded tensor, a slice of one); nullopt for any
// other array. Writable arrays are lent instead: the caller can change them.
std::optional<Buffer> ckpt_buffer_of(const py::array& array, size_t nbytes) {
  if (array.writeable() || nbytes == 0) return std::nullopt;
  PyObject* base = py::detail::array_proxy(array.ptr())->base;
  if (base == nullptr || !PyCapsule_IsValid(base, kBufferCapsule)) return std::nullopt;
  const Buffer& buffer = *static_cast<const Buffer*>(PyCapsule_GetPointer(base, kBufferCapsule));
  const auto* data = static_cast<const std::byte*>(array.data());
  const std::byte* begin = buffer.data();
  if (begin == nullptr || data < begin || static_cast<size_t>(data - begin) > buffer.size() ||
      nbytes > buffer.size() - static_cast<size_t>(data - begin)) {
    return std::nullopt;
  }
  return buffer.slice(static_cast<size_t>(data - begin), nbytes);
}

Tensor tensor_from_numpy(py::handle value, const std::string& name, std::optional<DType> bits_of = std::nullopt) {
  Frameworks& f = frameworks();
  if (!f.numpy) numpy_dtype(DType::kFloat32);
  py::array array = py::reinterpret_borrow<py::array>(value);
  DType dtype;
  const py::object descr = array.dtype();
  const auto known = f.numpy_dtype_index.find(descr.ptr());  // native dtypes are singletons
  if (bits_of) {
    dtype = *bits_of;
  } else if (known != f.numpy_dtype_index.end()) {
    dtype = known->second;
  } else {
    const std::string dtype_name_text = py::str(array.dtype().attr("name"));
    const std::optional<DType> found = dtype_from_name(dtype_name_text);
    if (!found) type_error(name, value, "arrays of dtype " + dtype_name_text + " cannot be stored");
    dtype = *found;
    // Non-native byte order: as little-endian (a copy).
    const char order = py::str(array.dtype().attr("byteorder")).cast<std::string>()[0];
    if (order == '>') array = array.attr("astype")(array.dtype().attr("newbyteorder")("<"));
  }
  if (!(array.flags() & py::array::c_style)) {
    array = f.numpy.attr("ascontiguousarray")(array);
  }
  Shape shape(array.shape(), array.shape() + array.ndim());
  // Through Python, not pybind11's nbytes(): Debian's pybind11 (2.10) reads
  // the dtype's item size from numpy 1's descriptor layout, which numpy 2
  // changed.
  const auto nbytes = array.attr("nbytes").cast<size_t>();
  if (std::optional<Buffer> own = ckpt_buffer_of(array, nbytes)) {
    return Tensor(dtype, std::move(shape), std::move(*own));
  }
  PyObject* owner = array.ptr();
  Py_INCREF(owner);
  Buffer buffer = Buffer::lend({static_cast<const std::byte*>(array.data()), nbytes}, [owner] {
    py::gil_scoped_acquire gil;
    Py_DECREF(owner);
  });
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

// A torch tensor's memory, lent to the core: CPU, contiguous, conj/neg bits
// resolved (copies only where the tensor is not so already). Attribute reads
// only on the common path: this runs once per tensor of a state dict.
Tensor tensor_from_torch(py::handle value, const std::string& name) {
  Frameworks& f = torch_handles();
  py::object tensor = py::reinterpret_borrow<py::object>(value);
  if (!tensor.attr("is_cpu").cast<bool>()) tensor = tensor.attr("cpu")();
  if (tensor.attr("is_conj")().cast<bool>()) tensor = tensor.attr("resolve_conj")();
  if (tensor.attr("is_neg")().cast<bool>()) tensor = tensor.attr("resolve_neg")();
  if (!tensor.attr("is_contiguous")().cast<bool>()) tensor = tensor.attr("contiguous")();
  const py::object torch_dtype = tensor.attr("dtype");
  const auto found = f.torch_dtype_index.find(torch_dtype.ptr());
  if (found == f.torch_dtype_index.end()) {
    type_error(name, value, "torch dtype " + py::str(torch_dtype).cast<std::string>() + " cannot be stored");
  }
  const DType dtype = found->second;
  const py::tuple sizes = py::tuple(tensor.attr("shape"));
  Shape shape;
  shape.reserve(sizes.size());
  for (py::handle size : sizes) shape.push_back(size.cast<int64_t>());
  const uint64_t nbytes = checked_numel(shape, dtype_size(dtype)) * dtype_size(dtype);
  const auto* data = reinterpret_cast<const std::byte*>(
      nbytes == 0 ? 0 : tensor.attr("data_ptr")().cast<uintptr_t>());
  PyObject* owner = tensor.release().ptr();  // kept alive until the core is done with the memory
  Buffer buffer = Buffer::lend({data, static_cast<size_t>(nbytes)}, [owner] {
    py::gil_scoped_acquire gil;
    Py_DECREF(owner);
  });
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

Tree value_in(py::handle value, const std::string& name, size_t depth) {
  if (depth > kMaxDepth) throw py::value_error("state nested deeper than 512 levels (or a cycle) at '" + name + "'");
  if (value.is_none()) return Tree();
  if (PyBool_Check(value.ptr())) return Tree(value.ptr() == Py_True);
  if (PyLong_Check(value.ptr())) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow != 0) {
      throw Error(ErrorCode::kUnsupported, "integer wider than 64 bits", {.entry = name});
    }
    return Tree(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(value.ptr())) return Tree(PyFloat_AS_DOUBLE(value.ptr()));
  if (PyComplex_Check(value.ptr())) {
    // A 0-d complex128 tensor: the tree has no complex leaf (Flax's ext 2
    // reads back as one too).
    const double parts[2] = {PyComplex_RealAsDouble(value.ptr()), PyComplex_ImagAsDouble(value.ptr())};
    return Tree(Tensor::from_bytes(DType::kComplex128, {}, std::as_bytes(std::span(parts))));
  }
  if (PyUnicode_Check(value.ptr())) {
    PyObject* utf8 = PyUnicode_AsEncodedString(value.ptr(), "utf-8", "surrogatepass");
    if (utf8 == nullptr) throw py::error_already_set();
    py::bytes bytes = py::reinterpret_steal<py::bytes>(utf8);
    return Tree(static_cast<std::string>(bytes));
  }
  if (PyBytes_Check(value.ptr())) return Tree(Bytes{static_cast<std::string>(py::reinterpret_borrow<py::bytes>(value))});
  if (PyByteArray_Check(value.ptr())) {
    return Tree(Bytes{std::string(PyByteArray_AS_STRING(value.ptr()), PyByteArray_GET_SIZE(value.ptr()))});
  }
  if (py::isinstance<py::array>(value)) return Tree(tensor_from_numpy(value, name));
  if (PyDict_Check(value.ptr())) {
    Tree map = Tree::map();
    py::dict dict = py::reinterpret_borrow<py::dict>(value);
    map.reserve(dict.size());
    for (auto item : dict) {
      Key key;
      std::string key_text;
      if (PyUnicode_Check(item.first.ptr())) {
        key_text = py::str(item.first);
        key = key_text;
      } else if (PyLong_Check(item.first.ptr()) && !PyBool_Check(item.first.ptr())) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(item.first.ptr(), &overflow);
        if (overflow != 0) {
          throw Error(ErrorCode::kUnsupported, "integer dict key wider than 64 bits",
                      {.entry = join_name(name, std::string(py::str(item.first)))});
        }
        key = static_cast<int64_t>(v);
        key_text = key_to_string(key);
      } else {
        type_error(join_name(name, std::string(py::str(item.first))), item.first, "dict keys must be str or int");
      }
      Tree child = value_in(item.second, join_name(name, key_text), depth + 1);
      map.set(std::move(key), std::move(child));
    }
    return map;
  }
  if (PyTuple_Check(value.ptr()) && !PyTuple_CheckExact(value.ptr())) {
    // A NamedTuple (optax's states): a map by field name, as Flax's
    // to_state_dict and ckpt.to_nest store it.
    const py::object fields = py::getattr(py::type::handle_of(value), "_fields", py::none());
    if (PyTuple_Check(fields.ptr())) {
      const py::ssize_t count = PyTuple_GET_SIZE(fields.ptr());
      if (count != PyTuple_GET_SIZE(value.ptr())) type_error(name, value, "its _fields do not name its items");
      Tree map = Tree::map();
      map.reserve(static_cast<size_t>(count));
      for (py::ssize_t i = 0; i < count; ++i) {
        const py::handle field_name(PyTuple_GET_ITEM(fields.ptr(), i));
        if (!PyUnicode_Check(field_name.ptr())) type_error(name, value, "its _fields are not strings");
        const std::string field = py::str(field_name);
        map.set(field, value_in(py::handle(PyTuple_GET_ITEM(value.ptr(), i)), join_name(name, field), depth + 1));
      }
      return map;
    }
  }
  if (PyList_Check(value.ptr()) || PyTuple_Check(value.ptr())) {
    Tree list = Tree::list();
    py::sequence sequence = py::reinterpret_borrow<py::sequence>(value);
    list.reserve(sequence.size());
    size_t i = 0;
    for (auto item : sequence) list.push_back(value_in(item, join_name(name, std::to_string(i++)), depth + 1));
    return list;
  }
  if (torch_loaded()) {
    Frameworks& f = torch_handles();
    if (py::isinstance(value, f.torch_tensor_type)) return Tree(tensor_from_torch(value, name));
  }
  // A restore target's spec leaf (ckpt.TensorSpec): a dtype and a shape.
  if (py::hasattr(value, "__ckpt_spec__")) {
    const std::string dtype_text = py::str(value.attr("dtype"));
    const std::optional<DType> dtype = dtype_from_name(dtype_text);
    if (!dtype) type_error(name, value, "unknown dtype '" + dtype_text + "'");
    Shape shape;
    for (py::handle size : py::iter(value.attr("shape"))) shape.push_back(size.cast<int64_t>());
    return Tree(Tensor::spec(*dtype, std::move(shape)));
  }
  // numpy scalars (np.float32(1.5)) and anything else with __array__.
  if (py::hasattr(value, "__array__") || py::hasattr(value, "dtype")) {
    Frameworks& f = frameworks();
    if (!f.numpy) numpy_dtype(DType::kFloat32);
    return Tree(tensor_from_numpy(f.numpy.attr("asarray")(value), name));
  }
  type_error(name, value, "ckpt stores dicts, lists, tuples, numpy arrays, torch tensors, int, float, complex, "
                          "bool, str, bytes and None");
}

Metadata metadata_in(const py::object& metadata) {
  Metadata out;
  if (metadata.is_none()) return out;
  for (auto item : py::reinterpret_borrow<py::dict>(metadata)) {
    if (!PyUnicode_Check(item.first.ptr()) || !PyUnicode_Check(item.second.ptr())) {
      throw py::type_error("metadata must map str to str");
    }
    out[py::str(item.first)] = py::str(item.second);
  }
  return out;
}

py::dict metadata_out(const Metadata& metadata) {
  py::dict out;
  for (const auto& [key, value] : metadata) out[text_out(key)] = text_out(value);
  return out;
}

void init_values() {
  // numpy's C API (pybind11 imports numpy.core.multiarray inside a function
  // static, whose guard would be held across the import's GIL release if
  // two threads got there first together) and the dtype tables, once, while
  // the module is imported.
  py::detail::npy_api::get();
  numpy_dtype(DType::kFloat32);
}

}  // namespace ckpt::python
