#pragma once
// Weight norm's checkpoint converters for the extension module
// (ckpt/weight_norm.h): _ckpt.fold_weight_norm, unfold_weight_norm,
// convert_weight_norm_names, find_weight_norms.

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

void bind_weight_norm(py::module_& m);

}  // namespace ckpt::python
