"""Restore: fill a target (a torch ``nn.Module``, a nest of arrays, a
dataclass, a NamedTuple, a ``flax.struct.dataclass`` such as a Flax
``TrainState``) from a checkpoint, with one structured report.

The matching itself (names, shapes, dtypes, casts, renames, defaults and
their values) is ckpt's C++ ``restore`` (include/ckpt/restore.h). This module
turns Python structures into plain nests keyed as Flax keys them (dataclass
and NamedTuple fields by field name, tuples and lists by position), and puts
what the C++ side filled back into the target's own structure and leaf types,
by key path (never by dotted name)."""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

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
        if for_target and value.device.type != "cpu":
            # meta tensors; tensors on an accelerator, never copied to the host only to be compared
            return TensorSpec(value.shape, value.dtype, value)
        return value
    if _is_jax(value):
        return np.asarray(value)
    if _is_shape_dtype_struct(value):
        return TensorSpec(value.shape, value.dtype, value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def to_nest(value: Any, *, _path: Tuple[Any, ...] = (), _markers: Optional[list] = None, _target: bool = False,
            _depth: int = 0) -> Any:
    """``value`` as plain dicts, lists and leaves: dataclasses (flax structs
    too, without their static fields) and NamedTuples become dicts by field
    name, tuples lists, jax arrays numpy arrays. Used for saving such state,
    for restore targets and for restore defaults."""
    if _depth > 512:
        where = ".".join(str(key) for key in _path)  # for the message only
        raise ValueError(f"state nested deeper than 512 levels (or a cycle) at '{where}'")

    def nest(child: Any, key: Any) -> Any:
        return to_nest(child, _path=_path + (key,), _markers=_markers, _target=_target, _depth=_depth + 1)

    if isinstance(value, Mapping):
        return {k: nest(v, k) for k, v in value.items()}
    if _is_namedtuple(value):
        return {k: nest(getattr(value, k), k) for k in type(value)._fields}
    if isinstance(value, (list, tuple)):
        return [nest(v, i) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in _pytree_fields(value):
            if _markers is not None and _MARKER in f.metadata:
                kind, payload = f.metadata[_MARKER]
                _markers.append((_path + (f.name,), kind, payload))  # declared by key path
            out[f.name] = nest(getattr(value, f.name), f.name)
        return out
    return _leaf_in(value, _target)


# ------------------------------------------------------------------ rebuild

def _as_numpy(value: Any) -> Any:
    """``value`` as a numpy array; a torch tensor viewed, not copied (bfloat16
    and float8 as ml_dtypes arrays, by the C++ side's dtype table)."""
    if _is_torch(value):
        return _ckpt.as_framework(value, "numpy")
    import numpy as np

    return np.asarray(value)


def _as_torch(value: Any) -> Any:
    """``value`` as a torch tensor over the same memory where it can be."""
    if _is_torch(value):
        return value
    return _ckpt.as_framework(_as_numpy(value), "torch")


def _like(target: Any, value: Any, deferred: Optional[list] = None, name: str = "") -> Any:
    """The restored array ``value`` in the kind of leaf the target had
    (anything else as it is). A host value for a torch target on an
    accelerator becomes an empty tensor there, and ``(name, value, that
    tensor)`` goes to ``deferred`` (filled through the pinned ring
    afterwards, docs/gpu.md); without ``deferred``, ``.to(device)``."""
    import numpy as np

    if not isinstance(value, np.ndarray) and not _is_torch(value):
        return value
    if _is_torch(target):
        result = _as_torch(value)
        if target.device.type not in ("cpu", "meta"):
            if deferred is not None and result.device.type == "cpu":
                host = result
                result = _module("torch").empty(tuple(host.shape), dtype=host.dtype, device=target.device)
                deferred.append((name, host, result))
            else:
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


_HERE = object()  # in a trie of key paths: what goes at this node


def _trie(filled: Iterable[Tuple[Sequence[Any], Any, bool]], deferred: Optional[list] = None) -> Dict[Any, Any]:
    """The C++ side's filled parts, (key path, value, given), as a trie of
    keys whose nodes hold under ``_HERE`` how to fill the target there: a
    given object (a default exactly as the caller wrote it) as it is, a
    value from the tree in the kind of leaf the target has (``deferred``:
    see :func:`_like`)."""
    root: Dict[Any, Any] = {}
    for path, value, given in filled:
        node = root
        for key in path:
            node = node.setdefault(key, {})
        name = ".".join(str(key) for key in path)  # for the ring's pieces only
        node[_HERE] = (lambda old, value=value: value) if given else (
            lambda old, value=value, name=name: _like(old, value, deferred, name))
    return root


_NOTHING: Dict[Any, Any] = {}


def _rebuild(target: Any, places: Mapping[Any, Any]) -> Any:
    """A new nest of ``target``'s types with ``places`` (a :func:`_trie`)
    filled in; the keys of ``places`` are those of :func:`to_nest`: dict keys,
    field names, positions."""
    if _HERE in places:
        return places[_HERE](target)

    def sub(child: Any, key: Any) -> Any:
        return _rebuild(child, places.get(key, _NOTHING))

    if isinstance(target, Mapping):
        items = [(k, sub(v, k)) for k, v in target.items()]
        try:
            return type(target)(items)
        except TypeError:
            return dict(items)
    if _is_namedtuple(target):
        return type(target)(*[sub(getattr(target, k), k) for k in type(target)._fields])
    if isinstance(target, (list, tuple)):
        items = [sub(v, i) for i, v in enumerate(target)]
        return type(target)(items) if type(target) in (list, tuple) else type(target)(*items)
    if dataclasses.is_dataclass(target) and not isinstance(target, type):
        result = copy.copy(target)
        for f in _pytree_fields(target):
            object.__setattr__(result, f.name, sub(getattr(target, f.name), f.name))
        return result
    return target


# ------------------------------------------------------------------ defaults

def _declared_defaults(defaults: Any) -> List[Tuple[str, str, Any]]:
    """``defaults=`` as the C++ side takes it: (name or glob, kind, payload),
    kind "keep", "value" (payload: the value) or "factory" (payload: a
    zero-argument callable)."""
    if defaults is None:
        return []
    if isinstance(defaults, str):
        defaults = [defaults]
    if not isinstance(defaults, Mapping):
        return [(str(pattern), "keep", None) for pattern in defaults]
    out = []
    for pattern, value in defaults.items():
        if value is KEEP:
            out.append((str(pattern), "keep", None))
        elif callable(value) and not _is_torch(value) and not hasattr(value, "__array__"):
            out.append((str(pattern), "factory", value))
        else:
            out.append((str(pattern), "value", value))
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
            framework: str = "numpy", sha256: Optional[str] = None, offline: Optional[bool] = None) -> RestoreReport:
    """Fills ``target`` from ``source`` (a path, an http(s) URL, an open
    checkpoint or a loaded nest) and returns a :class:`RestoreReport`.

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
      :func:`rename_steps`).

    A module whose tensors are on a GPU is compared by shape and dtype (its
    tensors are not copied to the host) and filled through the ring of
    pinned host buffers of docs/gpu.md, straight from the mapped file when
    ``source`` is a path.

    A URL is fetched into the cache first (``ckpt.fetch``: verified by
    ``sha256`` or the server's hash; ``offline`` uses only the cache)."""
    cast_any, casts = _cast_options(cast)
    only_list = [only] if isinstance(only, str) else list(only or ())
    common = dict(strict=strict, cast=cast_any, casts=casts, prefix=prefix or "", only=only_list,
                  rename=rename_steps(rename))
    src = _source(source)
    if isinstance(src, str):
        from ._url import local_path
        src = local_path(src, sha256, offline)
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
    fw = "torch" if module is not None or _has_torch_leaf(nest) else "numpy"
    try:
        # Defaults: the defaults= argument first, then the field markers.
        result = _ckpt.restore(nest, src, defaults=_declared_defaults(defaults) + markers, nest=to_nest, framework=fw,
                               **common)
    except Exception as error:  # MismatchError: the report as an object
        if isinstance(getattr(error, "report", None), Mapping):
            error.report = RestoreReport(error.report)
        raise
    report = RestoreReport(result)
    if module is not None:
        torch = _module("torch")
        with torch.no_grad():
            ringed = []  # host values for tensors on an accelerator: through the pinned ring (docs/gpu.md)
            for path, value, _ in result["filled"]:
                if len(path) != 1:  # the state dict is flat: only the whole of it has another path
                    raise ValueError("a default for a whole module must be ckpt.KEEP or declared per entry")
                destination, source = state[path[0]], _as_torch(value)
                if destination.device.type not in ("cpu", "meta") and source.device.type == "cpu":
                    ringed.append((path[0], source, destination))
                else:
                    destination.copy_(source)
            if ringed:
                from . import _device
                _device.fill(ringed)
        report.tree = module
        return report
    deferred: list = []  # host values for tensors on an accelerator: through the pinned ring (docs/gpu.md)
    report.tree = _rebuild(target, _trie(result["filled"], deferred))
    if deferred:
        from . import _device
        _device.fill(deferred)
    return report
