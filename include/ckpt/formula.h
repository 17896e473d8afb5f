#pragma once
// Formula: a derived parameter written as a small expression of named ops
// over raw parameters, for backends that build a graph once instead of
// recomputing eagerly (DESIGN.md, problem 5). Weight norm's derivation
// (weight_norm.h, weight_norm_formula) is one:
//
//   mul("conv.weight_v", div("conv.weight_g", norm_except_dim("conv.weight_v", 2, 0)))
//
// A formula is a value: printable as text (above) and JSON, and evaluated
// over a tree's tensors by evaluate().

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt {

struct Formula {
  enum class Op : uint8_t {
    kParameter,            // the tensor leaf named `name`
    kConstant,             // the 0-d value `value`
    kMul,                  // operands[0] * operands[1], broadcast as numpy
    kDiv,                  // operands[0] / operands[1], broadcast as numpy
    kAdd,                  // operands[0] + operands[1], broadcast as numpy
    kSqrt,                 // element-wise square root of operands[0]
    kNormExceptDim,        // torch.norm_except_dim(operands[0], power, dim)
    kSumSquaresExceptDim,  // the same sums of squares, before the root
    kReshape,              // operands[0] with shape `shape` (same element count)
  };

  Op op = Op::kConstant;
  std::string name;               // kParameter
  double value = 0;               // kConstant
  // The except-dim ops, as torch's norm_except_dim takes it: the one
  // dimension kept (its size stays, every other becomes 1), or -1 for one
  // norm over all dimensions (a 0-d result); other negative values count
  // from the end.
  int64_t dim = 0;
  int64_t power = 2;              // kNormExceptDim (evaluate() knows 2 only)
  Shape shape;                    // kReshape
  std::vector<Formula> operands;

  static Formula parameter(std::string name);
  static Formula constant(double value);
  static Formula mul(Formula a, Formula b);
  static Formula div(Formula a, Formula b);
  static Formula add(Formula a, Formula b);
  static Formula sqrt(Formula a);
  static Formula norm_except_dim(Formula a, int64_t power, int64_t dim);
  static Formula sum_squares_except_dim(Formula a, int64_t dim);
  static Formula reshape(Formula a, Shape shape);

  // The op's name as text and JSON spell it: "param", "const", "mul", "div",
  // "add", "sqrt", "norm_except_dim", "sum_squares_except_dim", "reshape".
  static std::string_view op_name(Op op);

  // One line: ops as calls, parameter names as JSON strings, constants in
  // their shortest exact form: mul("w_v", div("w_g", norm_except_dim("w_v", 2, 0))).
  std::string text() const;
  // {"op": "mul", "args": [...]}; a parameter {"op": "param", "name": ...},
  // a constant {"op": "const", "value": x}; the except-dim ops add "dim"
  // (and norm_except_dim "p"), reshape adds "shape".
  std::string json() const;
  // The raw parameter names the formula reads, each once, in first-use order.
  std::vector<std::string> parameters() const;

  bool operator==(const Formula&) const = default;
};

// Evaluates `formula` over the tensors of `tree` (parameters found by dotted
// name, Tree::find_path) in float64: every parameter is cast to float64
// first (ckpt::cast, exact for float16, bfloat16 and float32), every op
// computes in float64, sums of squares add the elements in row-major order.
// Returns a float64 tensor; cast it to the dtype wanted.
// Throws Error{kNotFound} naming a parameter that `tree` lacks,
// {kInvalidArgument} naming it if it is no tensor or not floating point
// (float16, bfloat16, float32, float64), and naming the op for shapes that do
// not broadcast, a reshape that changes the element count, a dim out of
// range, or a power other than 2.
Tensor evaluate(const Formula& formula, const Tree& tree);

}  // namespace ckpt
