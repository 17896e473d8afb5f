#pragma once
// Weight norm in checkpoints (Salimans & Kingma, arXiv:1602.07868): a weight
// stored as its magnitude g and its direction v,
//
//   w = g · v / ‖v‖
//
// where ‖v‖ is the 2-norm over every dimension of v but `dim`, as torch's
// norm_except_dim(v, 2, dim) computes it. Converters between the raw pair and
// the plain weight, in the three namings that frameworks write:
//
//   old (torch.nn.utils.weight_norm):            X.weight_g, X.weight_v
//   new (torch.nn.utils.parametrizations):       X.parametrizations.weight.original0 (g), .original1 (v)
//   returnn_common (nn.utils.weight_norm):       X.weight_normalized.g, X.weight_normalized.v
//
// ("weight" stands for any parameter name N: N_g / N_v, parametrizations.N,
// N_normalized.) docs/weight_norm.md has the shapes of g, the dims and how
// close the results come to torch's.
//
// Names are dotted leaf names (tree.h): a flat torch state dict and a nested
// tree alike. Every computation is in float64, cast back to the tensor's
// dtype (float16, bfloat16, float32, float64) by ckpt::cast.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/formula.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt {

enum class WeightNormNames : uint8_t {
  kTorchOld,       // "old": N_g, N_v; g as norm_except_dim gives it (size 1 in every dim but `dim`; 0-d for all)
  kTorchNew,       // "new": parametrizations.N.original0 (g), .original1 (v); g as for old
  kReturnnCommon,  // "returnn_common": N_normalized.g, N_normalized.v; g 1-d, [v.shape[dim]] (0-d for all),
                   // and ‖v‖ = sqrt(Σv² + 1e-6)
};

// "old", "new", "returnn_common".
std::string_view weight_norm_names_id(WeightNormNames names);
// The style an id names. Throws Error{kInvalidArgument} listing the ids.
WeightNormNames weight_norm_names_from_id(std::string_view id);

// The epsilon under the root of each style's norm: 0 for torch's
// (norm_except_dim), 1e-6 for returnn_common's (WeightNorm's default eps).
double weight_norm_epsilon(WeightNormNames names);

// torch's dim=None (which torch spells -1, too): one norm over all of v.
inline constexpr int64_t kWeightNormAllDims = -1;

// One weight-normed parameter of a tree.
struct WeightNormParameter {
  std::string name;    // the plain weight's name: "encoder.conv.weight"
  WeightNormNames names;
  std::string g_name;  // the raw leaves' names in the tree
  std::string v_name;
  // The dimension of v whose slices have norms of their own (0 <= dim <
  // v's ndim), told by g's shape, or kWeightNormAllDims when g has one
  // element (one norm over all of v).
  int64_t dim = 0;
  Shape shape;         // v's shape, which is w's
  DType dtype = DType::kFloat32;  // w's: g's and v's if equal, else float64 if either is, else float32 (torch's promotion)
};

struct WeightNormOptions {
  // The namings to look for (all three by default).
  std::vector<WeightNormNames> names = {WeightNormNames::kTorchOld, WeightNormNames::kTorchNew,
                                        WeightNormNames::kReturnnCommon};
  // For a 1-d g of returnn_common's whose size several of v's dimensions
  // have (a square weight): the dimension meant. Not needed otherwise.
  std::optional<int64_t> dim;
  // Where a new leaf goes (convert_weight_norm_names; fold's plain names
  // never need it): false: the rest of its name is one key of the deepest
  // map of the old leaf's path whose name its name starts with (a flat torch
  // state dict stays flat); true: nested maps, one per part (a tree nested
  // per module, as TF and Flax files give).
  bool nested = false;
};

// The weight-normed parameters of `tree`, in tree order of their g, found by
// names: a tensor leaf named as one of options.names' g with a tensor leaf
// named as its v beside it.
// Throws Error{kInvalidArgument} naming the parameter for a g without its v
// (N_g without N_v, original0 without original1, g without v; a v alone is
// no parameter: nn.MultiheadAttention has a bias_v), a g or v that is no
// floating-point tensor (float16, bfloat16, float32, float64), and a g whose
// shape does not fit v's: torch's namings need g of one element or of v's
// ndim with size 1 in every dimension but one, whose size is v's;
// returnn_common's a 1-d g of the size of one of v's dimensions (several:
// options.dim must say which) or of one element.
std::vector<WeightNormParameter> find_weight_norms(const Tree& tree, const WeightNormOptions& options = {});

// The derivation of `parameter` as a formula over its raw names, as its
// naming computes it: torch's mul(v, div(g, norm_except_dim(v, 2, dim)));
// returnn_common's mul(v, div(reshape(g, S), sqrt(add(sum_squares_except_dim(v, dim), 1e-6))))
// with S the shape of size 1 in every dimension but dim. evaluate() of it
// gives fold_weight_norm's values in float64.
Formula weight_norm_formula(const WeightNormParameter& parameter);

// `tree` with every weight-normed parameter (find_weight_norms) folded: its
// g and v replaced by the plain weight w = v · (g / ‖v‖) (‖v‖ with the
// naming's epsilon) under the plain name, where g was; maps that only held
// them are left out. Other leaves are shared, not copied. A zero v gives NaN,
// as in torch.
// Throws what find_weight_norms throws, and Error{kInvalidArgument} naming
// the plain name if the tree has a leaf of that name already.
Tree fold_weight_norm(const Tree& tree, const WeightNormOptions& options = {});

struct UnfoldWeightNormOptions {
  // The naming of the raw leaves written.
  WeightNormNames names = WeightNormNames::kTorchNew;
  // The weights to split, by dotted name. Empty: those `select` picks, or
  // by default every floating-point tensor of ndim >= 2 named "weight" or
  // "*.weight".
  std::vector<std::string> parameters;
  std::function<bool(std::string_view name, const Tensor& tensor)> select;
  // As WeightNormOptions::nested.
  bool nested = false;
};

// The names of the weights unfold_weight_norm(tree, dim, options) splits,
// in tree order. Throws Error{kNotFound} for a name of options.parameters
// that `tree` lacks, {kInvalidArgument} naming it if it is no floating-point
// tensor.
std::vector<std::string> weight_norm_targets(const Tree& tree, const UnfoldWeightNormOptions& options = {});

// `tree` with every selected weight w (weight_norm_targets) split into
// g = ‖w‖ over all dimensions but `dim` and v = w (shared, not copied),
// named by options.names, in w's place, as torch's weight_norm makes them
// (right_inverse): g of w's dtype, in the naming's shape. `dim` as torch
// takes it: -1 (kWeightNormAllDims) is one norm over all of w, as dim=None
// (not the last dimension); other negative values count from the end.
// Throws what weight_norm_targets throws, and Error{kInvalidArgument}
// naming the weight for a dim out of range for it or a raw name the tree
// has already.
Tree unfold_weight_norm(const Tree& tree, int64_t dim, const UnfoldWeightNormOptions& options = {});

// `tree` with every weight-normed parameter of naming `from` (any naming of
// options.names: nullopt) renamed to naming `to`, in place; values are
// shared, and g reshaped between torch's shape and returnn_common's where
// the naming changes (values unchanged: w changes by returnn_common's
// epsilon, relatively by about 1e-6 / (2‖v‖²)). Parameters already in `to`'s
// naming stay as they are.
// Throws what find_weight_norms throws, and Error{kInvalidArgument} naming
// the parameter if a new name is in the tree already.
Tree convert_weight_norm_names(const Tree& tree, std::optional<WeightNormNames> from, WeightNormNames to,
                               const WeightNormOptions& options = {});

}  // namespace ckpt
