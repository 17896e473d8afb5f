#pragma once
// Sharded saves across processes for the extension module (issue 20,
// ckpt/distributed.h): _ckpt.save_sharded and _ckpt.load_sharded over a
// communicator given as a Python object. The Python API over them, with the
// adapters for mpi4py communicators and torch ProcessGroups and the leaves
// that become shards (ckpt.Shard, DTensor, jax Arrays), is
// python/ckpt/_distributed.py.

#include <pybind11/pybind11.h>

namespace ckpt::python {

namespace py = pybind11;

// Adds the functions to `m`. Call after the general translator.
void bind_distributed(py::module_& m);

}  // namespace ckpt::python
