#include "safetensors_bindings.h"

#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/dtype.h"
#include "ckpt/error.h"
#include "ckpt/memory.h"
#include "values.h"

namespace ckpt::python {
namespace {

// float4_e2m1fn_x2 holds two 4-bit values per byte: ckpt (as torch) counts
// bytes along the last dimension, a safetensors header counts values.
bool packed_pairs(DType dtype) { return dtype_info(dtype).safetensors == "F4"; }

// One TensorSpec: name, safetensors code, logical shape, address, bytes.
using Spec = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t, size_t>;

Tree tree_of(const std::vector<Spec>& specs) {
  Tree tree = Tree::map();
  tree.reserve(specs.size());
  for (const auto& [name, code, logical, address, length] : specs) {
    const std::optional<DType> dtype = dtype_from_safetensors(code);
    if (!dtype) {
      throw Error(ErrorCode::kInvalidArgument, "unknown safetensors dtype \"" + code + "\"", {.entry = name});
    }
    Shape shape(logical.begin(), logical.end());
    if (packed_pairs(*dtype)) {
      if (shape.empty() || shape.back() % 2 != 0) {
        throw Error(ErrorCode::kInvalidArgument,
                    code + " packs two values per byte: the last dimension must be even", {.entry = name});
      }
      shape.back() /= 2;
    }
    // The caller keeps the memory alive for the call (TensorSpec's contract).
    Buffer buffer = Buffer::lend({reinterpret_cast<const std::byte*>(address), length}, {});
    try {
      tree.set(name, Tensor(*dtype, std::move(shape), std::move(buffer)));
    } catch (Error& error) {
      throw Error(error.code(), error.message(), {.entry = name});
    }
  }
  return tree;
}

SaveOptions plain_options(const py::object& metadata, bool fsync) {
  return {.format = "safetensors", .extras = false, .metadata = metadata_in(metadata), .fsync = fsync};
}

}  // namespace

void bind_safetensors(py::module_& m) {
  // {name: code} for every name a TensorSpec accepts (numpy / ml_dtypes and
  // torch names), and {code: ckpt dtype name}.
  m.def("safetensors_dtypes", [] {
    py::dict by_name, by_code;
    for (const DTypeInfo& info : all_dtypes()) {
      if (info.safetensors.empty()) continue;
      const py::str code(std::string(info.safetensors));
      by_name[py::str(std::string(info.name))] = code;
      if (!info.torch.empty()) by_name[py::str(std::string(info.torch))] = code;
      by_code[code] = py::str(std::string(info.name));
    }
    return py::make_tuple(by_name, by_code);
  });

  // The safetensors file of `specs` (in any order: the writer orders them as
  // the reference does), as bytes, or written atomically to `path` (then
  // None). The GIL is released while bytes are copied or written.
  m.def(
      "safetensors_serialize",
      [](const std::vector<Spec>& specs, py::object metadata, std::optional<std::string> path,
         bool fsync) -> py::object {
        const Tree tree = tree_of(specs);
        const SaveOptions options = plain_options(metadata, fsync);
        if (path) {
          py::gil_scoped_release release;
          PlannedFile(tree, options).write_file(*path);
          return py::none();
        }
        const PlannedFile plan(tree, options);
        PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<py::ssize_t>(plan.size()));
        if (bytes == nullptr) throw py::error_already_set();
        py::object result = py::reinterpret_steal<py::object>(bytes);
        std::span<std::byte> out(reinterpret_cast<std::byte*>(PyBytes_AS_STRING(bytes)), plan.size());
        {
          py::gil_scoped_release release;
          plan.write_to(out);
        }
        return result;
      },
      py::arg("specs"), py::arg("metadata") = py::none(), py::arg("path") = py::none(), py::arg("fsync") = true);
}

}  // namespace ckpt::python
