// Formula (include/ckpt/formula.h): construction, text, JSON, evaluation.

#include "ckpt/formula.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "ckpt/error.h"
#include "core/json_writer.h"
#include "modules/weight_norm_math.h"

namespace ckpt {
namespace {

Formula formula_of(Formula::Op op, std::vector<Formula> operands) {
  Formula formula;
  formula.op = op;
  formula.operands = std::move(operands);
  return formula;
}

// The shortest text that reads back to `value` (as JSON numbers are written).
std::string formula_number(double value) {
  detail::JsonWriter writer;
  writer.real(value);
  return writer.take();
}

void formula_text(const Formula& formula, std::string& out) {
  using Op = Formula::Op;
  switch (formula.op) {
    case Op::kParameter: detail::append_json_string(out, formula.name); return;
    case Op::kConstant: out += formula_number(formula.value); return;
    default: break;
  }
  out += Formula::op_name(formula.op);
  out += '(';
  for (size_t i = 0; i < formula.operands.size(); ++i) {
    if (i > 0) out += ", ";
    formula_text(formula.operands[i], out);
  }
  if (formula.op == Op::kNormExceptDim) out += ", " + std::to_string(formula.power);
  if (formula.op == Op::kNormExceptDim || formula.op == Op::kSumSquaresExceptDim) {
    out += ", " + std::to_string(formula.dim);
  }
  if (formula.op == Op::kReshape) out += ", " + shape_text(formula.shape);
  out += ')';
}

void formula_json(const Formula& formula, detail::JsonWriter& writer) {
  using Op = Formula::Op;
  writer.begin_object();
  writer.key("op");
  writer.string(Formula::op_name(formula.op));
  if (formula.op == Op::kParameter) {
    writer.key("name");
    writer.string(formula.name);
  } else if (formula.op == Op::kConstant) {
    writer.key("value");
    writer.real(formula.value);
  } else {
    writer.key("args");
    writer.begin_array();
    for (const Formula& operand : formula.operands) formula_json(operand, writer);
    writer.end_array();
  }
  if (formula.op == Op::kNormExceptDim) {
    writer.key("p");
    writer.integer(formula.power);
  }
  if (formula.op == Op::kNormExceptDim || formula.op == Op::kSumSquaresExceptDim) {
    writer.key("dim");
    writer.integer(formula.dim);
  }
  if (formula.op == Op::kReshape) {
    writer.key("shape");
    writer.begin_array();
    for (const int64_t size : formula.shape) writer.integer(size);
    writer.end_array();
  }
  writer.end_object();
}

// A value during evaluation: float64 elements in row-major order.
struct FormulaValue {
  Shape shape;
  std::vector<double> data;
};

Error formula_error(const Formula& formula, const std::string& message) {
  return Error(ErrorCode::kInvalidArgument, std::string(Formula::op_name(formula.op)) + ": " + message);
}

// a (op) b with numpy broadcasting.
template <class Combine>
FormulaValue formula_broadcast(const Formula& formula, const FormulaValue& a, const FormulaValue& b, Combine combine) {
  const size_t rank = std::max(a.shape.size(), b.shape.size());
  Shape shape(rank);
  // Per operand, the element stride of each output dimension (0 where broadcast).
  std::vector<size_t> stride_a(rank, 0), stride_b(rank, 0);
  auto strides_of = [&](const Shape& in, std::vector<size_t>& strides) {
    size_t stride = 1;
    for (size_t i = 0; i < in.size(); ++i) {
      const size_t in_axis = in.size() - 1 - i;
      const size_t out_axis = rank - 1 - i;
      strides[out_axis] = in[in_axis] == 1 ? 0 : stride;
      stride *= static_cast<size_t>(in[in_axis]);
    }
  };
  for (size_t i = 0; i < rank; ++i) {
    const int64_t size_a = i + a.shape.size() >= rank ? a.shape[i + a.shape.size() - rank] : 1;
    const int64_t size_b = i + b.shape.size() >= rank ? b.shape[i + b.shape.size() - rank] : 1;
    if (size_a != size_b && size_a != 1 && size_b != 1) {
      throw formula_error(formula, "shapes " + shape_text(a.shape) + " and " + shape_text(b.shape) +
                                       " do not broadcast");
    }
    shape[i] = size_a == 1 ? size_b : size_a;
  }
  strides_of(a.shape, stride_a);
  strides_of(b.shape, stride_b);
  FormulaValue out;
  out.shape = shape;
  const uint64_t count = checked_numel(shape);
  out.data.resize(static_cast<size_t>(count));
  std::vector<int64_t> index(rank, 0);
  size_t offset_a = 0, offset_b = 0;
  for (size_t flat = 0; flat < out.data.size(); ++flat) {
    out.data[flat] = combine(a.data[offset_a], b.data[offset_b]);
    // Advance the multi-index, last dimension fastest.
    for (size_t axis = rank; axis-- > 0;) {
      ++index[axis];
      offset_a += stride_a[axis];
      offset_b += stride_b[axis];
      if (index[axis] < shape[axis]) break;
      offset_a -= stride_a[axis] * static_cast<size_t>(shape[axis]);
      offset_b -= stride_b[axis] * static_cast<size_t>(shape[axis]);
      index[axis] = 0;
    }
  }
  return out;
}

FormulaValue formula_evaluate(const Formula& formula, const Tree& tree) {
  using Op = Formula::Op;
  auto operand = [&](size_t i) {
    if (i >= formula.operands.size()) throw formula_error(formula, "missing operand");
    return formula_evaluate(formula.operands[i], tree);
  };
  switch (formula.op) {
    case Op::kParameter: {
      const Tree* leaf = tree.find_path(formula.name);
      if (leaf == nullptr) throw Error(ErrorCode::kNotFound, "the formula's parameter is not in the tree", {.entry = formula.name});
      if (!leaf->is_tensor() || !detail::weight_norm_float(leaf->tensor().dtype())) {
        throw Error(ErrorCode::kInvalidArgument,
                    "the formula's parameter is not a floating-point tensor (float16, bfloat16, float32, float64)",
                    {.entry = formula.name});
      }
      return {leaf->tensor().shape(), detail::float64_values(leaf->tensor())};
    }
    case Op::kConstant: return {{}, {formula.value}};
    case Op::kMul: return formula_broadcast(formula, operand(0), operand(1), [](double a, double b) { return a * b; });
    case Op::kDiv: return formula_broadcast(formula, operand(0), operand(1), [](double a, double b) { return a / b; });
    case Op::kAdd: return formula_broadcast(formula, operand(0), operand(1), [](double a, double b) { return a + b; });
    case Op::kSqrt: {
      FormulaValue value = operand(0);
      for (double& element : value.data) element = std::sqrt(element);
      return value;
    }
    case Op::kNormExceptDim:
    case Op::kSumSquaresExceptDim: {
      if (formula.op == Op::kNormExceptDim && formula.power != 2) {
        throw formula_error(formula, "power " + std::to_string(formula.power) + " is not evaluated (2 only)");
      }
      FormulaValue value = operand(0);
      const std::optional<int64_t> dim = detail::except_dim(formula.dim, value.shape.size());
      if (!dim) {
        throw formula_error(formula, "dim " + std::to_string(formula.dim) + " is out of range for shape " +
                                         shape_text(value.shape));
      }
      FormulaValue out{detail::except_dim_shape(value.shape, *dim),
                       detail::sum_squares_except_dim(value.data, value.shape, *dim)};
      if (formula.op == Op::kNormExceptDim) {
        for (double& element : out.data) element = std::sqrt(element);
      }
      return out;
    }
    case Op::kReshape: {
      FormulaValue value = operand(0);
      if (checked_numel(formula.shape) != value.data.size()) {
        throw formula_error(formula, "shape " + shape_text(formula.shape) + " does not hold the " +
                                         std::to_string(value.data.size()) + " elements of shape " +
                                         shape_text(value.shape));
      }
      value.shape = formula.shape;
      return value;
    }
  }
  throw formula_error(formula, "unknown op");
}

void formula_parameters(const Formula& formula, std::vector<std::string>& names) {
  if (formula.op == Formula::Op::kParameter) {
    for (const std::string& name : names) {
      if (name == formula.name) return;
    }
    names.push_back(formula.name);
  }
  for (const Formula& operand : formula.operands) formula_parameters(operand, names);
}

}  // namespace

Formula Formula::parameter(std::string name) {
  Formula formula;
  formula.op = Op::kParameter;
  formula.name = std::move(name);
  return formula;
}

Formula Formula::constant(double value) {
  Formula formula;
  formula.op = Op::kConstant;
  formula.value = value;
  return formula;
}

Formula Formula::mul(Formula a, Formula b) { return formula_of(Op::kMul, {std::move(a), std::move(b)}); }
Formula Formula::div(Formula a, Formula b) { return formula_of(Op::kDiv, {std::move(a), std::move(b)}); }
Formula Formula::add(Formula a, Formula b) { return formula_of(Op::kAdd, {std::move(a), std::move(b)}); }
Formula Formula::sqrt(Formula a) { return formula_of(Op::kSqrt, {std::move(a)}); }

Formula Formula::norm_except_dim(Formula a, int64_t power, int64_t dim) {
  Formula formula = formula_of(Op::kNormExceptDim, {std::move(a)});
  formula.power = power;
  formula.dim = dim;
  return formula;
}

Formula Formula::sum_squares_except_dim(Formula a, int64_t dim) {
  Formula formula = formula_of(Op::kSumSquaresExceptDim, {std::move(a)});
  formula.dim = dim;
  return formula;
}

Formula Formula::reshape(Formula a, Shape shape) {
  Formula formula = formula_of(Op::kReshape, {std::move(a)});
  formula.shape = std::move(shape);
  return formula;
}

std::string_view Formula::op_name(Op op) {
  switch (op) {
    case Op::kParameter: return "param";
    case Op::kConstant: return "const";
    case Op::kMul: return "mul";
    case Op::kDiv: return "div";
    case Op::kAdd: return "add";
    case Op::kSqrt: return "sqrt";
    case Op::kNormExceptDim: return "norm_except_dim";
    case Op::kSumSquaresExceptDim: return "sum_squares_except_dim";
    case Op::kReshape: return "reshape";
  }
  return "unknown";
}

std::string Formula::text() const {
  std::string out;
  formula_text(*this, out);
  return out;
}

std::string Formula::json() const {
  detail::JsonWriter writer;
  formula_json(*this, writer);
  return writer.take();
}

std::vector<std::string> Formula::parameters() const {
  std::vector<std::string> names;
  formula_parameters(*this, names);
  return names;
}

Tensor evaluate(const Formula& formula, const Tree& tree) {
  FormulaValue value = formula_evaluate(formula, tree);
  return Tensor::from_values<double>(DType::kFloat64, std::move(value.shape), std::span<const double>(value.data));
}

}  // namespace ckpt
