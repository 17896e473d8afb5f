#pragma once
// Python values <-> ckpt trees, for the extension module: tensors as numpy
// arrays or torch tensors over ckpt's memory (zero-copy), numpy arrays and
// torch tensors lent to the core for saving, Python scalars and containers
// as tree leaves and maps/lists.

#include <pybind11/pybind11.h>

#include <string>

#include "ckpt/format.h"
#include "ckpt/tree.h"

namespace ckpt::python {

namespace py = pybind11;

enum class Framework { kNumpy, kTorch };

// Imports numpy (and ml_dtypes) and fills the dtype tables; called once when
// the extension module is imported, so that threads never race to do it.
void init_values();

// "numpy"/"np" or "torch"/"pt". Throws Error{kInvalidArgument} otherwise.
Framework framework_from(const std::string& name);

// A tensor as a numpy array (kNumpy; read-only unless `writable_numpy`) or a
// writable torch tensor over the same memory (kTorch), kept alive by a
// capsule holding its Buffer. Writable views are for memory that is private
// to this process: a private (copy-on-write) mapping or heap memory; never
// memory lent by an immutable Python object.
py::object tensor_out(const Tensor& tensor, Framework framework, bool writable_numpy = false);

// The tree as dicts, lists and Python scalars, tensors as tensor_out().
// Strings and keys are decoded as UTF-8 with "surrogatepass" (Python strings
// may hold lone surrogates, and pickles carry them). Throws
// Error{kCorrupt} (no file named: callers add it) for text that is not UTF-8
// even so, instead of Python's bare UnicodeDecodeError.
py::object value_out(const Tree& tree, Framework framework);

// A nest of dicts (str/int keys), lists, tuples, numpy arrays, torch tensors
// and Python scalars as a tree; arrays and tensors are lent, not copied
// (their Python objects stay referenced until the tree lets go of them).
// `name` is the nest's dotted path, for messages. Throws py::type_error for
// values ckpt cannot store, Error{kUnsupported} for ints past 64 bits.
Tree value_in(py::handle value, const std::string& name = "", size_t depth = 0);

Metadata metadata_in(const py::object& metadata);
py::dict metadata_out(const Metadata& metadata);

}  // namespace ckpt::python
