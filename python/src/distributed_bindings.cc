// _ckpt's sharded saves (distributed_bindings.h). The protocol is the C++
// one (save_sharded); its collectives call back into the Python adapter,
// taking the GIL for each (the adapter's engines release it while they
// wait: mpi4py, torch.distributed).

#include "distributed_bindings.h"

#include <pybind11/stl.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checksum.h"
#include "ckpt/distributed.h"
#include "ckpt/error.h"
#include "values.h"

namespace ckpt::python {
namespace {

std::string bytes_of(py::handle item) {
  if (!py::isinstance<py::bytes>(item)) {
    throw Error(ErrorCode::kIo, "the communicator returned " + std::string(py::str(item.get_type())) +
                                    " where it must return bytes");
  }
  return item.cast<std::string>();
}

using ShardsIn = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>;
using BoxesIn = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>;

}  // namespace

PythonCommunicator::PythonCommunicator(py::object adapter)
    : adapter_(std::move(adapter)),
      rank_(adapter_.attr("rank").cast<size_t>()),
      size_(adapter_.attr("size").cast<size_t>()),
      background_(py::getattr(adapter_, "background", py::bool_(false)).cast<bool>()) {}

PythonCommunicator::~PythonCommunicator() = default;

void PythonCommunicator::barrier() {
  py::gil_scoped_acquire gil;
  adapter_.attr("barrier")();
}

std::vector<std::string> PythonCommunicator::all_gather(std::string_view bytes) {
  py::gil_scoped_acquire gil;
  const py::object gathered = adapter_.attr("all_gather")(py::bytes(bytes.data(), bytes.size()));
  std::vector<std::string> out;
  for (py::handle item : py::iter(gathered)) out.push_back(bytes_of(item));
  return out;
}

std::string PythonCommunicator::broadcast(std::string_view bytes, size_t root) {
  py::gil_scoped_acquire gil;
  return bytes_of(adapter_.attr("broadcast")(py::bytes(bytes.data(), bytes.size()), root));
}

void bind_distributed(py::module_& m) {
  m.def(
      "save_sharded",
      [](const std::string& path, py::handle state, const ShardsIn& shards, py::object comm, py::object metadata,
         bool extras, const std::string& checksum, bool fsync, unsigned threads) {
        Tree tree = value_in(state, "", 0);
        std::map<std::string, ShardSpec> specs;
        for (const auto& [name, spec] : shards) specs[name] = ShardSpec{.global_shape = spec.first, .offsets = spec.second};
        PythonCommunicator communicator(std::move(comm));
        save_sharded(path, tree, specs, communicator,
                     {.extras = extras, .checksum = checksum_from_name(checksum), .metadata = metadata_in(metadata),
                      .fsync = fsync, .threads = threads});
      },
      py::arg("path"), py::arg("state"), py::arg("shards"), py::arg("comm"), py::kw_only(),
      py::arg("metadata") = py::none(), py::arg("extras") = true, py::arg("checksum") = "xxh3",
      py::arg("fsync") = true, py::arg("threads") = 0);

  m.def(
      "load_sharded",
      [](const std::string& path, py::object comm, const BoxesIn& boxes, const std::string& framework, bool lazy,
         bool verify, unsigned threads) {
        const Framework fw = framework_from(framework);
        std::map<std::string, Box> wanted;
        for (const auto& [name, box] : boxes) wanted[name] = Box{.offsets = box.first, .sizes = box.second};
        PythonCommunicator communicator(std::move(comm));
        const Tree tree = load_sharded(path, wanted, communicator, {.verify = verify, .lazy = lazy, .threads = threads});
        return naming_file(path, [&] { return value_out(tree, fw); });
      },
      py::arg("path"), py::arg("comm"), py::kw_only(), py::arg("boxes") = BoxesIn{}, py::arg("framework") = "numpy",
      py::arg("lazy") = true, py::arg("verify") = false, py::arg("threads") = 0);
}

}  // namespace ckpt::python
