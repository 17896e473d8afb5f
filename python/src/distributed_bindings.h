#pragma once
// Sharded saves across processes for the extension module (issue 20,
// ckpt/distributed.h): _ckpt.save_sharded and _ckpt.load_sharded over a
// communicator given as a Python object. The Python API over them, with the
// adapters for mpi4py communicators and torch ProcessGroups and the leaves
// that become shards (ckpt.Shard, DTensor, jax Arrays), is
// python/ckpt/_distributed.py.

#include <pybind11/pybind11.h>

#include <string>
#include <string_view>
#include <vector>

#include "ckpt/distributed.h"

namespace ckpt::python {

namespace py = pybind11;

// A Communicator over a Python object with `rank` and `size` (ints) and the
// methods all_gather(bytes) -> list of bytes, broadcast(bytes, root) ->
// bytes and barrier() (python/ckpt/_distributed.py's adapters). Each call
// takes the GIL (a manager's background thread, or a binding that released
// it, calls them); Python exceptions raised there propagate as they are.
// callable_from_any_thread(): the adapter's `background` attribute (False
// when it has none), read once here. Construct and destroy with the GIL held.
class PythonCommunicator final : public Communicator {
 public:
  explicit PythonCommunicator(py::object adapter);
  ~PythonCommunicator() override;

  size_t rank() const override { return rank_; }
  size_t size() const override { return size_; }
  bool callable_from_any_thread() const override { return background_; }
  void barrier() override;
  std::vector<std::string> all_gather(std::string_view bytes) override;
  std::string broadcast(std::string_view bytes, size_t root) override;

 private:
  py::object adapter_;
  size_t rank_;
  size_t size_;
  bool background_;
};

// Adds the functions to `m`. Call after the general translator.
void bind_distributed(py::module_& m);

}  // namespace ckpt::python
