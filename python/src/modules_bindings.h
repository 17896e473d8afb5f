#pragma once
// Module file assignment and preloads for the extension module (modules.h,
// preload.h): _ckpt.split_by_module, _ckpt.merge_module_files and
// _ckpt.apply_preloads over plain nests. The Python API over them
// (ckpt.split_by_module, ckpt.Preload, ckpt.apply_preloads) is
// python/ckpt/_modules.py.

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

// Adds the functions to `m`. Call after the general translator.
void bind_modules(py::module_& m);

}  // namespace ckpt::python
