"""``safetensors.numpy`` on ckpt: save and load dicts of numpy arrays.

Arrays of any byte order are stored little-endian; bfloat16 and float8
arrays (ml_dtypes) are stored and loaded too.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Union

import numpy as np

from . import SafetensorError, TensorSpec, _open_bytes, safe_open, serialize, serialize_file

__all__ = ["save", "save_file", "load", "load_file"]


def _is_little_endian(array: np.ndarray) -> bool:
    order = array.dtype.byteorder
    return order in ("<", "|") or (order == "=" and np.little_endian)


def _specs(tensor_dict: Dict[str, np.ndarray], keep_alive: List[np.ndarray]) -> Dict[str, TensorSpec]:
    """Each array as a TensorSpec over contiguous little-endian memory (a
    copy only where the array is not so already), kept in ``keep_alive``."""
    if not isinstance(tensor_dict, dict):
        raise ValueError(f"Expected a dict of [str, np.ndarray] but received {type(tensor_dict)}")
    specs = {}
    for name, value in tensor_dict.items():
        array = np.asarray(value)
        if not _is_little_endian(array):
            array = array.astype(array.dtype.newbyteorder("<"))
        if not array.flags.c_contiguous:
            array = array.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        keep_alive.append(array)
        specs[name] = TensorSpec(dtype=array.dtype.name, shape=array.shape, data_ptr=array.ctypes.data,
                                 data_len=array.nbytes)
    return specs


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of ``tensor_dict`` (the reference writer's bytes)."""
    keep_alive: List[np.ndarray] = []
    return serialize(_specs(tensor_dict, keep_alive), metadata=metadata)


def save_file(tensor_dict: Dict[str, np.ndarray], filename: Union[str, "os.PathLike[str]"],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes ``tensor_dict`` to ``filename`` atomically."""
    keep_alive: List[np.ndarray] = []
    serialize_file(_specs(tensor_dict, keep_alive), filename, metadata=metadata)


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a safetensors file held in memory, in file order; they
    view one private copy of ``data`` (writable, as the reference's are)."""
    handle = _open_bytes(bytearray(data), "numpy", "<bytes>")
    return {name: handle.get(name, writable=True) for name in handle.keys()}


def load_file(filename: Union[str, "os.PathLike[str]"], *, backend: str = "mmap") -> Dict[str, np.ndarray]:
    """The arrays of ``filename``, in file order: views of the mapped file
    (copy on write) with ``backend="mmap"``, read into memory with "pread"."""
    with safe_open(filename, framework="np", backend=backend) as f:
        return f.get_tensors()


# The reference module's private table and lookup, kept for code that
# imports them.
_TYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "U64": np.uint64,
    "I32": np.int32, "U32": np.uint32, "I16": np.int16, "U16": np.uint16, "I8": np.int8, "U8": np.uint8,
    "BOOL": np.bool_, "C64": np.complex64,
}


def _getdtype(dtype_str: str) -> np.dtype:
    try:
        return _TYPES[dtype_str]
    except KeyError:
        raise SafetensorError(f"numpy has no dtype for {dtype_str}") from None
