"""pytest plugin: makes `import safetensors` (and its numpy, torch, flax and
tensorflow modules) give ckpt's drop-in, so that huggingface/safetensors' own Python
tests run against ckpt. Used by run_safetensors_tests.sh; loaded with
`-p safetensors_as_ckpt` before any test module imports safetensors."""

import sys

import ckpt.safetensors
import ckpt.safetensors.flax
import ckpt.safetensors.numpy
import ckpt.safetensors.tensorflow
import ckpt.safetensors.torch

for name in ("", ".numpy", ".torch", ".flax", ".tensorflow"):
    sys.modules["safetensors" + name] = sys.modules["ckpt.safetensors" + name]
