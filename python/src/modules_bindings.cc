// _ckpt's module-file and preload functions (modules_bindings.h). States
// cross the boundary as every tree does (values.h): tensors lent in, and out
// as numpy arrays or torch tensors by `framework`.

#include "modules_bindings.h"

#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/error.h"
#include "ckpt/modules.h"
#include "ckpt/preload.h"
#include "values.h"

namespace ckpt::python {
namespace {

ModuleFileOptions module_file_options(std::map<std::string, std::string> files, std::vector<std::string> init_only,
                                      std::string main_file) {
  return {.files = std::move(files), .init_only = std::move(init_only), .main_file = std::move(main_file)};
}

// The package's "fresh" | "continue" | "not_training".
TrainingStage stage_from(const std::string& name) {
  if (name == "fresh") return TrainingStage::kFreshTraining;
  if (name == "continue") return TrainingStage::kContinuedTraining;
  if (name == "not_training") return TrainingStage::kNotTraining;
  throw Error(ErrorCode::kInvalidArgument,
              "stage must be \"fresh\", \"continue\" or \"not_training\", not \"" + name + "\"");
}

// The package's "train_fresh" (init_for_train=True) | "not_in_training"
// (False) | "always".
PreloadWhen when_from(const std::string& name) {
  if (name == "train_fresh") return PreloadWhen::kFreshTraining;
  if (name == "not_in_training") return PreloadWhen::kNotInTraining;
  if (name == "always") return PreloadWhen::kAlways;
  throw Error(ErrorCode::kInvalidArgument, "unknown preload time \"" + name + "\"");
}

py::object when_out(PreloadWhen when) {
  switch (when) {
    case PreloadWhen::kFreshTraining: return py::bool_(true);
    case PreloadWhen::kNotInTraining: return py::bool_(false);
    case PreloadWhen::kAlways: break;
  }
  return py::str("always");
}

// One Preload as the package hands it over: a dict of PreloadSpec's fields.
PreloadSpec spec_in(const py::dict& item) {
  PreloadSpec spec;
  spec.name = item["name"].cast<std::string>();
  spec.source = item["source"].cast<std::string>();
  spec.prefix = item["prefix"].cast<std::map<std::string, std::string>>();
  spec.var_name_mapping = item["var_name_mapping"].cast<std::map<std::string, std::string>>();
  spec.ignore_missing = item["ignore_missing"].cast<bool>();
  spec.ignore_params = item["ignore_params"].cast<std::vector<std::string>>();
  spec.ignore_params_prefixes = item["ignore_params_prefixes"].cast<std::vector<std::string>>();
  spec.checkpoint_key = item["checkpoint_key"].cast<std::optional<std::string>>();
  spec.when = when_from(item["when"].cast<std::string>());
  spec.overrides = item["overrides"].cast<bool>();
  return spec;
}

py::dict result_out(const PreloadResult& result) {
  py::dict out;
  out["name"] = result.name;
  out["init_for_train"] = when_out(result.when);
  out["applied"] = result.applied;
  out["source"] = result.applied ? py::object(py::str(result.source.string())) : py::object(py::none());
  py::list set;
  for (const auto& [target, source] : result.set) set.append(py::make_tuple(target, source));
  out["set"] = set;
  out["missing"] = result.missing;
  out["unexpected"] = result.unexpected;
  out["ignored"] = result.ignored;
  out["overridden"] = result.overridden;
  return out;
}

}  // namespace

void bind_modules(py::module_& m) {
  m.def(
      "module_file_of",
      [](const std::string& name, std::map<std::string, std::string> files, std::vector<std::string> init_only,
         std::string main_file) {
        return module_file_of(name, module_file_options(std::move(files), std::move(init_only), std::move(main_file)));
      },
      py::arg("name"), py::arg("files"), py::arg("init_only"), py::arg("main_file"));

  // [(file, state, modules)], the main file first.
  m.def(
      "split_by_module",
      [](py::handle state, std::map<std::string, std::string> files, std::vector<std::string> init_only,
         std::string main_file, const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        py::list out;
        for (const ModuleFile& file : split_by_module(
                 tree, module_file_options(std::move(files), std::move(init_only), std::move(main_file)))) {
          out.append(py::make_tuple(file.file, value_out(file.state, fw), file.modules));
        }
        return out;
      },
      py::arg("state"), py::arg("files"), py::arg("init_only"), py::arg("main_file"), py::arg("framework"));

  // (state, in_two_files, wrong_file, missing_files, details, summary)
  m.def(
      "merge_module_files",
      [](const std::vector<std::pair<std::string, py::object>>& parts, std::map<std::string, std::string> files,
         std::vector<std::string> init_only, std::string main_file, py::object order_like,
         const std::string& framework) {
        const Framework fw = framework_from(framework);
        std::vector<ModuleFile> in;
        for (const auto& [file, state] : parts) in.push_back({.file = file, .state = value_in(state, file, 0), .modules = {}});
        std::optional<Tree> order;
        if (!order_like.is_none()) order = value_in(order_like, "", 0);
        const ModuleFilesReport report =
            merge_module_files(in, module_file_options(std::move(files), std::move(init_only), std::move(main_file)),
                               {.order_like = order ? &*order : nullptr});
        return py::make_tuple(value_out(report.state, fw), report.in_two_files, report.wrong_file,
                              report.missing_files, report.details, report.summary());
      },
      py::arg("parts"), py::arg("files"), py::arg("init_only"), py::arg("main_file"), py::arg("order_like"),
      py::arg("framework"));

  // (state, [result dicts], init_only names)
  m.def(
      "apply_preloads",
      [](py::handle state, const std::vector<py::dict>& preloads, const std::string& stage,
         const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        std::vector<PreloadSpec> specs;
        for (const py::dict& item : preloads) specs.push_back(spec_in(item));
        const PreloadOptions options{.stage = stage_from(stage), .read_source = {}};
        PreloadReport report;
        {
          py::gil_scoped_release unlocked;  // sources are read here
          report = apply_preloads(tree, specs, options);
        }
        py::list results;
        for (const PreloadResult& result : report.preloads) results.append(result_out(result));
        return py::make_tuple(value_out(report.state, fw), results, report.init_only());
      },
      py::arg("state"), py::arg("preloads"), py::arg("stage"), py::arg("framework"));
}

}  // namespace ckpt::python
