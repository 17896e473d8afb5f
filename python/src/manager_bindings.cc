// _ckpt.Manager and the run-directory functions (manager_bindings.h).
//
// Threads: the manager calls back into Python from its background thread
// (a keep= function during retention; the release of a lent array or tensor
// after a blocking save's write). Both acquire the GIL there, so every
// binding that may wait for that thread (save, list, latest, best, load,
// wait, close, the destructor) releases the GIL while it waits.

#include "manager_bindings.h"

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/average.h"
#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/manager.h"
#include "ckpt/retention.h"
#include "ckpt/run_directory.h"
#include "distributed_bindings.h"
#include "values.h"

namespace ckpt::python {
namespace {

std::string entry_repr(const CheckpointEntry& entry) {
  std::string text = "<ckpt.CheckpointEntry";
  if (entry.step) text += " step=" + std::to_string(*entry.step);
  if (entry.epoch) text += " epoch=" + std::to_string(*entry.epoch);
  text += " path=" + py::repr(py::str(entry.path.string())).cast<std::string>();
  if (!entry.kept_by.empty()) {
    text += " kept_by=[";
    for (size_t i = 0; i < entry.kept_by.size(); ++i) text += (i ? ", " : "") + entry.kept_by[i];
    text += "]";
  }
  return text + ">";
}

// A Python callable as the manager's KeepFunction. The callable is held by a
// shared pointer whose deleter takes the GIL (the last copy of the function
// may go on the background thread, or in a binding that released the GIL).
// An exception the callable raises becomes Error{kInvalidArgument} naming it,
// which the manager reports as a failed cleanup (raised by the next save,
// wait or close): a Python exception object cannot safely leave its thread.
KeepFunction keep_function(py::object function) {
  std::shared_ptr<py::object> held(new py::object(std::move(function)), [](py::object* object) {
    py::gil_scoped_acquire gil;
    delete object;
  });
  return [held](const std::vector<CheckpointEntry>& checkpoints) {
    py::gil_scoped_acquire gil;
    try {
      const py::object result = (*held)(py::cast(checkpoints));
      std::vector<int64_t> steps;
      for (py::handle step : py::iter(result)) steps.push_back(step.cast<int64_t>());
      return steps;
    } catch (py::error_already_set& error) {
      // The exception's type and text, without the traceback what() appends.
      const std::string type = py::str(error.type().attr("__name__"));
      const std::string text = py::str(error.value());
      throw Error(ErrorCode::kInvalidArgument,
                  "the keep= function raised " + type + (text.empty() ? std::string() : ": " + text));
    } catch (const py::cast_error&) {
      throw Error(ErrorCode::kInvalidArgument, "the keep= function must return an iterable of int steps");
    }
  };
}

// One element of policy=[...]: a policy object, or a callable (CustomPolicy).
RetentionPolicy policy_in(py::handle item) {
  if (py::isinstance<KeepLast>(item)) return item.cast<KeepLast>();
  if (py::isinstance<KeepBest>(item)) return item.cast<KeepBest>();
  if (py::isinstance<KeepEverySteps>(item)) return item.cast<KeepEverySteps>();
  if (py::isinstance<KeepEverySeconds>(item)) return item.cast<KeepEverySeconds>();
  if (py::isinstance<KeepSteps>(item)) return item.cast<KeepSteps>();
  if (py::isinstance<ReturnnPolicy>(item)) return item.cast<ReturnnPolicy>();
  if (py::isinstance<CustomPolicy>(item)) return item.cast<CustomPolicy>();
  if (PyCallable_Check(item.ptr())) {
    return CustomPolicy{.keep = keep_function(py::reinterpret_borrow<py::object>(item)), .last_kept = {}};
  }
  throw py::type_error("a policy must be ckpt.KeepLast, KeepBest, KeepEverySteps, KeepEverySeconds, KeepSteps, "
                       "ReturnnPolicy, CustomPolicy or a callable, not " +
                       py::repr(item).cast<std::string>());
}

std::vector<RetentionPolicy> policies_in(py::handle policies) {
  std::vector<RetentionPolicy> out;
  if (policies.is_none()) return out;
  for (py::handle item : py::iter(policies)) out.push_back(policy_in(item));
  return out;
}

// A ckpt::Manager whose destructor waits with the GIL released, and the
// communicator of a sharded run (ManagerOptions::comm), which outlives it
// and goes with the GIL held.
class ManagerHandle {
 public:
  explicit ManagerHandle(std::unique_ptr<PythonCommunicator> comm) : comm_(std::move(comm)) {}
  ManagerHandle(const ManagerHandle&) = delete;
  ManagerHandle& operator=(const ManagerHandle&) = delete;
  ~ManagerHandle() {
    {
      py::gil_scoped_release unlocked;
      manager_.reset();
    }
    comm_.reset();
  }
  void open(std::unique_ptr<Manager> manager) { manager_ = std::move(manager); }
  Communicator* comm() { return comm_.get(); }
  Manager& operator*() { return *manager_; }
  Manager* operator->() { return manager_.get(); }

 private:
  std::unique_ptr<PythonCommunicator> comm_;
  std::unique_ptr<Manager> manager_;
};

using ManagerShardsIn = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>;

template <class Policy>
Policy validated(Policy policy) {
  validate_policy(policy);
  return policy;
}

void bind_policies(py::module_& m) {
  py::class_<KeepLast>(m, "KeepLast",
      "The `n` newest checkpoints (by step, else epoch). kept_by: keep_last(n).")
      .def(py::init([](int64_t n) { return validated(KeepLast{.n = n}); }), py::arg("n"))
      .def_readonly("n", &KeepLast::n)
      .def("__repr__", [](const KeepLast& p) { return policy_name(p); });
  py::class_<KeepBest>(m, "KeepBest",
      "The `n` best checkpoints by `metric` (`mode` \"min\": lower is better, or \"max\"); ties go to the newer. A "
      "checkpoint without the metric (or NaN) is kept when `keep_missing`, else left to the other policies.")
      .def(py::init([](int64_t n, std::string metric, const std::string& mode, bool keep_missing) {
             return validated(KeepBest{.n = n,
                                       .metric = std::move(metric),
                                       .mode = metric_mode_from_name(mode),
                                       .keep_missing_metric = keep_missing});
           }),
           py::arg("n"), py::arg("metric"), py::arg("mode") = "min", py::arg("keep_missing") = true)
      .def_readonly("n", &KeepBest::n)
      .def_readonly("metric", &KeepBest::metric)
      .def_property_readonly("mode", [](const KeepBest& p) { return std::string(metric_mode_name(p.mode)); })
      .def_readonly("keep_missing", &KeepBest::keep_missing_metric)
      .def("__repr__", [](const KeepBest& p) { return policy_name(p); });
  py::class_<KeepEverySteps>(m, "KeepEverySteps",
      "Every checkpoint whose step is a multiple of `steps` (Orbax's EveryNSteps).")
      .def(py::init([](int64_t steps) { return validated(KeepEverySteps{.steps = steps}); }), py::arg("steps"))
      .def_readonly("steps", &KeepEverySteps::steps)
      .def("__repr__", [](const KeepEverySteps& p) { return policy_name(p); });
  py::class_<KeepEverySeconds>(m, "KeepEverySeconds",
      "One checkpoint per `seconds` of wall time: the oldest, then each at least `seconds` after the last one kept "
      "(TF's keep_checkpoint_every_n_hours).")
      .def(py::init([](double seconds) { return validated(KeepEverySeconds{.seconds = seconds}); }),
           py::arg("seconds"))
      .def_readonly("seconds", &KeepEverySeconds::seconds)
      .def("__repr__", [](const KeepEverySeconds& p) { return policy_name(p); });
  py::class_<KeepSteps>(m, "KeepSteps",
      "These steps, forever.")
      .def(py::init([](std::vector<int64_t> steps) { return validated(KeepSteps{.steps = std::move(steps)}); }),
           py::arg("steps"))
      .def_readonly("steps", &KeepSteps::steps)
      .def("__repr__", [](const KeepSteps& p) {
        return policy_name(p) + "(" + py::repr(py::cast(p.steps)).cast<std::string>() + ")";
      });
  const ReturnnPolicy returnn_defaults;
  py::class_<ReturnnPolicy>(m, "ReturnnPolicy",
      "RETURNN's cleanup_old_models over epochs and every metric (lower is better): the last `keep_last_n`, the "
      "`keep_best_n` best of each score, `keep` (else RETURNN's default pattern); `dry_run` keeps everything "
      "(docs/manager.md).")
      .def(py::init([](int64_t keep_last_n, int64_t keep_best_n, std::optional<std::vector<int64_t>> keep,
                       bool dry_run) {
             return validated(ReturnnPolicy{
                 .keep_last_n = keep_last_n, .keep_best_n = keep_best_n, .keep = std::move(keep), .dry_run = dry_run});
           }),
           py::arg("keep_last_n") = returnn_defaults.keep_last_n, py::arg("keep_best_n") = returnn_defaults.keep_best_n,
           py::arg("keep") = py::none(), py::arg("dry_run") = returnn_defaults.dry_run)
      .def_readonly("keep_last_n", &ReturnnPolicy::keep_last_n)
      .def_readonly("keep_best_n", &ReturnnPolicy::keep_best_n)
      .def_readonly("keep", &ReturnnPolicy::keep)
      .def_readonly("dry_run", &ReturnnPolicy::dry_run)
      .def("__repr__", [](const ReturnnPolicy& p) {
        return "ReturnnPolicy(keep_last_n=" + std::to_string(p.keep_last_n) +
               ", keep_best_n=" + std::to_string(p.keep_best_n) +
               ", keep=" + py::repr(py::cast(p.keep)).cast<std::string>() +
               ", dry_run=" + (p.dry_run ? "True" : "False") + ")";
      });
  py::class_<CustomPolicy>(m, "CustomPolicy",
      "A callable given the list of CheckpointEntry (oldest first, with metrics) returning the steps to keep; called "
      "from the manager's background thread.")
      .def(py::init([](py::function keep) {
             return CustomPolicy{.keep = keep_function(std::move(keep)), .last_kept = {}};
           }),
           py::arg("keep"))
      .def("__repr__", [](const CustomPolicy&) { return std::string("CustomPolicy(...)"); });
}

void bind_listing(py::module_& m) {
  py::class_<CheckpointEntry>(m, "CheckpointEntry",
      "One checkpoint of a run directory: step and epoch (None where the layout does not know them), metrics, path "
      "(what ckpt.load opens), files (what pruning removes), size (bytes of files), time (commit time, seconds since "
      "the epoch), kept_by (the policies that keep it).")
      .def_readonly("step", &CheckpointEntry::step)
      .def_readonly("epoch", &CheckpointEntry::epoch)
      .def_readonly("metrics", &CheckpointEntry::metrics)
      .def_property_readonly("path", [](const CheckpointEntry& e) { return e.path.string(); })
      .def_property_readonly("files",
                             [](const CheckpointEntry& e) {
                               std::vector<std::string> files;
                               for (const auto& file : e.files) files.push_back(file.string());
                               return files;
                             })
      .def_property_readonly("parts",
                             [](const CheckpointEntry& e) {
                               std::vector<std::string> parts;
                               for (const auto& part : e.parts) parts.push_back(part.string());
                               return parts;
                             })
      .def_readonly("size", &CheckpointEntry::size)
      .def_readonly("time", &CheckpointEntry::time)
      .def_readonly("kept_by", &CheckpointEntry::kept_by)
      .def("__repr__", &entry_repr);
  py::class_<RunListing>(m, "RunListing",
      "The checkpoints of one run directory: run_dir, layout (\"ckpt\", \"returnn\", \"tf\", \"flax\", "
      "\"lightning\", \"orbax\", \"empty\") and checkpoints (oldest first); document() is the dict `ckpt ls --json` "
      "prints.")
      .def_property_readonly("run_dir", [](const RunListing& l) { return l.run_dir.string(); })
      .def_readonly("layout", &RunListing::layout)
      .def_readonly("checkpoints", &RunListing::checkpoints)
      .def("document", [](const RunListing& l) { return value_out(listing_document(l), Framework::kNumpy); })
      .def("__len__", [](const RunListing& l) { return l.checkpoints.size(); })
      .def("__repr__", [](const RunListing& l) {
        return "<ckpt.RunListing " + py::repr(py::str(l.run_dir.string())).cast<std::string>() + " (" + l.layout +
               ", " + std::to_string(l.checkpoints.size()) + " checkpoints)>";
      });

  m.def(
      "list_run_directory",
      [](const std::filesystem::path& run_dir) {
        py::gil_scoped_release unlocked;
        return list_run_directory(run_dir);
      },
      py::arg("run_dir"));

  m.def(
      "prune_run_directory",
      [](const std::filesystem::path& run_dir, py::handle policies, bool dry_run, bool foreign) {
        PruneOptions options{.policies = policies_in(policies), .dry_run = dry_run, .foreign = foreign};
        PruneReport report;
        {
          py::gil_scoped_release unlocked;
          report = prune_run_directory(run_dir, options);
        }
        std::vector<std::string> removed;
        for (const auto& path : report.removed) removed.push_back(path.string());
        return std::make_pair(report.listing, removed);
      },
      py::arg("run_dir"), py::arg("policies") = py::none(), py::arg("dry_run") = false, py::arg("foreign") = false);

  m.def(
      "detect", [](const std::filesystem::path& path) { return std::string(detect(path).id()); }, py::arg("path"));

  // `ckpt average`: `sources` are checkpoints (oldest first), or one run
  // directory with last or best. Returns (format written, inputs as
  // (path, step, epoch) tuples).
  m.def(
      "average",
      [](const std::filesystem::path& out, const std::vector<std::filesystem::path>& sources, size_t last,
         size_t best, const std::string& metric, const std::string& mode, const std::string& to, unsigned threads) {
        py::gil_scoped_release unlocked;
        std::vector<AverageInput> inputs;
        if (last > 0 || best > 0) {
          if (sources.size() != 1) {
            throw Error(ErrorCode::kInvalidArgument,
                        "last= and best= take one run directory, not a list of checkpoints");
          }
          const RunListing listing = list_run_directory(sources.front());
          inputs = select_for_average(listing, {.last = last,
                                                .best = best,
                                                .metric = metric,
                                                .maximize = metric_mode_from_name(mode) == MetricMode::kMax});
        } else {
          if (!metric.empty()) throw Error(ErrorCode::kInvalidArgument, "metric= goes with best=");
          for (const auto& source : sources) inputs.push_back({.path = source});
        }
        const AverageResult result = average_checkpoints(inputs, {.threads = threads});
        SaveOptions save_options{.format = to};
        const Format& format = save_format(out, save_options);
        if (format.capabilities().metadata) save_options.metadata = result.metadata;
        save(out, result.tree, save_options);
        std::vector<std::tuple<std::string, std::optional<int64_t>, std::optional<int64_t>>> used;
        for (const AverageInput& input : inputs) used.emplace_back(input.path.string(), input.step, input.epoch);
        return std::make_pair(std::string(format.id()), used);
      },
      py::arg("out"), py::arg("sources"), py::kw_only(), py::arg("last") = 0, py::arg("best") = 0,
      py::arg("metric") = "", py::arg("mode") = "min", py::arg("to") = "", py::arg("threads") = 0);
}

void bind_manager_class(py::module_& m) {
  py::class_<ManagerHandle>(m, "Manager", "ckpt::Manager; use ckpt.Manager instead.")
      .def(py::init([](const std::filesystem::path& run_dir, std::optional<int64_t> keep_last,
                       std::optional<int64_t> keep_best, std::string metric, const std::string& mode,
                       bool keep_missing_metric, std::optional<int64_t> keep_every_steps,
                       std::optional<double> keep_every_seconds, std::vector<int64_t> keep_steps, py::object keep,
                       py::handle policy, std::string format, size_t max_in_flight, bool dedup, bool fsync,
                       bool read_only, std::string layout, py::object comm) {
             ManagerOptions options{.keep_last = keep_last,
                                    .keep_best = keep_best,
                                    .metric = std::move(metric),
                                    .mode = metric_mode_from_name(mode),
                                    .keep_missing_metric = keep_missing_metric,
                                    .keep_every_steps = keep_every_steps,
                                    .keep_every_seconds = keep_every_seconds,
                                    .keep_steps = std::move(keep_steps),
                                    .keep = {},
                                    .policy = policies_in(policy),
                                    .format = std::move(format),
                                    .max_in_flight = max_in_flight,
                                    .dedup = dedup,
                                    .fsync = fsync,
                                    .read_only = read_only,
                                    .layout = std::move(layout)};
             if (!keep.is_none()) {
               if (!PyCallable_Check(keep.ptr())) throw py::type_error("keep= must be a callable");
               options.keep = keep_function(keep);
             }
             auto handle = std::make_unique<ManagerHandle>(
                 comm.is_none() ? nullptr : std::make_unique<PythonCommunicator>(std::move(comm)));
             options.comm = handle->comm();
             {
               py::gil_scoped_release unlocked;  // the collectives of a sharded run's opening take it
               handle->open(std::make_unique<Manager>(run_dir, std::move(options)));
             }
             return handle.release();
           }),
           py::arg("run_dir"), py::kw_only(), py::arg("keep_last") = py::none(), py::arg("keep_best") = py::none(),
           py::arg("metric") = "", py::arg("mode") = "min", py::arg("keep_missing_metric") = true,
           py::arg("keep_every_steps") = py::none(), py::arg("keep_every_seconds") = py::none(),
           py::arg("keep_steps") = std::vector<int64_t>{}, py::arg("keep") = py::none(), py::arg("policy") = py::none(),
           py::arg("format") = "safetensors", py::arg("max_in_flight") = 1, py::arg("dedup") = true,
           py::arg("fsync") = true, py::arg("read_only") = false, py::arg("layout") = "ckpt",
           py::arg("comm") = py::none())
      .def_property_readonly("run_dir", [](ManagerHandle& h) { return h->run_dir().string(); })
      .def(
          "save",
          [](ManagerHandle& h, int64_t step, py::handle state, std::map<std::string, double> metrics,
             std::optional<int64_t> epoch, bool blocking, bool keep_forever, py::object parts, py::object shards) {
            const SaveStepOptions options{
                .metrics = std::move(metrics), .epoch = epoch, .blocking = blocking, .keep_forever = keep_forever};
            if (!shards.is_none()) {
              // A sharded save: this rank's state and its shards {name: (global_shape, offsets)}.
              std::map<std::string, ShardSpec> specs;
              for (const auto& [name, spec] : shards.cast<ManagerShardsIn>()) {
                specs[name] = ShardSpec{.global_shape = spec.first, .offsets = spec.second};
              }
              Tree tree = value_in(state, "", 0);
              {
                py::gil_scoped_release unlocked;
                h->save_sharded(step, tree, specs, options);
              }
              return;  // `tree` is released here, with the GIL held
            }
            if (!parts.is_none()) {
              // A state in parts: {part name: state}, in the dict's order.
              std::vector<StatePart> in;
              for (auto [name, part] : py::cast<py::dict>(parts)) {
                const std::string part_name = py::cast<std::string>(name);
                in.push_back({.name = part_name, .state = value_in(part, part_name, 0)});
              }
              py::gil_scoped_release unlocked;
              h->save(step, in, options);
              return;
            }
            Tree tree = value_in(state, "", 0);
            {
              py::gil_scoped_release unlocked;
              h->save(step, tree, options);
            }
            // `tree` (and the arrays it borrows) is released here, with the GIL held.
          },
          py::arg("step"), py::arg("state"), py::kw_only(), py::arg("metrics") = std::map<std::string, double>{},
          py::arg("epoch") = py::none(), py::arg("blocking") = true, py::arg("keep_forever") = false,
          py::arg("parts") = py::none(), py::arg("shards") = py::none())
      .def("list",
           [](ManagerHandle& h) {
             py::gil_scoped_release unlocked;
             return h->list();
           })
      .def("latest",
           [](ManagerHandle& h) {
             py::gil_scoped_release unlocked;
             return h->latest();
           })
      .def(
          "best",
          [](ManagerHandle& h, const std::string& metric, const std::string& mode) {
            const MetricMode metric_mode = metric_mode_from_name(mode);
            py::gil_scoped_release unlocked;
            return h->best(metric, metric_mode);
          },
          py::arg("metric"), py::arg("mode") = "min")
      .def(
          "load",
          [](ManagerHandle& h, int64_t step, const std::string& framework, bool lazy, bool verify, unsigned threads,
             const ManagerShardsIn& boxes) {
            const Framework fw = framework_from(framework);
            LoadOptions options{.verify = verify, .lazy = lazy, .threads = threads};
            for (const auto& [name, box] : boxes) options.boxes[name] = Box{.offsets = box.first, .sizes = box.second};
            Tree tree;
            {
              py::gil_scoped_release unlocked;
              tree = h->load(step, options);
            }
            return value_out(tree, fw);
          },
          py::arg("step"), py::kw_only(), py::arg("framework") = "numpy", py::arg("lazy") = true,
          py::arg("verify") = false, py::arg("threads") = 0, py::arg("boxes") = ManagerShardsIn{})
      .def(
          "load_latest",
          [](ManagerHandle& h, const std::string& framework, bool lazy, bool verify, unsigned threads) -> py::object {
            const Framework fw = framework_from(framework);
            std::optional<Tree> tree;
            {
              py::gil_scoped_release unlocked;
              tree = h->load_latest({.verify = verify, .lazy = lazy, .threads = threads});
            }
            if (!tree) return py::none();
            return value_out(*tree, fw);
          },
          py::kw_only(), py::arg("framework") = "numpy", py::arg("lazy") = true, py::arg("verify") = false,
          py::arg("threads") = 0)
      .def("wait",
           [](ManagerHandle& h) {
             py::gil_scoped_release unlocked;
             h->wait();
           })
      .def("close", [](ManagerHandle& h) {
        py::gil_scoped_release unlocked;
        h->close();
      });
}

}  // namespace

void bind_manager(py::module_& m) {
  bind_policies(m);
  bind_listing(m);
  bind_manager_class(m);
}

}  // namespace ckpt::python
