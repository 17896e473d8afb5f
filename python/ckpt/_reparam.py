"""Eager re-parameterization of torch modules: a parameter derived from raw
parameters (weight norm's ``w = g * v / ||v||``, or any function), stored
as its raw parameters only and recomputed exactly when one of them changed.

``module.<name>`` becomes a property of a class made for that one module (a
subclass of its own, as torch.nn.utils.parametrize makes one), so that every
read goes through it: in ``forward`` and in any other method. The property
returns the cached derived tensor unless a raw tensor changed since it was
computed (another object, another ``_version``, data, dtype or device), the
cached tensor itself was changed in place, or gradients are wanted and the
cached tensor has none or its graph was used by a backward pass.
docs/weight_norm.md ("Eager re-parameterization") has the details.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from ._formula import formula_function
from ._weight_norm import convert_weight_norm_names, find_weight_norms, unfold_weight_norm

_REPARAMETRIZATIONS = "_ckpt_reparametrizations"  # the module's attribute: name -> Reparametrization
_BASE = "_ckpt_reparametrized_base"  # the made class's attribute: the module's class before


class _RawParameters(nn.Module):
    """A holder of raw parameters under a dotted prefix (such as
    ``parametrizations.weight``), so that state_dict() names them there."""


class Reparametrization:
    """One derived parameter of a module: ``fn(**raw)`` over the module's raw
    tensors. Attributes: ``name`` (the derived attribute's), ``fn``,
    ``raw_names`` (argument name -> the raw tensor's name relative to the
    module, as state_dict() names it), ``inverse`` (or None), ``formula``
    (the derivation as formula JSON for graph backends, or None),
    ``recomputes`` (how often ``fn`` ran). Made by ``reparametrize``."""

    def __init__(self, name: str, fn: Callable[..., torch.Tensor], raw_names: Dict[str, str],
                 inverse: Optional[Callable[[torch.Tensor], Mapping[str, torch.Tensor]]], formula: Any):
        self.name = name
        self.fn = fn
        self.raw_names = raw_names
        self.inverse = inverse
        self.formula = formula
        self.recomputes = 0
        self._cache: Optional[Tuple[torch.Tensor, Tuple[Any, ...], Optional[int], bool]] = None
        self._generation = 0

    def __getstate__(self) -> Dict[str, Any]:
        """A copy (copy.deepcopy of the module, pickling) has no cache: the
        cached tensor may be part of a graph, which does not copy."""
        state = dict(self.__dict__)
        state["_cache"] = None
        return state

    def raw(self, module: nn.Module) -> Dict[str, torch.Tensor]:
        """The raw tensors of ``module``, by argument name."""
        values = {}
        for argument, path in self.raw_names.items():
            owner, _, attribute = path.rpartition(".")
            values[argument] = getattr(module.get_submodule(owner) if owner else module, attribute)
        return values

    def invalidate(self) -> None:
        """Drops the cached tensor: the next read recomputes it."""
        self._cache = None
        self._generation += 1

    def value(self, module: nn.Module) -> torch.Tensor:
        """The derived tensor: the cached one while it is valid, else
        ``fn(**raw)``, computed now and cached."""
        raw = self.raw(module)
        keys = tuple(_raw_key(tensor) for tensor in raw.values())
        grad_wanted = torch.is_grad_enabled() and any(tensor.requires_grad for tensor in raw.values())
        cache = self._cache
        if cache is not None:
            tensor, cached_keys, own_version, with_grad = cache
            if (len(keys) == len(cached_keys) and not (grad_wanted and not with_grad)
                    and own_version == _version_of(tensor)
                    and all(a[0] is b[0] and a[1:] == b[1:] for a, b in zip(keys, cached_keys))):
                return tensor
        self.invalidate()
        derived = self.fn(**raw)
        if not isinstance(derived, torch.Tensor):
            raise TypeError(f"reparametrization {self.name!r}: fn returned {type(derived).__name__}, not a tensor")
        self.recomputes += 1
        if derived.requires_grad:
            # backward() frees the graph it passes through: then a next read must build a new one.
            derived.register_hook(_invalidating_hook(weakref.ref(self), self._generation))
        self._cache = (derived, keys, _version_of(derived), grad_wanted)
        return derived

    def assign(self, module: nn.Module, value: torch.Tensor) -> None:
        """Sets the raw tensors to ``inverse(value)``, in place (no grad)."""
        if self.inverse is None:
            raise AttributeError(f"{self.name!r} is derived from {', '.join(self.raw_names.values())} and has no "
                                 f"inverse: assign the raw parameters instead")
        raw = self.raw(module)
        parts = self.inverse(value)
        if sorted(parts) != sorted(raw):
            raise ValueError(f"reparametrization {self.name!r}: inverse gave {sorted(parts)}, not {sorted(raw)}")
        with torch.no_grad():
            for argument, tensor in raw.items():
                if tuple(parts[argument].shape) != tuple(tensor.shape):
                    raise ValueError(f"reparametrization {self.name!r}: inverse gave {argument} of shape "
                                     f"{tuple(parts[argument].shape)}, not {tuple(tensor.shape)}")
                tensor.copy_(parts[argument])


def _version_of(tensor: torch.Tensor) -> Optional[int]:
    return None if tensor.is_inference() else tensor._version


def _raw_key(tensor: torch.Tensor) -> Tuple[Any, ...]:
    """What says that a raw tensor is unchanged: the object itself, its
    version, data, dtype and device (``.data`` swaps keep the version)."""
    try:
        data = tensor.data_ptr()
    except RuntimeError:  # no storage: torch.func's wrapped tensors (new objects on every call)
        data = None
    return (tensor, _version_of(tensor), data, tensor.dtype, tensor.device)


def _invalidating_hook(entry: "weakref.ref[Reparametrization]", generation: int) -> Callable[[torch.Tensor], None]:
    """A gradient hook on a derived tensor: when backward passes it, the
    tensor's cache entry (if it is still the cached one) is dropped. Holds
    its entry weakly: the entry's cache holds the tensor, which holds this."""
    def hook(grad: torch.Tensor) -> None:
        reparametrization = entry()
        if reparametrization is not None and reparametrization._generation == generation:
            reparametrization.invalidate()
    return hook


def _property(name: str) -> property:
    def get(self: nn.Module) -> torch.Tensor:
        try:
            return self.__dict__[_REPARAMETRIZATIONS][name].value(self)
        except AttributeError as error:  # raised from a property, it would turn into "no attribute 'weight'"
            raise RuntimeError(f"reading {name!r}: {error}") from error

    def assign(self: nn.Module, value: torch.Tensor) -> None:
        self.__dict__[_REPARAMETRIZATIONS][name].assign(self, value)
    return property(get, assign, doc=f"{name}, derived from raw parameters (ckpt.reparametrize)")


def _reparametrized_class(module: nn.Module) -> type:
    """The module's own class, made once per module (torch.nn.utils.parametrize's way)."""
    cls = type(module)
    if _BASE in cls.__dict__:
        return cls
    made = type(f"Reparametrized{cls.__name__}", (cls,), {_BASE: cls, "__module__": cls.__module__})
    module.__class__ = made
    return made


def _holder(module: nn.Module, prefix: str) -> nn.Module:
    """The submodule at dotted ``prefix`` ("" the module), made of
    _RawParameters where missing."""
    owner = module
    for part in prefix.split(".") if prefix else []:
        if part in owner._modules:
            owner = owner._modules[part]
        elif hasattr(owner, part):
            raise ValueError(f"reparametrize: {part!r} of prefix {prefix!r} is taken by a non-module attribute")
        else:
            holder = _RawParameters()
            owner.add_module(part, holder)
            owner = holder
    return owner


def reparametrize(module: nn.Module, name: str, fn: Callable[..., torch.Tensor], raw: Mapping[str, torch.Tensor], *,
                  prefix: Optional[str] = None,
                  inverse: Optional[Callable[[torch.Tensor], Mapping[str, torch.Tensor]]] = None,
                  formula: Any = None) -> nn.Module:
    """Makes ``module.<name>`` a tensor derived from raw tensors, eagerly:
    every read of ``module.<name>`` (in forward or any method) gives
    ``fn(**raw)``, recomputed only when a raw tensor changed since the last
    read (in place: its ``_version``; or replaced: another object, data,
    dtype or device), else the cached tensor. Under grad mode a tensor with
    a graph is computed (and kept until a backward pass goes through it or a
    raw tensor changes); under no_grad one without.

    ``raw``: argument name of ``fn`` -> initial tensor. Each is registered on
    the submodule at ``prefix`` (default ``"parametrizations.<name>"``;
    ``""``: the module itself) under its argument name, so that
    state_dict() holds it as ``<prefix>.<argument>``: an ``nn.Parameter``
    as a parameter, another tensor as a (persistent) buffer. The old
    ``module.<name>`` (a parameter, a buffer or nothing) is removed.
    ``inverse(value)``, if given, maps a tensor assigned to
    ``module.<name>`` to the raw tensors (a dict by argument name), copied
    into them in place; without it assigning raises AttributeError.
    ``formula``: the derivation as formula JSON over the raw tensors'
    state_dict names, for graph backends (checked by formula_function).
    Returns ``module``.

    Raises ValueError for a name or raw name that is no identifier, a name
    that is already derived, a name taken by a
    submodule or another non-tensor attribute, a raw name taken already,
    an empty ``raw``, a module parametrized by torch.nn.utils.parametrize;
    TypeError for a raw value that is no tensor or a non-callable ``fn``."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"reparametrize: module must be a torch.nn.Module, got {type(module).__name__}")
    if not callable(fn):
        raise TypeError("reparametrize: fn must be callable")
    if not raw:
        raise ValueError(f"reparametrize {name!r}: no raw tensors")
    if nn.utils.parametrize.is_parametrized(module):
        raise ValueError("reparametrize: the module is parametrized by torch.nn.utils.parametrize already; "
                         "ckpt's reparametrization does not mix with it")
    entries: Dict[str, Reparametrization] = module.__dict__.get(_REPARAMETRIZATIONS, {})
    if name in entries:
        raise ValueError(f"reparametrize: {name!r} is derived already")
    if name in module._modules or (hasattr(module, name) and name not in module._parameters
                                   and name not in module._buffers):
        raise ValueError(f"reparametrize: {name!r} is taken by a submodule or a non-tensor attribute")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"reparametrize: name {name!r} is no attribute name")
    for argument, tensor in raw.items():
        if not isinstance(argument, str) or not argument.isidentifier():
            raise ValueError(f"reparametrize {name!r}: raw name {argument!r} is no argument name (no dots: "
                             f"prefix= says where the raw tensors go)")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"reparametrize {name!r}: raw {argument!r} is {type(tensor).__name__}, not a tensor")
    if formula is not None:
        formula_function(formula, "torch")  # checked now, not when a backend first needs it
    prefix = f"parametrizations.{name}" if prefix is None else prefix
    raw_names = {argument: f"{prefix}.{argument}" if prefix else argument for argument in raw}
    for argument, path in raw_names.items():
        owner_path, _, attribute = path.rpartition(".")
        try:
            owner = module.get_submodule(owner_path)
        except AttributeError:
            continue
        if hasattr(owner, attribute):  # the derived name itself too: its property would read itself
            raise ValueError(f"reparametrize {name!r}: the raw name {path!r} is taken already")

    module._parameters.pop(name, None)
    module._buffers.pop(name, None)
    module._non_persistent_buffers_set.discard(name)
    owner = _holder(module, prefix)
    for argument, tensor in raw.items():
        if isinstance(tensor, nn.Parameter):
            owner.register_parameter(argument, tensor)
        else:
            owner.register_buffer(argument, tensor)
    entry = Reparametrization(name, fn, raw_names, inverse, formula)
    if _REPARAMETRIZATIONS not in module.__dict__:
        module.__dict__[_REPARAMETRIZATIONS] = entries
    entries[name] = entry
    setattr(_reparametrized_class(module), name, _property(name))
    return module


def reparametrizations(module: nn.Module) -> Dict[str, Reparametrization]:
    """The derived parameters of ``module`` (not of its submodules), by name;
    empty for a module without any."""
    return dict(module.__dict__.get(_REPARAMETRIZATIONS, {}))


def _weight_norm_raw_names(name: str, names: str) -> Tuple[str, str]:
    """The (g, v) names of weight-normed ``name`` under naming ``names``, as
    ckpt's converters name them (their rule, not a copy of it)."""
    probe = unfold_weight_norm({name: torch.ones(1, 1)}, dim=0, names=names, params=[name])
    [found] = find_weight_norms(probe, names=names)
    return found["g"], found["v"]


def _weight_norm_dim(dim: Optional[int], weight: torch.Tensor, name: str) -> int:
    """torch's dim: None -> -1 (one norm over all), others as given."""
    if dim is None:
        return -1
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ValueError(f"weight_norm {name!r}: dim must be an integer or None, got {dim!r}")
    if dim != -1 and not -weight.dim() <= dim < weight.dim():
        raise ValueError(f"weight_norm {name!r}: dim {dim} out of range for a weight of shape {tuple(weight.shape)}")
    return dim


def _other_naming_hook(name: str, g_name: str, v_name: str, names: str) -> Callable[..., None]:
    """A load_state_dict pre-hook: a state dict holding ``name``'s g and v
    under another naming (say torch.nn.utils.weight_norm's ``weight_g`` for
    a module of new names) has them renamed to ours (convert_weight_norm_names)."""
    candidates: Dict[str, None] = {}
    for naming in ("old", "new", "returnn_common"):
        candidates.update(dict.fromkeys(_weight_norm_raw_names(name, naming)))

    def hook(state_dict: Dict[str, Any], prefix: str, *args: Any) -> None:
        if prefix + g_name in state_dict or prefix + v_name in state_dict:
            return
        ours = {key[len(prefix):]: value for key, value in state_dict.items()
                if key.startswith(prefix) and key[len(prefix):] in candidates}
        for found in find_weight_norms(ours) if ours else []:
            if found["name"] != name:
                continue
            renamed = convert_weight_norm_names({found["g"]: ours[found["g"]], found["v"]: ours[found["v"]]},
                                                to=names, from_names=found["names"])
            del state_dict[prefix + found["g"]], state_dict[prefix + found["v"]]
            for key, value in renamed.items():
                state_dict[prefix + key] = value
    return hook


def weight_norm(module: nn.Module, name: str = "weight", dim: Optional[int] = 0, names: str = "new") -> nn.Module:
    """Applies weight norm to ``module.<name>`` eagerly (reparametrize):
    raw parameters g = ``torch.norm_except_dim(w, 2, dim)`` and v = w of the
    current weight, as torch initialises them, and ``module.<name>`` =
    ``torch._weight_norm(v, g, dim)`` (torch's own computation, so values and
    gradients equal torch's modules' bit for bit), recomputed when g or v
    changed. ``dim``: the dim whose slices keep a norm of their own; None
    (or -1) one norm over all; other negative values count from the end.
    ``names``: the raw parameters' names, ``"new"`` (torch.nn.utils.
    parametrizations.weight_norm's: ``parametrizations.<name>.original0``
    and ``original1``) or ``"old"`` (torch.nn.utils.weight_norm's:
    ``<name>_g``, ``<name>_v``); state_dict() then holds the keys torch's
    weight-normed module of that naming holds. load_state_dict also takes
    g and v under the other torch naming (or returnn_common's), renamed by
    convert_weight_norm_names. Assigning ``module.<name> = w`` sets g and v
    from w. The Reparametrization's ``formula`` is find_weight_norms'
    formula JSON. Returns ``module``.

    Raises ValueError for a ``module.<name>`` that is no parameter, a dim out
    of range, a naming other than "new" and "old", and what reparametrize
    raises."""
    if isinstance(module, nn.Module) and name in reparametrizations(module):
        raise ValueError(f"weight_norm: {name!r} is derived already")
    if names not in ("new", "old"):
        raise ValueError(f"weight_norm: naming {names!r}: eager weight norm has the namings \"new\" and \"old\"")
    weight = module._parameters.get(name) if isinstance(module, nn.Module) else None
    if weight is None:
        raise ValueError(f"weight_norm: {name!r} is no parameter of the module")
    dim = _weight_norm_dim(dim, weight, name)
    g_path, v_path = _weight_norm_raw_names(name, names)
    prefix, _, g_argument = g_path.rpartition(".")
    v_argument = v_path.rpartition(".")[2]

    def right_inverse(w: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {g_argument: torch.norm_except_dim(w, 2, dim), v_argument: w}

    def derive(**raw: torch.Tensor) -> torch.Tensor:
        return torch._weight_norm(raw[v_argument], raw[g_argument], dim)

    with torch.no_grad():
        initial = right_inverse(weight)
    raw = {argument: nn.Parameter(tensor, weight.requires_grad) for argument, tensor in initial.items()}
    probe = {g_path: raw[g_argument].detach(), v_path: raw[v_argument].detach()}
    [found] = find_weight_norms(probe, names=names)
    reparametrize(module, name, derive, raw, prefix=prefix, inverse=right_inverse, formula=found["formula_json"])
    module._register_load_state_dict_pre_hook(_other_naming_hook(name, g_path, v_path, names))
    return module
