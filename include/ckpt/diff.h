#pragma once
// diff: compares two state trees leaf by leaf, by dotted name, as
// `ckpt diff A B` does. Tensors are compared element by element in double
// precision for every dtype (the 8- and 16-bit floats decoded exactly), so a
// report says how far apart two checkpoints are, not only whether they are.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt {

struct DiffOptions {
  // Absolute tolerance: two elements (or two numeric non-tensor leaves of
  // the same kind) are equal when |a - b| <= atol. Must be >= 0 (not NaN).
  // At 0 only equal values are equal; -0.0 equals +0.0 as in IEEE arithmetic.
  double atol = 0.0;
};

// Two tensors named alike whose dtypes differ (their shapes may differ too;
// then the name is also in shape_mismatched).
struct DTypeMismatch {
  std::string name;
  DType a;
  DType b;
};

// Two tensors named alike whose shapes differ.
struct ShapeMismatch {
  std::string name;
  Shape a;
  Shape b;
};

// Two leaves named alike of different kinds (a tensor and an integer, an
// integer and a float, ...).
struct KindMismatch {
  std::string name;
  Tree::Kind a;
  Tree::Kind b;
};

// Two tensors of equal dtype and shape whose elements differ.
//
// Element rule: elements are decoded to double (complex: both parts); they
// are equal when both are NaN (any payload, either sign), or when
// |a - b| <= atol (equal infinities included). A NaN facing a number is a
// difference whose size is NaN. For complex elements the parts follow that
// rule one by one and the size is |a - b| of the complex difference; a
// float4_e2m1fn_x2 element (a byte holding two 4-bit floats) compares as
// such a pair. Integers (int64, uint64 included) are compared exactly; their difference
// is exact before it is rounded to double.
struct TensorDifference {
  std::string name;
  DType dtype;
  // The largest |a - b| over all elements; NaN if some element is NaN in one
  // tensor and a number in the other; +inf if an infinity faces a finite
  // value or the opposite infinity.
  double max_abs_diff = 0.0;
  // How many elements are unequal by the element rule (> 0 here).
  uint64_t differing_elements = 0;
  uint64_t numel = 0;
};

// Two non-tensor leaves of the same kind whose values differ (strings,
// bytes, bools exactly; integers and floats by the element rule above).
struct LeafDifference {
  std::string name;
  Tree a;
  Tree b;
};

struct DiffReport {
  // Leaves whose names occur in only one tree, in that tree's leaf order.
  std::vector<std::string> only_in_a;
  std::vector<std::string> only_in_b;
  // The remaining lists follow the leaf order of tree `a`.
  std::vector<KindMismatch> kind_mismatched;
  std::vector<DTypeMismatch> dtype_mismatched;
  std::vector<ShapeMismatch> shape_mismatched;
  std::vector<TensorDifference> value_differences;
  std::vector<LeafDifference> leaf_differences;
  // Tensors whose bytes differ although every element is equal by the
  // element rule (NaN payloads, -0.0 vs +0.0, differences within atol).
  // Informational: these do not make the trees differ.
  std::vector<std::string> within_tolerance;
  // How many names both trees have (whatever their comparison found).
  size_t compared = 0;

  // True when every list above except within_tolerance is empty.
  bool identical() const;
};

// Compares the leaves of `a` and `b` (Tree::leaves(): names made unique,
// empty containers are not leaves) by name. The tree's structure beyond the
// names (map vs list, key order) is not compared.
// Tensor bytes are read in place (a mapped file is paged in, not copied).
// Throws Error{kInvalidArgument} if options.atol is negative or NaN.
DiffReport diff(const Tree& a, const Tree& b, const DiffOptions& options = {});

}  // namespace ckpt
