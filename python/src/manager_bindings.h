#pragma once
// The checkpoint manager of the extension module (manager.h, retention.h,
// run_directory.h, average.h, checkpoint.h's detect): _ckpt.Manager, the
// policy classes, CheckpointEntry and RunListing, list_run_directory,
// prune_run_directory, average and detect. The Python API over them is
// python/ckpt/_manager.py.

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

// Adds the classes and functions to `m`. Call after the general translator.
void bind_manager(py::module_& m);

}  // namespace ckpt::python
