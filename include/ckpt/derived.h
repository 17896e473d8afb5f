#pragma once
// Derived parameters: a parameter computed from raw ones (DESIGN.md, problem
// 5), declared once with the raw names it reads. Checkpoints hold the raw
// parameters only, under stable names; the derived value is computed where it
// is needed: eagerly by a C++ callable (DerivedParameters caches it and
// recomputes it exactly when a raw tensor changed), or by a backend from its
// Formula (formula.h). Weight norm is one (weight_norm_derivation).
//
//   ckpt::Derivation masked{.name = "fc.weight", .raw = {"fc.weight_raw", "fc.mask"},
//                           .compute = [](std::span<const ckpt::Tensor> raw) { return times(raw[0], raw[1]); }};
//   ckpt::Tree inference = ckpt::derive(state, {&masked, 1});   // fc.weight, raw leaves gone
//
// Python's eager counterpart over torch modules (ckpt.reparametrize,
// ckpt.weight_norm) uses torch's version counters instead; see
// docs/weight_norm.md.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/formula.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"
#include "ckpt/weight_norm.h"

namespace ckpt {

struct Derivation {
  // The derived parameter's dotted name ("encoder.conv.weight").
  std::string name;
  // The raw parameters' dotted names, in the order `compute` takes them.
  std::vector<std::string> raw;
  // The eager function: the derived tensor from the raw tensors (in `raw`'s
  // order). Empty: the formula is evaluated (float64) and cast to `dtype`.
  std::function<Tensor(std::span<const Tensor> raw)> compute;
  // The derivation as ops over the raw names, for graph backends; when set,
  // it reads only names in `raw`.
  std::optional<Formula> formula;
  // The formula's result dtype (only used without `compute`).
  DType dtype = DType::kFloat32;
};

// Weight norm's derivation of `parameter` (find_weight_norms): raw {g, v},
// the formula weight_norm_formula(), computed as fold_weight_norm computes it
// (the same values).
Derivation weight_norm_derivation(const WeightNormParameter& parameter);

// The tensors `derivation.raw` names in `state`, in order.
// Throws Error{kNotFound} naming the derivation and the raw name `state`
// lacks, {kInvalidArgument} naming it if it is not a tensor.
std::vector<Tensor> raw_tensors(const Tree& state, const Derivation& derivation);

// The derived value over `state`: compute(raw), or the formula evaluated and
// cast to `dtype`. Throws as raw_tensors(), Error{kInvalidArgument} naming
// the derivation for one with neither a function nor a formula (or a formula
// reading a name not in `raw`), and what the function or evaluate() throws.
Tensor compute_derived(const Tree& state, const Derivation& derivation);

struct DeriveOptions {
  // Keep the raw leaves beside the derived ones (false: an inference export
  // holding the derived parameters only).
  bool keep_raw = false;
  // As WeightNormOptions::nested: where a derived leaf goes in a nested tree.
  bool nested = false;
};

// `state` with each derivation's value under its name, where its first raw
// leaf was (after it, with keep_raw), the raw leaves left out unless
// keep_raw. Other leaves are shared, not copied.
// Throws as compute_derived(), and Error{kInvalidArgument} naming the
// derived name if `state` has a leaf of that name that is not removed here,
// or two derivations have one name.
Tree derive(const Tree& state, std::span<const Derivation> derivations, const DeriveOptions& options = {});

// The eager cache: each derived value computed on first get(), then returned
// as it is until one of its raw tensors changed (another tensor, or the same
// memory with other bytes: identity, dtype, shape and xxh3 of the bytes are
// compared, so it is never stale and never recomputed needlessly). Not
// thread-safe: one user at a time.
class DerivedParameters {
 public:
  // Throws Error{kInvalidArgument} for two derivations of one name.
  explicit DerivedParameters(std::vector<Derivation> derivations);

  // The value of derivation `name` over `state`. Throws Error{kNotFound}
  // for an unknown name, and what compute_derived() throws.
  const Tensor& get(std::string_view name, const Tree& state);

  // How often `name` was computed (0 for an unknown name).
  size_t computations(std::string_view name) const;

  const std::vector<Derivation>& derivations() const noexcept { return derivations_; }

 private:
  struct Fingerprint {
    const void* address = nullptr;
    DType dtype = DType::kFloat32;
    Shape shape;
    uint64_t xxh3 = 0;
    bool operator==(const Fingerprint&) const = default;
  };
  struct Cached {
    std::vector<Fingerprint> raw;
    Tensor value;
    size_t computations = 0;
  };
  static std::vector<Fingerprint> fingerprints(std::span<const Tensor> raw);

  std::vector<Derivation> derivations_;
  std::map<std::string, Cached, std::less<>> cache_;
};

}  // namespace ckpt
