// _ckpt.restore, the renaming load and convert: restore.h and
// transform.h for the Python package. The structure of Python targets
// (dataclasses, NamedTuples, modules) is handled in python/ckpt/_restore.py;
// this side sees plain nests of dicts, lists and leaves, and passes declared
// defaults (values and callables) to ckpt::restore, which resolves them.

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

// A declared default's Python side: the value as the caller gave it, or the
// callable, and once needed the value (or what the callable returned). The
// restored tree holds it as a tree; where a filled part is that value
// whole, the caller gets the object itself back (a dataclass stays a
// dataclass, a jax array a jax array).
struct GivenDefault {
  py::object payload;  // a value, or a zero-argument callable
  bool factory = false;
  py::object made;     // the value, once a leaf needed it
};

// A name or glob (str), or a key path (a tuple or list of str and int keys).
FieldSelector selector_in(py::handle selector) {
  if (py::isinstance<py::str>(selector)) return selector.cast<std::string>();
  if (!py::isinstance<py::tuple>(selector) && !py::isinstance<py::list>(selector)) {
    throw py::type_error("a default is declared for a name, a glob or a key path, not " +
                         py::repr(selector).cast<std::string>());
  }
  KeyPath path;
  for (py::handle key : selector) {
    if (py::isinstance<py::str>(key)) {
      path.emplace_back(key.cast<std::string>());
    } else if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) {
      path.emplace_back(key.cast<int64_t>());
    } else {
      throw py::type_error("a key path holds str and int keys, not " + py::repr(key).cast<std::string>());
    }
  }
  return path;
}

// Each (selector, kind, payload): kind "keep", "value" (payload: the value)
// or "factory" (payload: a zero-argument callable). A value or the
// callable's result is taken when a leaf first needs it (the callable
// called with the GIL, at most once), turned into a nest by `nest` (a
// Python callable; None: as it is) and into a tree by value_in. `given`
// (sized here, never resized after) holds the Python side.
std::vector<std::pair<FieldSelector, FieldDefault>> defaults_in(py::handle declared, const py::object& nest,
                                                                 std::vector<GivenDefault>& given) {
  const py::list items = py::list(py::reinterpret_borrow<py::object>(declared));
  given.assign(items.size(), {});
  std::vector<std::pair<FieldSelector, FieldDefault>> defaults;
  defaults.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const py::tuple item = items[i].cast<py::tuple>();
    if (item.size() != 3) throw py::value_error("a default is (selector, kind, payload)");
    FieldSelector selector = selector_in(item[0]);
    const std::string kind = item[1].cast<std::string>();
    if (kind == "keep") {
      defaults.emplace_back(std::move(selector), FieldDefault::keep());
      continue;
    }
    if (kind != "value" && kind != "factory") {
      throw py::value_error("unknown default kind '" + kind + "' (expected keep, value or factory)");
    }
    GivenDefault& slot = given[i];
    slot.payload = py::reinterpret_borrow<py::object>(item[2]);
    slot.factory = kind == "factory";
    // Captures pointers only: copying the function needs no GIL.
    defaults.emplace_back(std::move(selector), FieldDefault::factory([slot = &slot, nest = &nest] {
                            py::gil_scoped_acquire gil;
                            slot->made = slot->factory ? slot->payload() : slot->payload;
                            return value_in(nest->is_none() ? slot->made : (*nest)(slot->made), "", 0);
                          }));
  }
  return defaults;
}

py::tuple path_out(const KeyPath& path) {
  py::tuple out(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (const auto* text = std::get_if<std::string>(&path[i])) {
      out[i] = py::str(*text);
    } else {
      out[i] = py::int_(std::get<int64_t>(path[i]));
    }
  }
  return out;
}

// report.filled as [(key path, value, given)]: `given` where the value is a
// default exactly as the caller wrote it (or its factory made it), the
// tree's value otherwise (converted at once, so that tied leaves come out as
// one object).
py::list filled_out(const RestoreReport& report, const std::vector<GivenDefault>& given, Framework framework) {
  Tree values = Tree::list();
  std::vector<size_t> from_tree;
  py::list out(report.filled.size());
  for (size_t i = 0; i < report.filled.size(); ++i) {
    const FilledPart& part = report.filled[i];
    const GivenDefault* own = part.whole_default && part.default_index < given.size() ? &given[part.default_index]
                                                                                     : nullptr;
    if (own != nullptr && own->made) {
      out[i] = py::make_tuple(path_out(part.path), own->made, true);
      continue;
    }
    const Tree* node = report.tree.find_key_path(part.path);
    values.push_back(node != nullptr ? *node : Tree());
    from_tree.push_back(i);
  }
  const py::list converted = value_out(values, framework);
  for (size_t k = 0; k < from_tree.size(); ++k) {
    out[from_tree[k]] = py::make_tuple(path_out(report.filled[from_tree[k]].path), converted[k], false);
  }
  return out;
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
         const std::vector<std::pair<std::string, std::string>>& casts, py::object defaults,
         const std::string& prefix, const std::vector<std::string>& only, py::object rename,
         const std::string& framework, py::object nest) {
        const Framework fw = framework_from(framework);
        std::vector<GivenDefault> given;
        RestoreOptions options{.strict = strict,
                               .dtype = cast ? DTypePolicy::kCast : DTypePolicy::kError,
                               .casts = casts_in(casts),
                               .defaults = defaults_in(defaults, nest, given),
                               .prefix = prefix,
                               .only = only,
                               .rename = transforms_in(rename)};
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
        // Only the parts that were filled come back, by key path; the
        // package puts them into the target's own structure.
        out["filled"] = filled_out(report, given, fw);
        return out;
      },
      py::arg("target"), py::arg("source"), py::arg("strict") = true, py::arg("cast") = false,
      py::arg("casts") = std::vector<std::pair<std::string, std::string>>{}, py::arg("defaults") = py::list(),
      py::arg("prefix") = "", py::arg("only") = std::vector<std::string>{}, py::arg("rename") = py::none(),
      py::arg("framework") = "numpy", py::arg("nest") = py::none());

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
