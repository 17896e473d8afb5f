#pragma once
// The core of ckpt.safetensors, the drop-in for huggingface's `safetensors`
// package: serializing tensors given as raw memory (TensorSpec) to bytes or
// to a file with ckpt's safetensors writer (no extras: the reference bytes),
// and the dtype codes. Reading goes through the lazy handle (module.cc).

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

// Adds _ckpt.safetensors_dtypes and _ckpt.safetensors_serialize to `m`.
void bind_safetensors(py::module_& m);

}  // namespace ckpt::python
