"""``safetensors.flax`` on ckpt: save and load dicts of jax arrays (saved
by ckpt.safetensors.numpy, which takes anything np.asarray takes)."""

from __future__ import annotations

import os
from typing import Dict, Optional, Union

import numpy as np

from . import numpy as _numpy
from . import safe_open

__all__ = ["save", "save_file", "load", "load_file"]



def _device(arrays: Dict[str, np.ndarray]):
    import jax.numpy as jnp

    return {name: jnp.asarray(array) for name, array in arrays.items()}


def save(tensors, metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of a dict of jax arrays."""
    return _numpy.save(tensors, metadata=metadata)


def save_file(tensors, filename: Union[str, "os.PathLike[str]"], metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes a dict of jax arrays to ``filename`` atomically."""
    _numpy.save_file(tensors, filename, metadata=metadata)


def load(data: bytes):
    """The jax arrays of a safetensors file held in memory."""
    return _device(_numpy.load(data))


def load_file(filename: Union[str, "os.PathLike[str]"], *, backend: str = "mmap"):
    """The jax arrays of ``filename`` (any format ckpt reads)."""
    with safe_open(filename, framework="flax", backend=backend) as f:
        return f.get_tensors()
