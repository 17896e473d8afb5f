#pragma once
// Module files and preloads for the extension module (ckpt/modules.h,
// ckpt/preload.h): _ckpt.split_by_module, merge_module_files,
// apply_preloads. The package wraps them (python/ckpt/_modules.py): its
// Preload objects cross as dicts of the PreloadSpec fields, reports come
// back as dicts.

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

void bind_modules(py::module_& m);

}  // namespace ckpt::python
