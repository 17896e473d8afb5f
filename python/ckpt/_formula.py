"""Formulas as functions for graph backends (C++: ckpt/formula.h).

A formula is a derived parameter written as a small tree of named ops over
raw parameter names, as ``find_weight_norms`` gives it in ``formula_json``:

    {"op": "mul", "args": [{"op": "param", "name": "w_v"},
                           {"op": "div", "args": [{"op": "param", "name": "w_g"},
                                                  {"op": "norm_except_dim", "p": 2, "dim": 0,
                                                   "args": [{"op": "param", "name": "w_v"}]}]}]}

``formula_function`` checks the tree once and turns it into a plain Python
function of numpy, jax or torch operations, which a backend traces once
(``jax.jit``) or calls. docs/weight_norm.md ("Formulas") has the ops.
"""

from __future__ import annotations

import json
import numbers
from typing import Any, Callable, Dict, Mapping, Tuple, Union

Formula = Union[str, Mapping[str, Any]]
Evaluate = Callable[[Mapping[str, Any]], Any]

# op -> (operand count, the op's own fields besides "op" and "args")
_OPS: Dict[str, Tuple[int, Tuple[str, ...]]] = {
    "param": (0, ("name",)),
    "const": (0, ("value",)),
    "mul": (2, ()),
    "div": (2, ()),
    "add": (2, ()),
    "sqrt": (1, ()),
    "norm_except_dim": (1, ("p", "dim")),
    "sum_squares_except_dim": (1, ("dim",)),
    "reshape": (1, ("shape",)),
}


class _Backend:
    """The array operations of one framework, as the ops need them."""

    def __init__(self, name: str):
        self.name = name
        if name == "numpy":
            import numpy as xp
        elif name == "jax":
            import jax.numpy as xp
        elif name == "torch":
            import torch as xp
        else:
            raise ValueError(f"formula_function: unknown backend {name!r} (numpy, jax or torch)")
        self.xp = xp

    def sqrt(self, x: Any) -> Any:
        return self.xp.sqrt(x)

    def reshape(self, x: Any, shape: Tuple[int, ...]) -> Any:
        return x.reshape(shape)

    def sum_squares_except_dim(self, x: Any, dim: int) -> Any:
        """Sums of squares over every dim of x but ``dim`` (kept, the others
        size 1), or over all of x (0-d) for dim -1, as torch's
        norm_except_dim reduces."""
        ndim = len(x.shape)
        if dim == -1:
            axes = tuple(range(ndim))
            keep = False
        else:
            if not -ndim <= dim < ndim:
                raise ValueError(f"formula: dim {dim} out of range for a tensor of shape {tuple(x.shape)}")
            dim %= ndim
            axes = tuple(axis for axis in range(ndim) if axis != dim)
            keep = True
        squares = x * x
        if not axes:
            return squares
        if self.name == "torch":
            return squares.sum(dim=axes, keepdim=keep)
        return squares.sum(axis=axes, keepdims=keep)


def _path_text(path: str) -> str:
    return path or "the root"


def _build(node: Any, path: str, backend: _Backend) -> Evaluate:
    """Checks ``node`` (at ``path``, e.g. ``args[1].args[0]``) and returns its
    evaluation as a function of the raw tensors."""
    if not isinstance(node, Mapping):
        raise ValueError(f"formula: {_path_text(path)} is no op (a JSON object), got {type(node).__name__}")
    op = node.get("op")
    if not isinstance(op, str):
        raise ValueError(f"formula: {_path_text(path)} has no \"op\" (a string)")
    if op not in _OPS:
        raise ValueError(f"formula: unknown op {op!r} at {_path_text(path)} (known: {', '.join(_OPS)})")
    arity, fields = _OPS[op]
    where = f"{op} at {_path_text(path)}"
    for field in fields:
        if field not in node:
            raise ValueError(f"formula: {where} lacks \"{field}\"")
    args = node.get("args", [])
    if not isinstance(args, list) or len(args) != arity:
        count = len(args) if isinstance(args, list) else "no list of"
        raise ValueError(f"formula: {where} takes {arity} operand{'' if arity == 1 else 's'} in \"args\", got {count}")
    operands = [_build(arg, f"{path}.args[{i}]" if path else f"args[{i}]", backend) for i, arg in enumerate(args)]

    if op == "param":
        name = node["name"]
        if not isinstance(name, str):
            raise ValueError(f"formula: {where}: \"name\" is no string")

        def parameter(raw: Mapping[str, Any]) -> Any:
            if name not in raw:
                raise ValueError(f"formula: no raw parameter {name!r} (given: {', '.join(map(repr, raw)) or 'none'})")
            return raw[name]
        return parameter
    if op == "const":
        value = node["value"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"formula: {where}: \"value\" is no number")
        value = float(value)
        return lambda raw: value
    if op in ("mul", "div", "add"):
        a, b = operands
        if op == "mul":
            return lambda raw: a(raw) * b(raw)
        if op == "div":
            return lambda raw: a(raw) / b(raw)
        return lambda raw: a(raw) + b(raw)
    (x,) = operands
    if op == "sqrt":
        return lambda raw: backend.sqrt(x(raw))
    if op == "reshape":
        shape = node["shape"]
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                  for s in shape):
            raise ValueError(f"formula: {where}: \"shape\" is no list of sizes")
        shape = tuple(shape)
        return lambda raw: backend.reshape(x(raw), shape)
    dim = node["dim"]
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"formula: {where}: \"dim\" is no integer")
    if op == "sum_squares_except_dim":
        return lambda raw: backend.sum_squares_except_dim(x(raw), dim)
    if node["p"] != 2 or isinstance(node["p"], bool):
        raise ValueError(f"formula: {where}: only p = 2 is evaluated, got {node['p']!r}")
    return lambda raw: backend.sqrt(backend.sum_squares_except_dim(x(raw), dim))


def formula_function(formula: Formula, backend: str = "numpy") -> Callable[[Mapping[str, Any]], Any]:
    """A function ``f(raw)`` computing ``formula`` over ``raw``, a mapping of
    raw parameter names to arrays of ``backend`` ("numpy", "jax" or
    "torch"). ``formula``: the JSON text ``find_weight_norms`` gives as
    ``formula_json``, or that JSON parsed (a dict). The tree is checked and
    turned into backend operations once, here; ``f`` only computes, in the
    arrays' own dtype (``mul``, ``div``, ``add`` broadcast as the backend
    does), so it can be traced (``jax.jit(f)``).

    Raises ValueError for text that is no JSON, an unknown op, an op without
    the args or fields it needs (the message names the op and its path in the
    tree, e.g. ``args[1].args[0]``), an unknown backend. ``f`` raises
    ValueError naming a raw parameter that ``raw`` lacks, or a dim out of
    range for its operand."""
    chosen = _Backend(backend)
    if isinstance(formula, (str, bytes)):
        try:
            formula = json.loads(formula)
        except json.JSONDecodeError as error:
            raise ValueError(f"formula: no JSON: {error}") from None
    evaluate = _build(formula, "", chosen)

    def function(raw: Mapping[str, Any]) -> Any:
        return evaluate(raw)
    function.__doc__ = f"The formula over raw parameters ({backend})."
    return function

