// ckpt example PATH [--format F] [--step N] [--float32]: writes a small but realistic
// training state, as a sample to try the other subcommands on (and the
// state `make demo` works with).
//
// The state is what a PyTorch training loop saves for a 2-layer MLP
// (8 → 16 → 4) trained with Adam:
//   model.*          the flat state dict: float32 and bfloat16 weights,
//                    int64 position ids, a 0-d int64 counter
//   optimizer.state  integer keys 0..3 (parameter indices), each with a 0-d
//                    float32 step and the two Adam moments
//   optimizer.param_groups  a list of one map (lr, betas list, flags, params)
//   scheduler, epoch, step, run_name, best_dev_loss, rng_state (bytes)
// Values are deterministic functions of --step, so two steps give two
// checkpoints with the same names and slightly different values.
//
// The state adapts to what the target format can hold: bfloat16 becomes
// float32 (exactly) where the format lacks bfloat16 or with --float32, and
// a tensors-only format (npz) gets the tensors alone, under their dotted
// names. The summary line says so.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct ExampleArguments {
  std::string path;
  std::string format;
  int64_t step = 1000;
  bool float32 = false;
};

// Rounds to the nearest bfloat16, ties to even (the values here are finite).
uint16_t to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Deterministic "trained" values: a smooth pattern per tensor (`seed`) that
// drifts a little with the training step.
std::vector<float> pattern(uint64_t count, double seed, double scale, int64_t step) {
  std::vector<float> values(count);
  const double drift = 1.0 + 1e-4 * static_cast<double>(step);
  for (uint64_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>(scale * drift * std::sin(0.37 * static_cast<double>(i) + seed));
  }
  return values;
}

// `dtype` is float32 or bfloat16.
Tensor float_tensor(DType dtype, Shape shape, double seed, double scale, int64_t step) {
  const std::vector<float> values = pattern(checked_numel(shape), seed, scale, step);
  if (dtype == DType::kBFloat16) {
    std::vector<uint16_t> halves(values.size());
    for (size_t i = 0; i < values.size(); ++i) halves[i] = to_bfloat16(values[i]);
    return Tensor::from_values<uint16_t>(dtype, std::move(shape), halves);
  }
  return Tensor::from_values<float>(DType::kFloat32, std::move(shape), values);
}

template <class T>
Tensor scalar_tensor(DType dtype, T value) {
  return Tensor::from_values<T>(dtype, {}, std::span<const T>(&value, 1));
}

struct Parameter {
  std::string name;
  DType dtype;
  Shape shape;
  double scale;
};

// `half` is the dtype of the head layer: bfloat16, or float32 for formats
// without it.
Tree make_training_state(int64_t step, DType half) {
  const std::vector<Parameter> parameters = {
      {"encoder.weight", DType::kFloat32, {16, 8}, 0.35},
      {"encoder.bias", DType::kFloat32, {16}, 0.05},
      {"head.weight", half, {4, 16}, 0.25},
      {"head.bias", half, {4}, 0.02},
  };

  Tree model = Tree::map();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Parameter& p = parameters[i];
    model.set(p.name, float_tensor(p.dtype, p.shape, static_cast<double>(i), p.scale, step));
  }
  const std::vector<int64_t> positions = {0, 1, 2, 3, 4, 5, 6, 7};
  model.set("position_ids", Tensor::from_values<int64_t>(DType::kInt64, {1, 8}, positions));
  model.set("norm.num_batches_tracked", scalar_tensor<int64_t>(DType::kInt64, step));

  // torch.optim.Adam's state_dict(): per-parameter state under integer keys.
  Tree optimizer_state = Tree::map();
  Tree parameter_indices = Tree::list();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Parameter& p = parameters[i];
    Tree slot = Tree::map();
    slot.set("step", scalar_tensor<float>(DType::kFloat32, static_cast<float>(step)));
    slot.set("exp_avg", float_tensor(p.dtype, p.shape, 10.0 + i, 1e-3, step));
    slot.set("exp_avg_sq", float_tensor(p.dtype, p.shape, 20.0 + i, 1e-6, step));
    optimizer_state.set(static_cast<int64_t>(i), std::move(slot));
    parameter_indices.push_back(static_cast<int64_t>(i));
  }
  Tree betas = Tree::list();
  betas.push_back(0.9);
  betas.push_back(0.999);
  Tree group = Tree::map();
  group.set("lr", 1e-3);
  group.set("betas", std::move(betas));
  group.set("eps", 1e-8);
  group.set("weight_decay", 0.0);
  group.set("amsgrad", false);
  group.set("params", std::move(parameter_indices));
  Tree param_groups = Tree::list();
  param_groups.push_back(std::move(group));
  Tree optimizer = Tree::map();
  optimizer.set("state", std::move(optimizer_state));
  optimizer.set("param_groups", std::move(param_groups));

  const int64_t epoch = step / 250;
  Tree scheduler = Tree::map();
  scheduler.set("last_epoch", epoch);
  scheduler.set("warmup_until", Tree(nullptr));

  std::string rng_state(16, '\0');
  for (size_t i = 0; i < rng_state.size(); ++i) {
    rng_state[i] = static_cast<char>((step * 31 + static_cast<int64_t>(i) * 97) & 0xff);
  }

  Tree state = Tree::map();
  state.set("model", std::move(model));
  state.set("optimizer", std::move(optimizer));
  state.set("scheduler", std::move(scheduler));
  state.set("epoch", epoch);
  state.set("step", step);
  state.set("run_name", "mlp-demo");
  state.set("best_dev_loss", 2.5 / (1.0 + 1e-3 * static_cast<double>(step)));
  state.set("rng_state", Bytes{std::move(rng_state)});
  return state;
}

bool holds_dtype(const Format& format, DType dtype) {
  const std::vector<DType> dtypes = format.dtypes();
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

int run_example(const ExampleArguments& arguments) {
  if (arguments.step < 0) {
    throw Error(ErrorCode::kInvalidArgument, "--step must be >= 0");
  }
  // The format save() will pick: --format, else PATH's extension, else safetensors.
  const Format& format = naming_file(
      arguments.path, [&]() -> const Format& { return save_format(arguments.path, {.format = arguments.format}); });
  const bool float32 = arguments.float32 || !holds_dtype(format, DType::kBFloat16);
  Tree state = make_training_state(arguments.step, float32 ? DType::kFloat32 : DType::kBFloat16);
  const bool tensors_only = !format.capabilities().nested_tree;
  if (tensors_only) {
    Tree flat = Tree::map();
    for (const Tree::Leaf& leaf : state.tensor_leaves()) flat.set(leaf.name, *leaf.value);
    state = std::move(flat);
  }
  SaveOptions options;
  options.format = std::string(format.id());
  save(arguments.path, state, options);

  uint64_t tensors = 0, bytes = 0, values = 0;
  for (const Tree::Leaf& leaf : state.leaves()) {
    if (leaf.value->is_tensor()) {
      ++tensors;
      bytes += leaf.value->tensor().nbytes();
    } else {
      ++values;
    }
  }
  std::cout << "wrote " << arguments.path << " (" << format.id() << "): a training state at step "
            << arguments.step << ", " << count_text(tensors, "tensor") << " (" << size_text(bytes)
            << "), " << count_text(values, "value");
  if (float32 && !arguments.float32) std::cout << "; bfloat16 stored as float32";
  if (tensors_only) std::cout << "; tensors only";
  std::cout << '\n';
  return kExitOk;
}

}  // namespace

Command add_example_command(CLI::App& app) {
  auto arguments = std::make_shared<ExampleArguments>();
  CLI::App* command = app.add_subcommand(
      "example", "Write a small sample training state (2-layer MLP + Adam) to PATH");
  command->add_option("path", arguments->path, "The file to write")->required();
  command->add_option("--format", arguments->format,
                      "Format id (see 'ckpt formats'); default: from PATH's extension, "
                      "else safetensors");
  command->add_option("--step", arguments->step,
                      "Training step the state is made for (values drift with it; default 1000)");
  command->add_flag("--float32", arguments->float32,
                    "Store the bfloat16 tensors as float32 (for formats without bfloat16)");
  return {command, [arguments] { return run_example(*arguments); },
          "ckpt example PATH [--format F] [--step N] [--float32]"};
}

}  // namespace ckpt::tool
