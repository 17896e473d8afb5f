// _ckpt.split_by_module, _ckpt.merge_module_files and _ckpt.apply_preloads
// (modules_bindings.h). Nests come in through value_in (tensors lent, not
// copied) and go out through value_out in the caller's framework; a preload
// spec comes as a dict of the C++ PreloadSpec's fields (python/ckpt/_modules.py
// makes it from RETURNN's keywords).

#include "modules_bindings.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

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

ModuleFileOptions module_options_in(const std::map<std::string, std::string>& files,
                                    const std::vector<std::string>& init_only, const std::string& main_file) {
  return {.files = files, .init_only = init_only, .main_file = main_file};
}

py::dict files_report_out(const ModuleFilesReport& report) {
  py::dict out;
  out["in_two_files"] = report.in_two_files;
  out["wrong_file"] = report.wrong_file;
  out["missing_files"] = report.missing_files;
  out["details"] = report.details;
  out["ok"] = report.ok();
  out["summary"] = report.summary();
  return out;
}

PreloadWhen when_in(const std::string& when) {
  if (when == "not_training") return PreloadWhen::kNotInTraining;
  if (when == "fresh") return PreloadWhen::kFreshTraining;
  if (when == "always") return PreloadWhen::kAlways;
  throw Error(ErrorCode::kInvalidArgument, "preload when '" + when + "': expected not_training, fresh or always");
}

const char* when_out(PreloadWhen when) {
  switch (when) {
    case PreloadWhen::kNotInTraining: return "not_training";
    case PreloadWhen::kFreshTraining: return "fresh";
    case PreloadWhen::kAlways: return "always";
  }
  return "fresh";
}

TrainingStage stage_in(const std::string& stage) {
  if (stage == "fresh") return TrainingStage::kFreshTraining;
  if (stage == "continued") return TrainingStage::kContinuedTraining;
  if (stage == "not_training") return TrainingStage::kNotTraining;
  throw Error(ErrorCode::kInvalidArgument, "stage '" + stage + "': expected fresh, continued or not_training");
}

PreloadSpec spec_in(const py::dict& spec) {
  PreloadSpec out;
  out.name = spec["name"].cast<std::string>();
  out.source = spec["source"].cast<std::filesystem::path>();
  out.prefix = spec["prefix"].cast<std::map<std::string, std::string>>();
  out.var_name_mapping = spec["var_name_mapping"].cast<std::map<std::string, std::string>>();
  out.ignore_missing = spec["ignore_missing"].cast<bool>();
  out.ignore_params = spec["ignore_params"].cast<std::vector<std::string>>();
  out.ignore_params_prefixes = spec["ignore_params_prefixes"].cast<std::vector<std::string>>();
  out.checkpoint_key = spec["checkpoint_key"].cast<std::optional<std::string>>();
  out.when = when_in(spec["when"].cast<std::string>());
  out.overrides = spec["overrides"].cast<bool>();
  return out;
}

py::dict result_out(const PreloadResult& result) {
  py::dict out;
  out["name"] = result.name;
  out["when"] = when_out(result.when);
  out["applied"] = result.applied;
  out["source"] = result.applied ? py::object(py::str(result.source.string())) : py::object(py::none());
  out["set"] = result.set;
  out["missing"] = result.missing;
  out["unexpected"] = result.unexpected;
  out["ignored"] = result.ignored;
  out["overridden"] = result.overridden;
  return out;
}

}  // namespace

void bind_modules(py::module_& m) {
  m.def(
      "split_by_module",
      [](py::object state, const std::map<std::string, std::string>& files, const std::vector<std::string>& init_only,
         const std::string& main_file, const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        const std::vector<ModuleFile> parts = split_by_module(tree, module_options_in(files, init_only, main_file));
        py::list out;
        for (const ModuleFile& part : parts) out.append(py::make_tuple(part.file, part.modules, value_out(part.state, fw)));
        return out;
      },
      py::arg("state"), py::arg("files"), py::arg("init_only"), py::arg("main_file"), py::arg("framework"));

  m.def(
      "merge_module_files",
      [](const std::vector<std::pair<std::string, py::object>>& parts, const std::map<std::string, std::string>& files,
         const std::vector<std::string>& init_only, const std::string& main_file, py::object order_like,
         const std::string& framework) {
        const Framework fw = framework_from(framework);
        std::vector<ModuleFile> in;
        for (const auto& [file, state] : parts) in.push_back({.file = file, .state = value_in(state, file, 0)});
        const std::optional<Tree> order = order_like.is_none() ? std::nullopt : std::optional<Tree>(value_in(order_like));
        const ModuleFilesReport report =
            merge_module_files(in, module_options_in(files, init_only, main_file),
                               {.order_like = order ? &*order : nullptr});
        py::dict out = files_report_out(report);
        out["state"] = value_out(report.state, fw);
        return out;
      },
      py::arg("parts"), py::arg("files"), py::arg("init_only"), py::arg("main_file"), py::arg("order_like"),
      py::arg("framework"));

  m.def(
      "apply_preloads",
      [](py::object state, const std::vector<py::dict>& specs, const std::string& stage, const std::string& framework) {
        const Framework fw = framework_from(framework);
        const Tree tree = value_in(state, "", 0);
        std::vector<PreloadSpec> in;
        for (const py::dict& spec : specs) in.push_back(spec_in(spec));
        const PreloadOptions options{.stage = stage_in(stage)};
        PreloadReport report;
        {
          py::gil_scoped_release release;
          report = apply_preloads(tree, in, options);
        }
        py::dict out;
        out["state"] = value_out(report.state, fw);
        py::list results;
        for (const PreloadResult& result : report.preloads) results.append(result_out(result));
        out["preloads"] = results;
        out["init_only"] = report.init_only();
        return out;
      },
      py::arg("state"), py::arg("specs"), py::arg("stage"), py::arg("framework"));
}

}  // namespace ckpt::python
