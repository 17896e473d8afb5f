"""``safetensors.tensorflow`` on ckpt: save and load dicts of TensorFlow
tensors (saved by ckpt.safetensors.numpy, which takes anything np.asarray
takes)."""

from __future__ import annotations

import os
from typing import Dict, Optional, Union

from . import numpy as _numpy
from . import safe_open

__all__ = ["save", "save_file", "load", "load_file"]



def save(tensors, metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of a dict of tf.Tensors."""
    return _numpy.save(tensors, metadata=metadata)


def save_file(tensors, filename: Union[str, "os.PathLike[str]"], metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes a dict of tf.Tensors to ``filename`` atomically."""
    _numpy.save_file(tensors, filename, metadata=metadata)


def load(data: bytes):
    """The tf.Tensors of a safetensors file held in memory."""
    import tensorflow as tf

    return {name: tf.convert_to_tensor(array) for name, array in _numpy.load(data).items()}


def load_file(filename: Union[str, "os.PathLike[str]"], *, backend: str = "mmap"):
    """The tf.Tensors of ``filename`` (any format ckpt reads)."""
    with safe_open(filename, framework="tf", backend=backend) as f:
        return f.get_tensors()
