"""Weight norm's checkpoint converters over state dicts (C++: ckpt/weight_norm.h).

A weight-normed parameter is stored as g (magnitude) and v (direction),
``w = g * v / ||v||`` with the norm over every dim of v but ``dim``, under
one of three namings: ``"old"`` (torch.nn.utils.weight_norm: ``X.weight_g``,
``X.weight_v``), ``"new"`` (torch.nn.utils.parametrizations.weight_norm:
``X.parametrizations.weight.original0`` / ``original1``) and
``"returnn_common"`` (``X.weight_normalized.g`` / ``.v``). docs/weight_norm.md
has the details.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _ckpt
from ._framework import framework_of as _framework_of
from ._gc import no_gc as _no_gc

Names = Union[str, Sequence[str]]


def _names_arg(names: Optional[Names]) -> Any:
    if names is None or isinstance(names, str):
        return names
    return list(names)


def find_weight_norms(state: Any, names: Optional[Names] = "auto", dim: Optional[int] = None) -> List[Dict[str, Any]]:
    """The weight-normed parameters of ``state``: for each a dict with
    ``name`` (the plain weight's), ``names`` (its naming), ``g``, ``v`` (the raw
    names), ``dim`` (None: one norm over all of v), ``shape``, ``dtype``, and
    its derivation as a formula (``formula`` text, ``formula_json``).
    ``names``: "auto" (every naming), one naming or a list of them; ``dim``
    says which dim a returnn_common 1-d g means when several dims of v have
    its size. Raises ValueError for a g without its v, a g or v that is not a
    floating-point tensor, a g whose shape does not fit v's."""
    return _ckpt.find_weight_norms(state, _names_arg(names), dim)


def fold_weight_norm(state: Any, names: Optional[Names] = "auto", *, dim: Optional[int] = None) -> Any:
    """``state`` with every weight-normed parameter's g and v replaced by its
    weight ``w = v * (g / ||v||)`` under the plain name (``X.weight``),
    computed in float64 and cast back to the parameters' dtype. Tensors come
    back as torch tensors if ``state`` holds any, else numpy arrays; other
    values are unchanged. ``names`` and ``dim`` as find_weight_norms takes
    them; it raises what find_weight_norms raises, and ValueError if the
    plain name is taken already."""
    with _no_gc():
        return _ckpt.fold_weight_norm(state, _names_arg(names), dim, framework=_framework_of(state))


def unfold_weight_norm(state: Any, dim: Optional[int] = 0, names: str = "new",
                       params: Union[None, str, Sequence[str], Callable[[str], bool]] = None) -> Any:
    """``state`` with weights split into ``g = ||w||`` over every dim but
    ``dim`` and ``v = w``, named by ``names`` ("old", "new" or
    "returnn_common"), g shaped as that naming's framework makes it. ``dim``
    as torch takes it: None or -1 is one norm over the whole weight, other
    negative values count from the end. ``params``: the weights to split, by
    name (a list or one name) or by a predicate on the name; by default every
    floating-point tensor of ndim >= 2 named ``weight`` or ``*.weight``.
    Raises ValueError for a dim out of range, a weight that is not a
    floating-point tensor or a raw name taken already; a name of ``params``
    that ``state`` lacks is ckpt's not-found error, which the package maps
    to FileNotFoundError (its message names the parameter)."""
    with _no_gc():
        return _ckpt.unfold_weight_norm(state, dim, names, params, framework=_framework_of(state))


def convert_weight_norm_names(state: Any, to: str = "new", *, from_names: Optional[str] = "auto") -> Any:
    """``state`` with every weight-normed parameter (of naming ``from_names``;
    "auto": any) renamed to naming ``to``; values unchanged, g reshaped
    between torch's shape and returnn_common's 1-d one where the naming
    changes. Raises what find_weight_norms raises, and ValueError if a new
    name is taken already."""
    with _no_gc():
        return _ckpt.convert_weight_norm_names(state, to, from_names, framework=_framework_of(state))
