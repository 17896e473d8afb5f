#include "ckpt/derived.h"

#include <algorithm>
#include <set>

#include "ckpt/cast.h"
#include "ckpt/error.h"
#include "core/checksum.h"
#include "modules/weight_norm_tree.h"

namespace ckpt {
namespace {

Error derivation_error(ErrorCode code, const Derivation& derivation, const std::string& message) {
  return Error(code, "derived parameter '" + derivation.name + "': " + message, {.entry = derivation.name});
}

}  // namespace

Derivation weight_norm_derivation(const WeightNormParameter& parameter) {
  return {.name = parameter.name,
          .raw = {parameter.g_name, parameter.v_name},
          .compute = {},
          .formula = weight_norm_formula(parameter),
          .dtype = parameter.dtype};
}

std::vector<Tensor> raw_tensors(const Tree& state, const Derivation& derivation) {
  std::vector<Tensor> raw;
  raw.reserve(derivation.raw.size());
  for (const std::string& name : derivation.raw) {
    const Tree* leaf = state.find_path(name);
    if (leaf == nullptr) throw derivation_error(ErrorCode::kNotFound, derivation, "no raw parameter '" + name + "'");
    if (!leaf->is_tensor()) {
      throw derivation_error(ErrorCode::kInvalidArgument, derivation, "raw parameter '" + name + "' is not a tensor");
    }
    raw.push_back(leaf->tensor());
  }
  return raw;
}

namespace {

Tensor compute_from(const Derivation& derivation, std::span<const Tensor> raw) {
  if (derivation.compute) return derivation.compute(raw);
  if (!derivation.formula) {
    throw derivation_error(ErrorCode::kInvalidArgument, derivation, "has neither a function nor a formula");
  }
  Tree named = Tree::map();  // the raw tensors under their dotted names, as the formula reads them
  for (size_t i = 0; i < raw.size(); ++i) named.set(derivation.raw[i], raw[i]);
  for (const std::string& name : derivation.formula->parameters()) {
    if (std::find(derivation.raw.begin(), derivation.raw.end(), name) == derivation.raw.end()) {
      throw derivation_error(ErrorCode::kInvalidArgument, derivation,
                             "its formula reads '" + name + "', which is not one of its raw parameters");
    }
  }
  return cast(evaluate(*derivation.formula, named), derivation.dtype);
}

}  // namespace

Tensor compute_derived(const Tree& state, const Derivation& derivation) {
  const std::vector<Tensor> raw = raw_tensors(state, derivation);
  return compute_from(derivation, raw);
}

Tree derive(const Tree& state, std::span<const Derivation> derivations, const DeriveOptions& options) {
  detail::TreeEdit edit;
  std::set<std::string> names;
  for (const Derivation& derivation : derivations) {
    if (!names.insert(derivation.name).second) {
      throw derivation_error(ErrorCode::kInvalidArgument, derivation, "declared twice");
    }
    if (derivation.raw.empty()) throw derivation_error(ErrorCode::kInvalidArgument, derivation, "has no raw parameter");
    if (!options.keep_raw) edit.removed.insert(derivation.raw.begin(), derivation.raw.end());
  }
  for (const Derivation& derivation : derivations) {
    if (!edit.removed.contains(derivation.name) && state.find_path(derivation.name) != nullptr) {
      throw derivation_error(ErrorCode::kInvalidArgument, derivation, "the state has a leaf of that name already");
    }
    Tensor value = compute_derived(state, derivation);
    const std::string& first = derivation.raw.front();
    auto& added = edit.added[first];
    if (options.keep_raw && added.empty()) {  // the raw leaf stays, the derived one goes after it
      edit.removed.insert(first);
      added.emplace_back(first, *state.find_path(first));
    }
    added.emplace_back(derivation.name, std::move(value));
  }
  return detail::apply_tree_edit(state, edit, options.nested);
}

DerivedParameters::DerivedParameters(std::vector<Derivation> derivations) : derivations_(std::move(derivations)) {
  std::set<std::string> names;
  for (const Derivation& derivation : derivations_) {
    if (!names.insert(derivation.name).second) {
      throw derivation_error(ErrorCode::kInvalidArgument, derivation, "declared twice");
    }
  }
}

std::vector<DerivedParameters::Fingerprint> DerivedParameters::fingerprints(std::span<const Tensor> raw) {
  std::vector<Fingerprint> out;
  out.reserve(raw.size());
  for (const Tensor& tensor : raw) {
    const std::span<const std::byte> bytes = tensor.has_data() ? tensor.bytes() : std::span<const std::byte>();
    out.push_back({.address = bytes.data(), .dtype = tensor.dtype(), .shape = tensor.shape(), .xxh3 = detail::xxh3_64(bytes)});
  }
  return out;
}

const Tensor& DerivedParameters::get(std::string_view name, const Tree& state) {
  const auto found = std::find_if(derivations_.begin(), derivations_.end(),
                                  [&](const Derivation& derivation) { return derivation.name == name; });
  if (found == derivations_.end()) {
    throw Error(ErrorCode::kNotFound, "no derived parameter '" + std::string(name) + "' is declared",
                {.entry = std::string(name)});
  }
  const std::vector<Tensor> raw = raw_tensors(state, *found);
  std::vector<Fingerprint> now = fingerprints(raw);
  auto cached = cache_.find(name);
  if (cached != cache_.end() && cached->second.raw == now) return cached->second.value;
  Tensor value = compute_from(*found, raw);
  if (cached == cache_.end()) cached = cache_.emplace(std::string(name), Cached{}).first;
  cached->second.raw = std::move(now);
  cached->second.value = std::move(value);
  ++cached->second.computations;
  return cached->second.value;
}

size_t DerivedParameters::computations(std::string_view name) const {
  const auto found = cache_.find(name);
  return found == cache_.end() ? 0 : found->second.computations;
}

}  // namespace ckpt
