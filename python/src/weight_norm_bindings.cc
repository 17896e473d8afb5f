// _ckpt's weight-norm functions (weight_norm_bindings.h). States cross the
// boundary as every tree does (values.h): tensors lent in, and out as numpy
// arrays or torch tensors; the package (python/ckpt/_weight_norm.py) picks
// the framework from the state given.

#include "weight_norm_bindings.h"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "ckpt/weight_norm.h"
#include "values.h"

namespace ckpt::python {
namespace {

// "auto" (or None): every naming; else one id or a list of them.
std::vector<WeightNormNames> namings_in(const py::object& names) {
  if (names.is_none()) return WeightNormOptions{}.names;
  if (py::isinstance<py::str>(names)) {
    const std::string id = names.cast<std::string>();
    if (id == "auto") return WeightNormOptions{}.names;
    return {weight_norm_names_from_id(id)};
  }
  std::vector<WeightNormNames> out;
  for (py::handle item : py::iter(names)) out.push_back(weight_norm_names_from_id(item.cast<std::string>()));
  return out;
}

}  // namespace

void bind_weight_norm(py::module_& m) {
  m.def(
      "find_weight_norms",
      [](py::handle state, py::object names, std::optional<int64_t> dim) {
        const Tree tree = value_in(state, "", 0);
        py::list out;
        for (const WeightNormParameter& parameter :
             find_weight_norms(tree, {.names = namings_in(names), .dim = dim})) {
          py::dict item;
          item["name"] = parameter.name;
          item["names"] = std::string(weight_norm_names_id(parameter.names));
          item["g"] = parameter.g_name;
          item["v"] = parameter.v_name;
          item["dim"] = parameter.dim == kWeightNormAllDims ? py::object(py::none()) : py::int_(parameter.dim);
          item["shape"] = py::tuple(py::cast(parameter.shape));
          item["dtype"] = std::string(dtype_name(parameter.dtype));
          const Formula formula = weight_norm_formula(parameter);
          item["formula"] = formula.text();
          item["formula_json"] = formula.json();
          out.append(item);
        }
        return out;
      },
      py::arg("state"), py::arg("names") = py::none(), py::arg("dim") = py::none());

  m.def(
      "fold_weight_norm",
      [](py::handle state, py::object names, std::optional<int64_t> dim, const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        return value_out(fold_weight_norm(tree, {.names = namings_in(names), .dim = dim}), fw);
      },
      py::arg("state"), py::arg("names") = py::none(), py::arg("dim") = py::none(),
      py::arg("framework") = "numpy");

  m.def(
      "unfold_weight_norm",
      [](py::handle state, std::optional<int64_t> dim, const std::string& names, py::object params,
         const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        UnfoldWeightNormOptions options{.names = weight_norm_names_from_id(names)};
        if (!params.is_none()) {
          if (PyCallable_Check(params.ptr())) {
            // Called with the GIL held (this whole function holds it).
            options.select = [params](std::string_view name, const Tensor&) {
              return params(py::str(std::string(name))).cast<bool>();
            };
          } else if (py::isinstance<py::str>(params)) {
            options.parameters = {params.cast<std::string>()};
          } else {
            options.parameters = params.cast<std::vector<std::string>>();
            if (options.parameters.empty()) return value_out(tree, fw);  // nothing asked for
          }
        }
        return value_out(unfold_weight_norm(tree, dim.value_or(kWeightNormAllDims), options), fw);
      },
      py::arg("state"), py::arg("dim"), py::arg("names") = "new", py::arg("params") = py::none(),
      py::arg("framework") = "numpy");

  m.def(
      "convert_weight_norm_names",
      [](py::handle state, const std::string& to, py::object from, const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        std::optional<WeightNormNames> source;
        if (!from.is_none() && from.cast<std::string>() != "auto") {
          source = weight_norm_names_from_id(from.cast<std::string>());
        }
        return value_out(convert_weight_norm_names(tree, source, weight_norm_names_from_id(to)), fw);
      },
      py::arg("state"), py::arg("to") = "new", py::arg("from_names") = py::none(), py::arg("framework") = "numpy");
}

}  // namespace ckpt::python
