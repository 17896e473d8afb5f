"""Restore: fill a target (a torch ``nn.Module``, a nest of arrays, a
dataclass, a NamedTuple, a ``flax.struct.dataclass`` such as a Flax
``TrainState``) from a checkpoint, with one structured report.

The matching itself (names, shapes, dtypes, casts, renames, defaults) is
ckpt's C++ ``restore`` (include/ckpt/restore.h). This module turns Python
structures into plain nests named as Flax names them (dataclass and
NamedTuple fields by field name, tuples and lists by position), and puts the
restored leaves back into the target's own structure and leaf types."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import os
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _ckpt

__all__ = ["KEEP", "TensorSpec", "RestoreReport", "field", "restore", "to_nest", "rename_steps"]


class _Keep:
    """A restore default that keeps the target's current value (a new layer
    keeps its initialization): ``defaults={"head": ckpt.KEEP}``."""

    def __repr__(self) -> str:
        return "ckpt.KEEP"


KEEP = _Keep()

_MARKER = "ckpt_default"
_NO_DEFAULT = object()


def field(*, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING,
          metadata: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> Any:
    """A dataclass field that is optional on restore: when a checkpoint lacks it
    (it was written before the field existed), ``ckpt.restore`` gives it its
    default (``default``, or ``default_factory()``; with neither, the target's
    current value) and reports it as ``defaulted``, in strict mode too.

    Works in ``dataclasses.dataclass`` and ``flax.struct.dataclass`` classes
    (other keyword arguments, e.g. ``pytree_node``, go to the field)::

        class TrainState(flax.training.train_state.TrainState):
            ema_params: Any = ckpt.field(default=None)
    """
    meta = dict(metadata or {})
    if "pytree_node" in kwargs:
        meta["pytree_node"] = kwargs.pop("pytree_node")
    if default is not dataclasses.MISSING:
        meta[_MARKER] = ("value", default)
    elif default_factory is not dataclasses.MISSING:
        meta[_MARKER] = ("factory", default_factory)
    else:
        meta[_MARKER] = ("keep", None)
    return dataclasses.field(default=default, default_factory=default_factory, metadata=meta, **kwargs)


class TensorSpec:
    """A target leaf that gives only a shape and a dtype (what
    ``jax.ShapeDtypeStruct`` and torch meta tensors become)."""

    __ckpt_spec__ = True
    __slots__ = ("shape", "dtype", "original")

    def __init__(self, shape: Sequence[int], dtype: Any, original: Any = None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = _dtype_name(dtype)
        self.original = original

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype='{self.dtype}')"


class RestoreReport:
    """What a restore did. Each list holds entry names (dotted, as the target
    names them; ``unexpected`` as the checkpoint names them after renaming):

    - ``restored``: filled from the checkpoint (``cast`` ones included);
    - ``missing``: in the target, not in the checkpoint, no default;
    - ``unexpected``: in the checkpoint, not in the target;
    - ``shape_mismatched`` / ``dtype_mismatched``: skipped, the target keeps
      its value (``details`` says what each side has);
    - ``defaulted``: missing, given its declared default;
    - ``cast``: restored through a dtype conversion.

    ``tree`` is the restored state: a new nest of the target's kind, or the
    module itself (filled in place)."""

    _FIELDS = ("restored", "missing", "unexpected", "shape_mismatched", "dtype_mismatched", "defaulted", "cast")

    def __init__(self, lists: Mapping[str, Any], tree: Any = None):
        for name in self._FIELDS:
            setattr(self, name, list(lists.get(name, ())))
        self.details: List[str] = list(lists.get("details", ()))
        self.summary: str = lists.get("summary", "")
        self.tree = tree

    @property
    def ok(self) -> bool:
        """True if nothing is missing, unexpected or mismatched."""
        return not (self.missing or self.unexpected or self.shape_mismatched or self.dtype_mismatched)

    def __iter__(self):
        # Unpacks like load_state_dict's result: missing, unexpected.
        return iter((self.missing, self.unexpected))

    def __repr__(self) -> str:
        counts = ", ".join(f"{name}={len(getattr(self, name))}" for name in self._FIELDS)
        return f"RestoreReport({counts})"

    def __str__(self) -> str:
        return self.summary or f"restored {len(self.restored)} entries"


# ------------------------------------------------------------------ leaves

def _module(name: str) -> Any:
    return sys.modules.get(name)


def _dtype_name(dtype: Any) -> str:
    torch = _module("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    import numpy as np

    return np.dtype(dtype).name


def _is_torch(value: Any) -> bool:
    torch = _module("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _is_jax(value: Any) -> bool:
    jax = _module("jax")
    return jax is not None and isinstance(value, jax.Array)


def _is_shape_dtype_struct(value: Any) -> bool:
    jax = _module("jax")
    return jax is not None and isinstance(value, jax.ShapeDtypeStruct)


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _pytree_fields(value: Any) -> List[dataclasses.Field]:
    # flax.struct fields with pytree_node=False (apply_fn, tx) are not state.
    return [f for f in dataclasses.fields(value) if f.metadata.get("pytree_node", True)]


def _is_module(value: Any) -> bool:
    torch = _module("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def _leaf_in(value: Any, for_target: bool) -> Any:
    """A leaf as the C++ side takes it."""
    import numpy as np

    if _is_torch(value):
        if for_target and value.device.type == "meta":
            return TensorSpec(value.shape, value.dtype, value)
        return value
    if _is_jax(value):
        return np.asarray(value)
    if _is_shape_dtype_struct(value):
        return TensorSpec(value.shape, value.dtype, value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def to_nest(value: Any, *, _name: str = "", _markers: Optional[list] = None, _target: bool = False,
            _depth: int = 0) -> Any:
    """``value`` as plain dicts, lists and leaves: dataclasses (flax structs
    too, without their static fields) and NamedTuples become dicts by field
    name, tuples lists, jax arrays numpy arrays. Used for saving such state
    and for restore targets."""
    if _depth > 512:
        raise ValueError(f"state nested deeper than 512 levels (or a cycle) at '{_name}'")

    def child(key: Any) -> str:
        return f"{_name}.{key}" if _name else str(key)

    if isinstance(value, Mapping):
        return {k: to_nest(v, _name=child(k), _markers=_markers, _target=_target, _depth=_depth + 1)
                for k, v in value.items()}
    if _is_namedtuple(value):
        return {k: to_nest(getattr(value, k), _name=child(k), _markers=_markers, _target=_target,
                           _depth=_depth + 1) for k in type(value)._fields}
    if isinstance(value, (list, tuple)):
        return [to_nest(v, _name=child(i), _markers=_markers, _target=_target, _depth=_depth + 1)
                for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in _pytree_fields(value):
            name = child(f.name)
            if _markers is not None and _MARKER in f.metadata:
                _markers.append((name, f.metadata[_MARKER]))
            out[f.name] = to_nest(getattr(value, f.name), _name=name, _markers=_markers, _target=_target,
                                  _depth=_depth + 1)
        return out
    return _leaf_in(value, _target)


# ------------------------------------------------------------------ rebuild

def _as_numpy(value: Any) -> Any:
    import numpy as np

    if _is_torch(value):
        torch = _module("torch")
        bits = {torch.bfloat16: (torch.int16, "bfloat16"), torch.float8_e4m3fn: (torch.uint8, "float8_e4m3fn"),
                torch.float8_e5m2: (torch.uint8, "float8_e5m2"),
                torch.float8_e4m3fnuz: (torch.uint8, "float8_e4m3fnuz"),
                torch.float8_e5m2fnuz: (torch.uint8, "float8_e5m2fnuz"),
                torch.float8_e8m0fnu: (torch.uint8, "float8_e8m0fnu")}
        if value.dtype == torch.float4_e2m1fn_x2:  # packed pairs: numpy has no such dtype, only the bytes
            return value.view(torch.uint8).numpy()
        if value.dtype in bits:
            import ml_dtypes

            as_int, name = bits[value.dtype]
            return value.view(as_int).numpy().view(getattr(ml_dtypes, name))
        return value.numpy()
    return np.asarray(value)


def _as_torch(value: Any) -> Any:
    torch = _module("torch")
    if _is_torch(value):
        return value
    return _ckpt_torch(_as_numpy(value))


def _ckpt_torch(array: Any) -> Any:
    import warnings

    import numpy as np

    torch = _module("torch")
    bits = {"bfloat16": (np.int16, torch.bfloat16), "float8_e4m3fn": (np.uint8, torch.float8_e4m3fn),
            "float8_e5m2": (np.uint8, torch.float8_e5m2), "float8_e4m3fnuz": (np.uint8, torch.float8_e4m3fnuz),
            "float8_e5m2fnuz": (np.uint8, torch.float8_e5m2fnuz),
            "float8_e8m0fnu": (np.uint8, torch.float8_e8m0fnu)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only views of a file's private mapping
        if array.dtype.name in bits:
            as_int, dtype = bits[array.dtype.name]
            return torch.from_numpy(array.view(as_int)).view(dtype)
        return torch.from_numpy(array)


def _like(target: Any, value: Any) -> Any:
    """The restored ``value`` in the kind of leaf the target had."""
    import numpy as np

    if _is_torch(target):
        result = _as_torch(value)
        if target.device.type not in ("cpu", "meta"):
            result = result.to(target.device)
        torch = _module("torch")
        if isinstance(target, torch.nn.Parameter):
            result = torch.nn.Parameter(result, requires_grad=target.requires_grad)
        return result
    if _is_jax(target) or _is_shape_dtype_struct(target):
        import jax

        sharding = getattr(target, "sharding", None)
        return jax.device_put(_as_numpy(value), sharding) if sharding is not None else jax.numpy.asarray(
            _as_numpy(value))
    if isinstance(target, np.ndarray):
        return _as_numpy(value)
    if isinstance(target, np.generic):
        return _as_numpy(value)[()]
    return value


def _rebuild(target: Any, name: str, changed: Mapping[str, Any], depth: int = 0) -> Any:
    def child(key: Any) -> str:
        return f"{name}.{key}" if name else str(key)

    if name in changed:
        return changed[name](target)
    if isinstance(target, Mapping):
        items = [(k, _rebuild(v, child(k), changed, depth + 1)) for k, v in target.items()]
        try:
            return type(target)(items)
        except TypeError:
            return dict(items)
    if _is_namedtuple(target):
        return type(target)(*[_rebuild(getattr(target, k), child(k), changed, depth + 1)
                              for k in type(target)._fields])
    if isinstance(target, (list, tuple)):
        items = [_rebuild(v, child(i), changed, depth + 1) for i, v in enumerate(target)]
        return type(target)(items) if type(target) in (list, tuple) else type(target)(*items)
    if dataclasses.is_dataclass(target) and not isinstance(target, type):
        result = copy.copy(target)
        for f in _pytree_fields(target):
            object.__setattr__(result, f.name, _rebuild(getattr(target, f.name), child(f.name), changed, depth + 1))
        return result
    return target


# ------------------------------------------------------------------ defaults

def _covers(pattern: str, name: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern == "" or name == pattern or name.startswith(pattern + ".")


def _navigate(value: Any, relative: str) -> Any:
    for part in relative.split(".") if relative else ():
        if isinstance(value, Mapping):
            if part in value:
                value = value[part]
            elif part.lstrip("-").isdigit() and int(part) in value:
                value = value[int(part)]
            else:
                raise KeyError(part)
        elif _is_namedtuple(value) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            value = getattr(value, part)
        elif isinstance(value, (list, tuple)):
            value = value[int(part)]
        else:
            raise KeyError(part)
    return value


class _Defaults:
    """Declared defaults, in order: the ``defaults=`` argument, then field
    markers. Each value is computed once, when a leaf needs it."""

    def __init__(self, declared: List[Tuple[str, Tuple[str, Any]]]):
        self.declared = declared
        self.cache: Dict[int, Any] = {}

    def patterns(self) -> List[str]:
        return [pattern for pattern, _ in self.declared]

    def whole_fields(self, defaulted: List[str], leaves: List[str]) -> Dict[str, Any]:
        """Declared names (not globs) with a value whose every leaf was
        defaulted: the field takes the whole default value (``None`` in place
        of a dict of arrays, say), not leaf by leaf."""
        out: Dict[str, Any] = {}
        done = set(defaulted)
        for index, (pattern, (kind, payload)) in enumerate(self.declared):
            if kind == "keep" or any(c in pattern for c in "*?[") or pattern in out:
                continue
            under = [n for n in leaves if _covers(pattern, n)]
            if not under or any(n not in done for n in under) or any(_covers(p, pattern) for p in out):
                continue
            if index not in self.cache:
                self.cache[index] = payload() if kind == "factory" else payload
            out[pattern] = self.cache[index]
        return out

    def resolve(self, name: str) -> Tuple[bool, Any]:
        """(keep, value) for the defaulted leaf ``name``."""
        for index, (pattern, (kind, payload)) in enumerate(self.declared):
            if not _covers(pattern, name):
                continue
            if kind == "keep":
                return True, None
            if index not in self.cache:
                self.cache[index] = payload() if kind == "factory" else payload
            glob = any(c in pattern for c in "*?[")
            relative = "" if glob or name == pattern else name[len(pattern) + 1 if pattern else 0:]
            try:
                return False, _navigate(self.cache[index], relative)
            except (KeyError, IndexError, AttributeError, ValueError):
                raise ValueError(f"the default declared for '{pattern}' has no '{relative}' for '{name}'") from None
        return True, None


def _leaf_names(nest: Any, name: str = "") -> List[str]:
    """The dotted names of a nest's leaves, as the C++ side names them."""
    if isinstance(nest, Mapping):
        if not nest:
            return []
        return [n for k, v in nest.items() for n in _leaf_names(v, f"{name}.{k}" if name else str(k))]
    if isinstance(nest, list):
        return [n for i, v in enumerate(nest) for n in _leaf_names(v, f"{name}.{i}" if name else str(i))]
    return [name]


def _declared_defaults(defaults: Any) -> List[Tuple[str, Tuple[str, Any]]]:
    if defaults is None:
        return []
    if isinstance(defaults, str):
        defaults = [defaults]
    if not isinstance(defaults, Mapping):
        return [(str(pattern), ("keep", None)) for pattern in defaults]
    out = []
    for pattern, value in defaults.items():
        if value is KEEP:
            out.append((str(pattern), ("keep", None)))
        elif callable(value) and not _is_torch(value) and not hasattr(value, "__array__"):
            out.append((str(pattern), ("factory", value)))
        else:
            out.append((str(pattern), ("value", value)))
    return out


# ------------------------------------------------------------------ options

_TAGS = ("prefix", "regex", "table", "drop", "add_prefix", "strip_prefix")


def rename_steps(rename: Any) -> Optional[list]:
    """``rename=`` as the C++ side takes it: a dict is prefix mappings in
    order; a list holds steps, each ``(old, new)`` (a prefix mapping, unless
    ``old`` is one of the tags below: then use the dict form) or a tagged
    tuple: ``("prefix", old, new)``, ``("regex", pattern,
    replacement)``, ``("table", {old: new})``, ``("drop", glob)``,
    ``("add_prefix", p)``, ``("strip_prefix", p)``."""
    if rename is None:
        return None
    if isinstance(rename, Mapping):
        return [("prefix", str(old), str(new)) for old, new in rename.items()]
    steps = []
    for step in rename:
        if (isinstance(step, tuple) and len(step) == 2 and all(isinstance(s, str) for s in step)
                and step[0] not in _TAGS):
            steps.append(("prefix", step[0], step[1]))
        else:
            steps.append(tuple(step) if isinstance(step, (list, tuple)) else step)
    return steps


def _cast_options(cast: Any) -> Tuple[bool, list]:
    if cast is None or cast is False:
        return False, []
    if cast is True:
        return True, []
    pairs = cast.items() if isinstance(cast, Mapping) else cast
    return True, [(_dtype_name(a), _dtype_name(b)) for a, b in pairs]


def _source(source: Any) -> Any:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if hasattr(source, "_handle") and isinstance(getattr(source, "path", None), str):  # an open ckpt.Checkpoint
        return source.path
    return to_nest(source)


def _has_torch_leaf(nest: Any) -> bool:
    if _is_torch(nest):
        return True
    if isinstance(nest, Mapping):
        return any(_has_torch_leaf(v) for v in nest.values())
    if isinstance(nest, (list, tuple)):
        return any(_has_torch_leaf(v) for v in nest)
    return False


def restore(target: Any, source: Any, *, strict: bool = True, defaults: Any = None,
            cast: Union[bool, Mapping[Any, Any], Iterable[Tuple[Any, Any]], None] = False,
            prefix: Optional[str] = None, only: Union[str, Sequence[str], None] = None, rename: Any = None,
            framework: str = "numpy") -> RestoreReport:
    """Fills ``target`` from ``source`` (a path, an open checkpoint or a
    loaded nest) and returns a :class:`RestoreReport`.

    ``target`` is a torch ``nn.Module`` (filled in place, like
    ``load_state_dict``), or a nest of dicts, lists, tuples, NamedTuples,
    dataclasses and ``flax.struct`` dataclasses whose leaves are numpy, torch
    or jax arrays, ``jax.ShapeDtypeStruct`` specs or Python scalars (then
    ``report.tree`` is a new nest of the same kind), or None: the checkpoint
    as loaded (in ``framework``'s arrays).

    - ``strict``: any missing, unexpected, shape- or dtype-mismatched entry
      raises :class:`ckpt.MismatchError` listing them all (``e.report``);
      with False they are skipped and reported. A shape mismatch is never
      applied, even partly.
    - ``defaults``: optional entries, a dict of name (a leaf or a subtree),
      or glob, to a value, a zero-argument callable, or ``ckpt.KEEP`` (keep
      the target's value); a list of names means KEEP for each. Dataclass
      fields declared with :func:`ckpt.field` are optional too.
    - ``cast``: True converts any dtype to the target's; a dict or pairs
      ``{"float32": "bfloat16"}`` only those.
    - ``prefix`` / ``only``: restore only the entries under a name, or
      matching globs; the rest of the target is left alone and unreported.
    - ``rename``: applied to the checkpoint's names first (see
      :func:`rename_steps`)."""
    cast_any, casts = _cast_options(cast)
    only_list = [only] if isinstance(only, str) else list(only or ())
    common = dict(strict=strict, cast=cast_any, casts=casts, prefix=prefix or "", only=only_list,
                  rename=rename_steps(rename))
    src = _source(source)
    if target is None:
        result = _ckpt.restore(None, src, defaults=[], framework=framework, **common)
        return RestoreReport(result, result["tree"])

    module = target if _is_module(target) else None
    markers: list = []
    if module is not None:
        state = module.state_dict(keep_vars=True)
        nest = {name: _leaf_in(value, True) for name, value in state.items()}
    else:
        nest = to_nest(target, _markers=markers, _target=True)
    declared = _Defaults(_declared_defaults(defaults) + markers)
    fw = "torch" if module is not None or _has_torch_leaf(nest) else "numpy"
    try:
        result = _ckpt.restore(nest, src, defaults=declared.patterns(), framework=fw, **common)
    except Exception as error:  # MismatchError: the report as an object
        if isinstance(getattr(error, "report", None), Mapping):
            error.report = RestoreReport(error.report)
        raise
    report = RestoreReport(result)
    values: Dict[str, Any] = result["values"]
    defaulted = {}
    whole = declared.whole_fields(report.defaulted, _leaf_names(nest)) if module is None else {}
    for name in report.defaulted:
        if any(_covers(field, name) for field in whole):
            continue  # the whole field takes its default at once
        keep, value = declared.resolve(name)
        if not keep:
            defaulted[name] = value

    if module is not None:
        torch = _module("torch")
        with torch.no_grad():
            for name, value in values.items():
                state[name].copy_(_as_torch(value))
            for name, value in defaulted.items():
                state[name].copy_(torch.as_tensor(_as_numpy(value) if not _is_torch(value) else value))
        report.tree = module
        return report

    changed: Dict[str, Callable[[Any], Any]] = {}
    for name, value in values.items():
        changed[name] = lambda old, value=value: _like(old, value)
    for name, value in whole.items():
        changed[name] = lambda old, value=value: value
    for name, value in defaulted.items():
        changed.setdefault(name, lambda old, value=value: value)
    report.tree = _rebuild(target, "", changed)
    return report
