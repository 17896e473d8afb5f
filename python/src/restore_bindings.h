#pragma once
// The restore and rename functions of the extension module (restore.h,
// transform.h): _ckpt.restore, _ckpt.load_renamed, _ckpt.convert_renamed.

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

// Adds the functions to `m`, and the translator that gives a strict
// restore's MismatchError its `report`. Call after the general translator.
void bind_restore(py::module_& m);

}  // namespace ckpt::python
