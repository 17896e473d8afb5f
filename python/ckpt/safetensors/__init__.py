"""huggingface's ``safetensors`` API, on ckpt's core.

Code written for the ``safetensors`` package runs on ckpt by changing its
import::

    import ckpt.safetensors as safetensors
    from ckpt.safetensors.torch import save_file, load_file
    from ckpt.safetensors import safe_open

Files are written by ckpt's C++ writer without ckpt's extras, so they are
the bytes huggingface's writer produces for the same tensors (the same
order, alignment and header), and read by ckpt's reader: the file is mapped
and tensors are views of the mapping (copy on write: writing to a tensor
never reaches the file). ``safe_open`` reads more than safetensors: a torch
``.pt``, an ``.npz``, a TensorFlow bundle, a Flax or Orbax checkpoint open
the same way, their tensors named by dotted paths.

Differences from the reference package, all of them additions: errors name
the file and the entry; writes are atomic (a temporary name renamed into
place; also synced to disk with ``ckpt.safetensors.SYNC_WRITES = True``);
numpy loads bfloat16 and float8 (ml_dtypes); ``get_slice`` takes negative
bounds, steps and ``...``.
"""

from __future__ import annotations

import mmap
import operator
import os
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

from .. import _ckpt
from .._errors import CheckpointError

__all__ = ["SafetensorError", "TensorSpec", "safe_open", "serialize", "serialize_file", "deserialize"]
__version__ = _ckpt.__version__

# Writes are atomic either way (a temporary name renamed into place, so a
# crashed process never leaves half a file). True also syncs each file and
# its directory to disk before and after the rename, which survives power
# loss but costs what the disk takes to write the bytes; the reference
# package does not sync, and neither does this drop-in unless asked.
SYNC_WRITES = False

# {numpy / ml_dtypes / torch dtype name: safetensors code}, {code: ckpt dtype name}
_CODE_OF_NAME, _NAME_OF_CODE = _ckpt.safetensors_dtypes()
_PACKED = "F4"  # two 4-bit values per byte: shapes count values, memory bytes


class SafetensorError(CheckpointError):
    """What the reference package raises for a bad file, dtype or slice; a
    ckpt.CheckpointError too, so ckpt's handlers catch it."""


def _error(prefix: str, error: Exception) -> SafetensorError:
    out = SafetensorError(f"{prefix}: {error}")
    for attribute in ("path", "entry", "offset", "reason"):
        setattr(out, attribute, getattr(error, attribute, None))
    return out


class TensorSpec:
    """One tensor handed to ``serialize``/``serialize_file`` as raw memory:
    ``dtype`` a numpy or torch dtype name ("float32", "bfloat16",
    "float8_e4m3fn", "float4_e2m1fn_x2", ...), ``shape``, the address of its
    contiguous little-endian bytes and their length. The caller keeps the
    memory alive while it is serialized. ``dtype`` reads back as the
    safetensors code ("F32"); for float4_e2m1fn_x2, given torch's shape (bytes
    along the last axis), ``shape`` reads back as the values' shape (last axis
    doubled), as the file records it.

    Raises SafetensorError for an unknown dtype, ValueError for a negative
    dimension, address or length."""

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        code = _CODE_OF_NAME.get(dtype) if isinstance(dtype, str) else None
        if code is None:
            raise SafetensorError(f"Unknown dtype {dtype!r}. Supported dtypes: {', '.join(sorted(_CODE_OF_NAME))}")
        dims = [operator.index(d) for d in shape]
        if any(d < 0 for d in dims) or data_ptr < 0 or data_len < 0:
            raise ValueError("TensorSpec: dimensions, data_ptr and data_len must be non-negative")
        if code == _PACKED and dims:
            dims[-1] *= 2
        object.__setattr__(self, "_dtype", code)
        object.__setattr__(self, "_shape", dims)
        object.__setattr__(self, "_data_ptr", int(data_ptr))
        object.__setattr__(self, "_data_len", int(data_len))

    def __setattr__(self, name, value):
        raise AttributeError("TensorSpec is immutable")

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def shape(self) -> List[int]:
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        return self._data_ptr

    @property
    def data_len(self) -> int:
        return self._data_len

    def __repr__(self) -> str:
        return (f"TensorSpec(dtype='{self._dtype}', shape={self._shape}, data_ptr={self._data_ptr}, "
                f"data_len={self._data_len})")


def _specs(tensor_dict: Any) -> List[Tuple[str, str, List[int], int, int]]:
    if not isinstance(tensor_dict, dict):
        raise TypeError(f"tensor_dict must be a dict of str to TensorSpec, not {type(tensor_dict).__name__}")
    specs = []
    for name, spec in tensor_dict.items():
        if not isinstance(name, str) or not isinstance(spec, TensorSpec):
            raise TypeError(f"tensor_dict must map str to TensorSpec; {name!r} maps to {type(spec).__name__}")
        specs.append((name, spec._dtype, spec._shape, spec._data_ptr, spec._data_len))
    return specs


def _metadata(metadata: Any) -> Optional[Dict[str, str]]:
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise TypeError("metadata must be a dict of str to str")
    return metadata


def serialize(tensor_dict: Dict[str, TensorSpec], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors file of ``tensor_dict`` as bytes (tensors ordered by
    dtype, then name; the header padded to 8 bytes), byte for byte what the
    reference writer produces. Raises TypeError for anything but TensorSpecs
    and str metadata, SafetensorError when a spec's length disagrees with its
    dtype and shape."""
    specs, metadata = _specs(tensor_dict), _metadata(metadata)
    try:
        return _ckpt.safetensors_serialize(specs, metadata)
    except (CheckpointError, ValueError) as error:
        raise _error("Error while serializing", error) from None


def serialize_file(tensor_dict: Dict[str, TensorSpec], filename: Union[str, "os.PathLike[str]"],
                   metadata: Optional[Dict[str, str]] = None) -> None:
    """``serialize`` into ``filename``, atomically: the bytes go to a
    temporary name in the same directory and replace the file in one rename
    (an earlier file stays whole if anything fails, and tensors still mapped
    from it keep their bytes); synced to disk first if ``SYNC_WRITES``. The
    GIL is released while writing."""
    specs, metadata = _specs(tensor_dict), _metadata(metadata)
    try:
        _ckpt.safetensors_serialize(specs, metadata, os.fsdecode(os.fspath(filename)), SYNC_WRITES)
    except (CheckpointError, ValueError) as error:
        raise _error("Error while serializing", error) from None


def _open_bytes(data: Any, framework: str, label: str) -> Any:
    try:
        return _ckpt.open_safetensors_bytes(data, framework, label)
    except (CheckpointError, ValueError) as error:
        raise _error("Error while deserializing header", error) from None


def _values_shape(code: str, shape: Sequence[int]) -> List[int]:
    shape = list(shape)
    if code == _PACKED and shape:
        shape[-1] *= 2
    return shape


def _code(ckpt_dtype: str) -> str:
    return _CODE_OF_NAME.get(ckpt_dtype, ckpt_dtype)


def deserialize(bytes: Union[bytes, bytearray, memoryview]) -> List[Tuple[str, Dict[str, Any]]]:
    """The tensors of a safetensors file held in memory, in file order:
    ``[(name, {"shape": [...], "dtype": "F32", "data": bytearray}), ...]``,
    each ``data`` a copy. Raises SafetensorError if the bytes fail validation."""
    view = memoryview(bytes).cast("B")
    handle = _open_bytes(view, "numpy", "<bytes>")
    out = []
    for name in handle.keys():
        info = handle.info(name)
        code = _code(info["dtype"])
        data = bytearray(view[info["offset"]:info["offset"] + info["nbytes"]])
        out.append((name, {"shape": _values_shape(code, info["shape"]), "dtype": code, "data": data}))
    return out


# ---------------------------------------------------------------- reading

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np", "tf": "tf",
               "tensorflow": "tf", "flax": "flax", "jax": "flax", "mlx": "mlx", "paddle": "paddle"}


def _framework(name: Any) -> str:
    framework = _FRAMEWORKS.get(name) if isinstance(name, str) else None
    if framework is None:
        raise SafetensorError(f"framework {name} is invalid; use one of {', '.join(sorted(_FRAMEWORKS))}")
    return framework


def _device(framework: str, device: Any) -> Any:
    """None for the CPU, else what torch's .to() takes."""
    if framework != "pt":
        if device not in ("cpu", None):
            raise SafetensorError(f"framework {framework} loads to the cpu only, not {device!r}")
        return None
    import torch

    if isinstance(device, int):
        device = torch.device("cuda", device)
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise SafetensorError(f"device {device!r} is invalid: {error}") from None
    return None if device.type == "cpu" else device


def _convert(framework: str, value: Any, device: Any) -> Any:
    """A numpy array (or a CPU torch tensor for "pt") in the asked framework."""
    if framework == "pt":
        return value if device is None else value.to(device)
    if framework == "np":
        return value
    if framework == "tf":
        import tensorflow as tf

        return tf.convert_to_tensor(value)
    if framework == "flax":
        import jax.numpy as jnp

        return jnp.asarray(value)
    if framework == "mlx":
        import mlx.core as mx

        return mx.array(value)
    import paddle

    return paddle.to_tensor(value)


class safe_open:
    """Opens a checkpoint lazily and gives its tensors one by one, as the
    reference ``safe_open`` does: ``keys()`` (sorted), ``offset_keys()`` (file
    order), ``metadata()``, ``get_tensor``, ``get_tensors``, ``get_slice``;
    a context manager whose exit closes it.

    ``framework``: "pt" (torch), "np" (numpy), "tf", "flax" (jax), "mlx",
    "paddle". ``device``: where torch tensors go ("cpu", "cuda:0", 0, ...).
    ``backend``: "mmap" maps the file, tensors view the mapping; "pread"
    reads each tensor asked for into memory of its own (positioned reads, no
    page faults on the mapping). Besides safetensors, any format ckpt reads opens here (a torch
    .pt, .npz, TF bundle, Flax or Orbax checkpoint), its tensors named by
    dotted paths.

    Raises FileNotFoundError("No such file or directory: NAME") for a missing
    file, SafetensorError for one that fails validation (naming the file, the
    entry and the offset), for an unknown framework or backend, and for any
    use after close ("File is closed")."""

    def __init__(self, filename: Union[str, "os.PathLike[str]"], framework: str, device: Any = "cpu", *,
                 backend: str = "mmap") -> None:
        self._handle = None
        self._framework = _framework(framework)
        if backend not in ("mmap", "pread"):
            raise SafetensorError(f"backend {backend!r} is invalid; use 'mmap' or 'pread'")
        self._device = _device(self._framework, device)
        path = os.fsdecode(os.fspath(filename))
        try:
            handle = _ckpt.open(path, framework="torch" if self._framework == "pt" else "numpy")
        except FileNotFoundError:
            raise FileNotFoundError(f"No such file or directory: {path}") from None
        except (CheckpointError, ValueError) as error:
            raise _error("Error while deserializing header", error) from None
        self._attach(handle)
        # "pread": every tensor a fresh positioned read of the file.
        self._copy_always = backend == "pread"
        self._shared = self._framework == "pt" and backend == "mmap"

    @classmethod
    def _over(cls, handle: Any, framework: str, device: Any) -> "safe_open":
        self = cls.__new__(cls)
        # Memory that results would view is not the file: a write into it
        # could not be undone, so every result is a copy.
        self._copy_always = True
        self._shared = framework == "pt"
        self._framework = framework
        self._device = device
        self._attach(handle)
        return self

    def _attach(self, handle: Any) -> None:
        self._handle = handle
        self._sorted_keys: Optional[List[str]] = None  # keys() and the names known, made on first use
        self._known_names: Optional[Set[str]] = None
        self._lent: Set[str] = set()  # names whose memory a caller already holds

    def _open_handle(self) -> Any:
        if self._handle is None or self._handle.closed():
            raise SafetensorError("File is closed")
        return self._handle

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._handle is not None:
            self._handle.close()

    def keys(self) -> List[str]:
        self._open_handle()
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self._handle.keys())
        return list(self._sorted_keys)

    @property
    def _known(self) -> Set[str]:
        if self._known_names is None:
            self._known_names = set(self._open_handle().keys())
        return self._known_names

    def offset_keys(self) -> List[str]:
        return list(self._open_handle().keys())

    def metadata(self) -> Optional[Dict[str, str]]:
        return self._open_handle().metadata() or None

    def _tensor(self, name: str, copy: bool = False) -> Any:
        """The tensor over the file's memory (writable: the mapping is
        private, copy on write; pread memory is ours), shared by every call;
        with ``copy``, read afresh from the file into memory of its own."""
        handle = self._open_handle()
        if name not in self._known:
            raise SafetensorError(f"File does not contain tensor {name}")
        return handle.get(name, writable=True, copy=copy)

    def _pristine(self, name: str) -> Any:
        """The tensor as the file holds it: the shared memory until a caller
        was lent it (and may have written into it), then a fresh read."""
        return self._tensor(name, copy=name in self._lent)

    def get_tensor(self, name: str) -> Any:
        """As the reference's: torch tensors over a mapped file share its
        (private) memory, every other result is the caller's own (with
        "mmap" the first for a name views the file's memory and later ones
        are fresh reads of the file; with "pread" every one is), so that a
        write into one never shows in another."""
        if self._shared:
            tensor = self._tensor(name)
        elif self._copy_always:
            tensor = self._tensor(name, copy=True)
        else:
            tensor = self._pristine(name)
            self._lent.add(name)
        return _convert(self._framework, tensor, self._device)

    def get_tensors(self) -> Dict[str, Any]:
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def get_slice(self, name: str) -> "_Slice":
        info = self._open_handle().info(name) if name in self._known else None
        if info is None:
            raise SafetensorError(f"File does not contain tensor {name}")
        return _Slice(self, name, _code(info["dtype"]), list(info["shape"]))


def _safe_open_handle(f: Any, framework: str, device: Any = "cpu") -> safe_open:
    """``safe_open`` over an open file object (a local file, fsspec's, ...):
    mapped (copy on write) when it has a descriptor, else read whole."""
    framework = _framework(framework)
    device = _device(framework, device)
    label = str(getattr(f, "name", "<file>"))
    data: Any
    try:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except (AttributeError, OSError, ValueError, TypeError):
        f.seek(0)
        raw = getattr(f, "buffer", f).read()
        data = bytearray(raw if isinstance(raw, (bytes, bytearray)) else raw.encode())
    handle = _open_bytes(data, "torch" if framework == "pt" else "numpy", label)
    return safe_open._over(handle, framework, device)


# ---------------------------------------------------------------- slices


def _bound(value: Any) -> str:
    return "" if value is None else str(value)


class _Slice:
    """A tensor not yet read: ``get_shape()``, ``get_dtype()`` (the
    safetensors code) and ``[...]``, which reads the part asked for. Indexes
    as the reference does: for torch, as torch indexes the tensor; for the
    others, ints (negative from the end), slices, a tuple of them, and ``[]``
    for no rows, out-of-range bounds being errors rather than clipped, and
    also negative slice bounds, steps and ``...``."""

    def __init__(self, opened: safe_open, name: str, code: str, stored_shape: List[int]) -> None:
        self._opened = opened
        self._name = name
        self._code = code
        self._shape = _values_shape(code, stored_shape)

    def get_shape(self) -> List[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._code

    def __getitem__(self, index: Any) -> Any:
        # A part shares memory as get_tensor's results do: torch's over a
        # mapped file view it, every other part is a copy of the file's bytes.
        if self._opened._framework == "pt":
            # As the reference does for torch: torch's own indexing of the
            # (mapped) tensor, with its semantics and errors.
            if self._opened._shared:
                return _convert("pt", self._opened._tensor(self._name)[index], self._opened._device)
            import torch

            part = self._opened._pristine(self._name)[index]
            return _convert("pt", part.clone(memory_format=torch.contiguous_format), self._opened._device)
        part = self._opened._pristine(self._name)[self._key(index)]
        return _convert(self._opened._framework, part.copy(order="C"), self._opened._device)

    def _key(self, index: Any) -> Tuple[Any, ...]:
        if isinstance(index, list):
            if index:
                raise SafetensorError("Non empty lists are not implemented")
            items: List[Any] = [slice(0, 0)]
        elif isinstance(index, tuple):
            items = list(index)
        else:
            items = [index]
        if sum(item is Ellipsis for item in items) > 1:
            raise SafetensorError("an index can only have a single ellipsis ('...')")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            fill = max(len(self._shape) - (len(items) - 1), 0)
            items[at:at + 1] = [slice(None)] * fill
        shown: List[str] = []
        checked: List[Tuple[str, Any]] = []
        for dim, item in enumerate(items):
            size = self._shape[dim] if dim < len(self._shape) else 0
            if isinstance(item, slice):
                shown.append(f"{_bound(item.start)}:{_bound(item.stop)}")
                checked.append(("slice", item))
                continue
            try:
                position = operator.index(item)
            except TypeError:
                raise SafetensorError(f"cannot index dimension {dim} with {type(item).__name__}: "
                                      "use ints, slices, ... or []") from None
            if position < 0:
                if position + size < 0:
                    raise SafetensorError(f"Invalid index {position} for dimension {dim} of size {size}")
                position += size
            shown.append(str(position))
            checked.append(("index", position))
        problem = None
        if len(items) > len(self._shape):
            problem = "more slicing indexes than dimensions in tensor"
        key = []
        for dim, (kind, item) in enumerate(checked[:len(self._shape)]):
            size = self._shape[dim]
            if kind == "index":
                if item >= size:
                    problem = problem or f"index {item} out of bounds for tensor dimension #{dim} of size {size}"
                key.append(item)
                continue
            step = 1 if item.step is None else operator.index(item.step)
            if step <= 0:
                raise SafetensorError(f"slice step must be positive, not {step} (dimension {dim})")
            start = 0 if item.start is None else operator.index(item.start)
            stop = size if item.stop is None else operator.index(item.stop)
            start = start + size if start < 0 else start
            stop = stop + size if stop < 0 else stop
            if start < 0 or stop < 0:
                problem = problem or f"index {min(start, stop)} out of bounds for tensor dimension #{dim} of size {size}"
            elif (start >= size and not start == stop == size) or stop > size:
                asked = start if start >= size else stop - 1
                problem = problem or f"index {asked} out of bounds for tensor dimension #{dim} of size {size}"
            key.append(slice(start, stop, step))
        if problem is not None:
            raise SafetensorError(f"Error during slicing [{', '.join(shown)}] with shape {self._shape}: {problem}")
        if self._code == _PACKED and len(key) == len(self._shape):
            key[-1] = self._packed(key[-1], len(key) - 1)
        return tuple(key)

    def _packed(self, part: Any, dim: int) -> Any:
        """The last axis of F4 in bytes: whole bytes only."""
        if isinstance(part, int) or part.step != 1 or part.start % 2 or part.stop % 2:
            raise SafetensorError(f"Error during slicing with shape {self._shape}: The slice is slicing for subbytes "
                                  "dtypes, and the slice does not end up at a byte boundary, this is invalid.")
        return slice(part.start // 2, part.stop // 2)
