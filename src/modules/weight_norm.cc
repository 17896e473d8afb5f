// Weight norm's checkpoint converters (include/ckpt/weight_norm.h): the
// namings, finding the raw pairs, fold, unfold, renaming.

#include "ckpt/weight_norm.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "ckpt/error.h"
#include "modules/weight_norm_math.h"
#include "modules/weight_norm_tree.h"

namespace ckpt {
namespace {

// returnn_common's nn.utils.weight_norm: WeightNorm(..., eps=1e-6).
constexpr double kReturnnCommonEpsilon = 1e-6;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// The dotted name split at its last dot: ("enc.conv", "weight"); ("", "weight").
std::pair<std::string, std::string> split_last_part(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

struct RawNames {
  std::string g;
  std::string v;
};

RawNames raw_names_of(const std::string& plain, WeightNormNames names) {
  const auto [module, parameter] = split_last_part(plain);
  switch (names) {
    case WeightNormNames::kTorchOld: return {plain + "_g", plain + "_v"};
    case WeightNormNames::kTorchNew: {
      const std::string base = join_name(join_name(module, "parametrizations"), parameter);
      return {base + ".original0", base + ".original1"};
    }
    case WeightNormNames::kReturnnCommon: {
      const std::string base = join_name(module, parameter + "_normalized");
      return {base + ".g", base + ".v"};
    }
  }
  return {};
}

// If `name` is a g of naming `names`: the plain name (raw_names_of gives it back).
std::optional<std::string> plain_name_of_g(const std::string& name, WeightNormNames names) {
  switch (names) {
    case WeightNormNames::kTorchOld: {
      if (!ends_with(name, "_g")) return std::nullopt;
      const std::string plain = name.substr(0, name.size() - 2);
      if (plain.empty() || plain.back() == '.') return std::nullopt;
      return plain;
    }
    case WeightNormNames::kTorchNew: {
      if (!ends_with(name, ".original0")) return std::nullopt;
      const auto [head, parameter] = split_last_part(name.substr(0, name.size() - 10));
      const auto [module, container] = split_last_part(head);
      if (parameter.empty() || container != "parametrizations") return std::nullopt;
      return join_name(module, parameter);
    }
    case WeightNormNames::kReturnnCommon: {
      if (!ends_with(name, ".g")) return std::nullopt;
      const auto [module, holder] = split_last_part(name.substr(0, name.size() - 2));
      if (!ends_with(holder, "_normalized") || holder.size() == 11) return std::nullopt;
      return join_name(module, holder.substr(0, holder.size() - 11));
    }
  }
  return std::nullopt;
}

Error weight_norm_error(const std::string& parameter, const std::string& message) {
  return Error(ErrorCode::kInvalidArgument, message, {.entry = parameter});
}

DType promoted_dtype(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kFloat64 || b == DType::kFloat64) return DType::kFloat64;
  return DType::kFloat32;
}

// The dim that g's shape tells, or an error naming the parameter.
int64_t dim_from_g(const WeightNormParameter& parameter, const Shape& g, const WeightNormOptions& options) {
  const Shape& v = parameter.shape;
  const std::string fits = "g's shape " + shape_text(g) + " does not fit v's " + shape_text(v);
  if (checked_numel(g) == 1) return kWeightNormAllDims;
  if (parameter.names == WeightNormNames::kReturnnCommon) {
    if (g.size() != 1) throw weight_norm_error(parameter.name, fits + " (returnn_common's g is 1-d)");
    std::vector<int64_t> matching;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == g[0]) matching.push_back(static_cast<int64_t>(i));
    }
    if (matching.empty()) throw weight_norm_error(parameter.name, fits);
    if (matching.size() == 1) return matching.front();
    if (options.dim) {
      const std::optional<int64_t> dim = detail::except_dim(*options.dim, v.size());
      for (const int64_t candidate : matching) {
        if (dim && *dim == candidate) return candidate;
      }
      throw weight_norm_error(parameter.name, fits + " at dim " + std::to_string(*options.dim));
    }
    throw weight_norm_error(parameter.name, "g's size " + std::to_string(g[0]) + " is the size of several of v's "
                                                "dimensions " + shape_text(v) + ": say which (dim)");
  }
  if (g.size() != v.size()) throw weight_norm_error(parameter.name, fits + " (torch's g has v's ndim)");
  std::optional<int64_t> dim;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == 1) continue;
    if (g[i] != v[i] || dim) throw weight_norm_error(parameter.name, fits);
    dim = static_cast<int64_t>(i);
  }
  return *dim;  // numel > 1: some dimension is not 1
}

const Tensor& float_tensor(const Tree* leaf, const std::string& parameter, const std::string& name,
                           const char* role) {
  if (!leaf->is_tensor()) {
    throw weight_norm_error(parameter, std::string(role) + " '" + name + "' is a " +
                                           std::string(tree_kind_name(leaf->kind())) + ", not a tensor");
  }
  const Tensor& tensor = leaf->tensor();
  if (!detail::weight_norm_float(tensor.dtype())) {
    throw weight_norm_error(parameter, std::string(role) + " '" + name + "' is " +
                                           std::string(dtype_name(tensor.dtype())) +
                                           ", not floating point (float16, bfloat16, float32, float64)");
  }
  return tensor;
}

// g of `parameter` reshaped to what naming `names` stores: torch's size-1
// dims around dim (0-d for all dims), returnn_common's 1-d (0-d for all).
Shape g_shape_for(const WeightNormParameter& parameter, WeightNormNames names) {
  if (parameter.dim == kWeightNormAllDims) return {};
  if (names == WeightNormNames::kReturnnCommon) return {parameter.shape[static_cast<size_t>(parameter.dim)]};
  return detail::except_dim_shape(parameter.shape, parameter.dim);
}

void check_name_free(const Tree& tree, const detail::TreeEdit& edit, const std::string& name,
                     const std::string& parameter) {
  if (edit.removed.count(name) == 0 && tree.find_path(name) != nullptr) {
    throw weight_norm_error(parameter, "the tree has a leaf named '" + name + "' already");
  }
}

}  // namespace

std::string_view weight_norm_names_id(WeightNormNames names) {
  switch (names) {
    case WeightNormNames::kTorchOld: return "old";
    case WeightNormNames::kTorchNew: return "new";
    case WeightNormNames::kReturnnCommon: return "returnn_common";
  }
  return "unknown";
}

WeightNormNames weight_norm_names_from_id(std::string_view id) {
  for (const WeightNormNames names :
       {WeightNormNames::kTorchOld, WeightNormNames::kTorchNew, WeightNormNames::kReturnnCommon}) {
    if (id == weight_norm_names_id(names)) return names;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "unknown weight-norm naming '" + std::string(id) + "' (expected old, new or returnn_common)");
}

double weight_norm_epsilon(WeightNormNames names) {
  return names == WeightNormNames::kReturnnCommon ? kReturnnCommonEpsilon : 0.0;
}

std::vector<WeightNormParameter> find_weight_norms(const Tree& tree, const WeightNormOptions& options) {
  std::vector<WeightNormParameter> found;
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) {
    for (const WeightNormNames names : options.names) {
      const std::optional<std::string> plain = plain_name_of_g(leaf.name, names);
      if (!plain) continue;
      WeightNormParameter parameter;
      parameter.name = *plain;
      parameter.names = names;
      parameter.g_name = leaf.name;
      parameter.v_name = raw_names_of(*plain, names).v;
      const Tree* v_leaf = tree.find_path(parameter.v_name);
      if (v_leaf == nullptr) {
        throw weight_norm_error(parameter.name, "weight norm's g '" + parameter.g_name + "' (" +
                                                    std::string(weight_norm_names_id(names)) +
                                                    " naming) has no v '" + parameter.v_name + "' beside it");
      }
      const Tensor& g = float_tensor(leaf.value, parameter.name, parameter.g_name, "g");
      const Tensor& v = float_tensor(v_leaf, parameter.name, parameter.v_name, "v");
      parameter.shape = v.shape();
      parameter.dtype = promoted_dtype(g.dtype(), v.dtype());
      parameter.dim = dim_from_g(parameter, g.shape(), options);
      found.push_back(std::move(parameter));
    }
  }
  return found;
}

Formula weight_norm_formula(const WeightNormParameter& parameter) {
  const Formula g = Formula::parameter(parameter.g_name);
  const Formula v = Formula::parameter(parameter.v_name);
  if (parameter.names == WeightNormNames::kReturnnCommon) {
    const Formula norm = Formula::sqrt(Formula::add(Formula::sum_squares_except_dim(v, parameter.dim),
                                                    Formula::constant(kReturnnCommonEpsilon)));
    return Formula::mul(
        v, Formula::div(Formula::reshape(g, detail::except_dim_shape(parameter.shape, parameter.dim)), norm));
  }
  return Formula::mul(v, Formula::div(g, Formula::norm_except_dim(v, 2, parameter.dim)));
}

Tree fold_weight_norm(const Tree& tree, const WeightNormOptions& options) {
  const std::vector<WeightNormParameter> parameters = find_weight_norms(tree, options);
  detail::TreeEdit edit;
  for (const WeightNormParameter& parameter : parameters) {
    edit.removed.insert(parameter.g_name);
    edit.removed.insert(parameter.v_name);
  }
  for (const WeightNormParameter& parameter : parameters) {
    check_name_free(tree, edit, parameter.name, parameter.name);
    const std::vector<double> g = detail::float64_values(tree.find_path(parameter.g_name)->tensor());
    const std::vector<double> v = detail::float64_values(tree.find_path(parameter.v_name)->tensor());
    const std::vector<double> sums = detail::sum_squares_except_dim(v, parameter.shape, parameter.dim);
    const double epsilon = weight_norm_epsilon(parameter.names);
    // Per index of dim: g / ‖v‖, then w = v · that, in torch's order of operations.
    std::vector<double> scale(sums.size());
    for (size_t j = 0; j < sums.size(); ++j) scale[j] = g[j] / std::sqrt(sums[j] + epsilon);
    size_t inner = 1;
    if (parameter.dim != kWeightNormAllDims) {
      for (size_t i = static_cast<size_t>(parameter.dim) + 1; i < parameter.shape.size(); ++i) {
        inner *= static_cast<size_t>(parameter.shape[i]);
      }
    }
    std::vector<double> w(v.size());
    for (size_t index = 0; index < v.size(); ++index) {
      w[index] = v[index] * scale[scale.size() == 1 ? 0 : (index / inner) % scale.size()];
    }
    edit.added[parameter.g_name].emplace_back(parameter.name,
                                              detail::tensor_from_float64(w, parameter.shape, parameter.dtype));
  }
  return detail::apply_tree_edit(tree, edit, options.nested);
}

std::vector<std::string> weight_norm_targets(const Tree& tree, const UnfoldWeightNormOptions& options) {
  std::vector<std::string> targets;
  if (!options.parameters.empty()) {
    for (const std::string& name : options.parameters) {
      const Tree* leaf = tree.find_path(name);
      if (leaf == nullptr) throw Error(ErrorCode::kNotFound, "no weight of that name to unfold", {.entry = name});
      float_tensor(leaf, name, name, "the weight");
      targets.push_back(name);
    }
    return targets;
  }
  for (const Tree::Leaf& leaf : tree.tensor_leaves()) {
    const Tensor& tensor = leaf.value->tensor();
    if (!detail::weight_norm_float(tensor.dtype())) continue;
    const bool chosen = options.select ? options.select(leaf.name, tensor)
                                       : tensor.ndim() >= 2 && (leaf.name == "weight" || ends_with(leaf.name, ".weight"));
    if (chosen) targets.push_back(leaf.name);
  }
  return targets;
}

Tree unfold_weight_norm(const Tree& tree, int64_t dim, const UnfoldWeightNormOptions& options) {
  const std::vector<std::string> targets = weight_norm_targets(tree, options);
  detail::TreeEdit edit;
  for (const std::string& name : targets) edit.removed.insert(name);
  for (const std::string& name : targets) {
    const Tensor& w = tree.find_path(name)->tensor();
    const std::optional<int64_t> normalized = detail::except_dim(dim, w.ndim());
    if (!normalized) {
      throw weight_norm_error(name, "dim " + std::to_string(dim) + " is out of range for the weight's shape " +
                                        shape_text(w.shape()));
    }
    WeightNormParameter parameter{.name = name, .names = options.names, .dim = *normalized, .shape = w.shape(),
                                  .dtype = w.dtype()};
    const RawNames raw = raw_names_of(name, options.names);
    check_name_free(tree, edit, raw.g, name);
    check_name_free(tree, edit, raw.v, name);
    std::vector<double> g = detail::sum_squares_except_dim(detail::float64_values(w), w.shape(), *normalized);
    const double epsilon = weight_norm_epsilon(options.names);
    for (double& element : g) element = std::sqrt(element + epsilon);
    auto& added = edit.added[name];
    added.emplace_back(raw.g, detail::tensor_from_float64(g, g_shape_for(parameter, options.names), w.dtype()));
    added.emplace_back(raw.v, w);
  }
  return detail::apply_tree_edit(tree, edit, options.nested);
}

Tree convert_weight_norm_names(const Tree& tree, std::optional<WeightNormNames> from, WeightNormNames to,
                               const WeightNormOptions& options) {
  WeightNormOptions find = options;
  if (from) find.names = {*from};
  const std::vector<WeightNormParameter> parameters = find_weight_norms(tree, find);
  detail::TreeEdit edit;
  for (const WeightNormParameter& parameter : parameters) {
    if (parameter.names == to) continue;
    edit.removed.insert(parameter.g_name);
    edit.removed.insert(parameter.v_name);
  }
  for (const WeightNormParameter& parameter : parameters) {
    if (parameter.names == to) continue;
    const RawNames raw = raw_names_of(parameter.name, to);
    check_name_free(tree, edit, raw.g, parameter.name);
    check_name_free(tree, edit, raw.v, parameter.name);
    const Tensor& g = tree.find_path(parameter.g_name)->tensor();
    const bool same_shape_rule = parameter.names != WeightNormNames::kReturnnCommon && to != WeightNormNames::kReturnnCommon;
    const Shape shape = same_shape_rule ? g.shape() : g_shape_for(parameter, to);
    Tensor reshaped = shape == g.shape() ? g : Tensor(g.dtype(), shape, g.buffer());
    edit.added[parameter.g_name].emplace_back(raw.g, std::move(reshaped));
    edit.added[parameter.v_name].emplace_back(raw.v, tree.find_path(parameter.v_name)->tensor());
  }
  return detail::apply_tree_edit(tree, edit, options.nested);
}

}  // namespace ckpt
