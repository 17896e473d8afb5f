// _ckpt.restore, the renaming load and convert: restore.h and
// transform.h for the Python package. The structure of Python targets
// (dataclasses, NamedTuples, modules) is handled in python/ckpt/_restore.py;
// this side sees plain nests of dicts, lists and leaves.

#include "restore_bindings.h"

#include <pybind11/stl.h>

#include <map>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/convert.h"
#include "ckpt/restore.h"
#include "values.h"

namespace ckpt::python {
namespace {

std::string text_at(const py::tuple& step, size_t index) {
  if (index >= step.size() || !py::isinstance<py::str>(step[index])) {
    throw py::value_error("rename step " + py::repr(step).cast<std::string>() + ": expected a string at position " +
                          std::to_string(index));
  }
  return step[index].cast<std::string>();
}

// Each step a tuple: ("prefix", old, new), ("regex", pattern, replacement),
// ("table", {old: new}), ("drop", glob), ("add_prefix", p), ("strip_prefix", p).
Transforms transforms_in(py::handle steps) {
  Transforms transforms;
  if (steps.is_none()) return transforms;
  for (py::handle item : py::iter(steps)) {
    if (!py::isinstance<py::tuple>(item) || py::len(item) == 0) {
      throw py::type_error("a rename step must be a tuple such as ('prefix', 'old', 'new'), not " +
                           py::repr(item).cast<std::string>());
    }
    const py::tuple step = py::reinterpret_borrow<py::tuple>(item);
    const std::string kind = text_at(step, 0);
    if (kind == "prefix") {
      transforms.rename_prefix(text_at(step, 1), text_at(step, 2));
    } else if (kind == "regex") {
      transforms.rename_regex(text_at(step, 1), text_at(step, 2));
    } else if (kind == "table") {
      if (step.size() < 2) throw py::value_error("('table', {old: new}) needs its table");
      transforms.rename(step[1].cast<std::map<std::string, std::string>>());
    } else if (kind == "drop") {
      transforms.drop(text_at(step, 1));
    } else if (kind == "add_prefix") {
      transforms.add_prefix(text_at(step, 1));
    } else if (kind == "strip_prefix") {
      transforms.strip_prefix(text_at(step, 1));
    } else {
      throw py::value_error("unknown rename step '" + kind +
                            "' (expected prefix, regex, table, drop, add_prefix or strip_prefix)");
    }
  }
  return transforms;
}

py::dict report_out(const RestoreReport& report) {
  py::dict out;
  out["restored"] = report.restored;
  out["missing"] = report.missing;
  out["unexpected"] = report.unexpected;
  out["shape_mismatched"] = report.shape_mismatched;
  out["dtype_mismatched"] = report.dtype_mismatched;
  out["defaulted"] = report.defaulted;
  out["cast"] = report.cast;
  out["details"] = report.details;
  out["summary"] = report.summary();
  return out;
}

std::vector<std::pair<DType, DType>> casts_in(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<std::pair<DType, DType>> casts;
  for (const auto& [from, to] : pairs) {
    const auto a = dtype_from_name(from), b = dtype_from_name(to);
    if (!a || !b) throw py::value_error("unknown dtype in cast pair ('" + from + "', '" + to + "')");
    casts.emplace_back(*a, *b);
  }
  return casts;
}

// A path (loaded lazily) or a nest.
Tree source_in(py::handle source) {
  if (py::isinstance<py::str>(source)) {
    const std::string path = source.cast<std::string>();
    py::gil_scoped_release release;
    return ckpt::load(path);
  }
  return value_in(source, "", 0);
}

}  // namespace

void bind_restore(py::module_& m) {
  // A strict restore's MismatchError carries the report as a dict.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const MismatchError& e) {
      py::object type = py::module_::import("ckpt._errors").attr("MismatchError");
      py::object instance = type(e.what());
      instance.attr("reason") = e.message();
      instance.attr("report") = report_out(e.report());
      PyErr_SetObject(type.ptr(), instance.ptr());
    }
  });

  m.def(
      "restore",
      [](py::object target, py::object source, bool strict, bool cast,
         const std::vector<std::pair<std::string, std::string>>& casts, const std::vector<std::string>& defaults,
         const std::string& prefix, const std::vector<std::string>& only, py::object rename,
         const std::string& framework) {
        const Framework fw = framework_from(framework);
        RestoreOptions options{.strict = strict,
                               .dtype = cast ? DTypePolicy::kCast : DTypePolicy::kError,
                               .casts = casts_in(casts),
                               .prefix = prefix,
                               .only = only,
                               .rename = transforms_in(rename)};
        for (const std::string& pattern : defaults) options.defaults.emplace_back(pattern, FieldDefault::keep());
        const Tree source_tree = source_in(source);
        if (target.is_none()) {
          RestoreReport report = ckpt::restore(source_tree, options);
          py::dict out = report_out(report);
          out["tree"] = value_out(report.tree, fw);
          return out;
        }
        const Tree target_tree = value_in(target, "", 0);
        RestoreReport report;
        {
          py::gil_scoped_release release;
          report = ckpt::restore(target_tree, source_tree, options);
        }
        py::dict out = report_out(report);
        // Only the leaves that changed come back; the package puts them into
        // the target's own structure.
        // One conversion for all of them, so that tied leaves come out as one object.
        Tree changed = Tree::list();
        std::vector<const std::string*> names;
        for (const std::string& name : report.restored) {
          if (const Tree* leaf = report.tree.find_path(name)) {
            changed.push_back(*leaf);
            names.push_back(&name);
          }
        }
        const py::list converted = value_out(changed, fw);
        py::dict values;
        for (size_t i = 0; i < names.size(); ++i) values[py::str(*names[i])] = converted[i];
        out["values"] = values;
        return out;
      },
      py::arg("target"), py::arg("source"), py::arg("strict") = true, py::arg("cast") = false,
      py::arg("casts") = std::vector<std::pair<std::string, std::string>>{},
      py::arg("defaults") = std::vector<std::string>{}, py::arg("prefix") = "",
      py::arg("only") = std::vector<std::string>{}, py::arg("rename") = py::none(),
      py::arg("framework") = "numpy");

  m.def(
      "load_renamed",
      [](const std::string& path, py::object rename, const std::string& framework, bool lazy, bool verify,
         unsigned threads) {
        const Framework fw = framework_from(framework);
        const Transforms transforms = transforms_in(rename);
        Tree tree;
        {
          py::gil_scoped_release release;
          tree = transforms.apply(ckpt::load(path, {.verify = verify, .lazy = lazy, .threads = threads}));
        }
        return value_out(tree, fw);
      },
      py::arg("path"), py::arg("rename"), py::kw_only(), py::arg("framework") = "numpy", py::arg("lazy") = true,
      py::arg("verify") = false, py::arg("threads") = 0);

  // ckpt::convert (convert.h), as `ckpt convert` runs it; returns the
  // format id written.
  m.def(
      "convert",
      [](const std::string& src, const std::string& dst, const std::string& to, bool extras, py::object rename,
         bool drop_unsupported) {
        ConvertOptions options{.save = {.format = to, .extras = extras},
                               .rename = transforms_in(rename),
                               .drop_unsupported = drop_unsupported};
        py::gil_scoped_release release;
        return ckpt::convert(src, dst, options).target_format;
      },
      py::arg("src"), py::arg("dst"), py::kw_only(), py::arg("to") = "", py::arg("extras") = true,
      py::arg("rename") = py::none(), py::arg("drop_unsupported") = false);
}

}  // namespace ckpt::python
