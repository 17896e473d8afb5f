"""The Python package with the dtypes torch 2.13 added (float8_e4m3fnuz,
float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn_x2): torch tensors save and
load bit-exact in every format that holds them; numpy gets ml_dtypes arrays
(uint8 bytes for the packed float4 pairs). Expected values come from torch,
ml_dtypes and safetensors, never from ckpt.

Run: .venv/bin/python -m pytest tests/python -q
"""

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch

import ckpt

NEW = ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"]
EIGHT_BIT = NEW[:3]


def every_byte(name, shape, seed=0):
    count = 1
    for size in shape:
        count *= size
    raw = (torch.arange(count, dtype=torch.int64) * 37 + seed) % 256
    return raw.to(torch.uint8).reshape(shape).view(getattr(torch, name))


def as_bytes(tensor):
    return tensor.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()


def state():
    out = {}
    for seed, name in enumerate(NEW):
        out[name] = every_byte(name, (16, 16), seed)  # all 256 byte values
        out[name + ".empty"] = every_byte(name, (0, 4), seed)
    for name in EIGHT_BIT:
        out[name + ".scalar"] = every_byte(name, (), 0x80)
    return out


@pytest.mark.parametrize("ext", [".safetensors", ".pt"])
def test_torch_tensors_round_trip_bit_exact(tmp_path, ext):
    expected = state()
    path = tmp_path / ("state" + ext)
    ckpt.save(path, expected)
    loaded = ckpt.load(path, framework="torch")
    assert loaded.keys() == expected.keys()
    for name, tensor in expected.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert loaded[name].shape == tensor.shape, name
        assert as_bytes(loaded[name]) == as_bytes(tensor), name


def test_the_peers_read_what_the_package_saved(tmp_path):
    expected = state()
    ckpt.save(tmp_path / "a.safetensors", expected)
    ckpt.save(tmp_path / "a.pt", expected)
    for loaded in (safetensors.torch.load_file(str(tmp_path / "a.safetensors")),
                   torch.load(tmp_path / "a.pt", weights_only=True)):
        assert loaded.keys() == expected.keys()
        for name, tensor in expected.items():
            assert loaded[name].dtype == tensor.dtype, name
            assert as_bytes(loaded[name]) == as_bytes(tensor), name


def test_numpy_gets_ml_dtypes_and_packed_bytes(tmp_path):
    expected = state()
    path = tmp_path / "s.safetensors"
    safetensors.torch.save_file(expected, str(path))
    arrays = ckpt.load(path)  # numpy
    for name in EIGHT_BIT:
        assert arrays[name].dtype == np.dtype(getattr(ml_dtypes, name)), name
        assert arrays[name].tobytes() == as_bytes(expected[name])
    packed = arrays["float4_e2m1fn_x2"]
    assert packed.dtype == np.uint8 and packed.shape == (16, 16)
    assert packed.tobytes() == as_bytes(expected["float4_e2m1fn_x2"])
    # ml_dtypes arrays save back as their dtype.
    ckpt.save(tmp_path / "back.safetensors", {name: arrays[name] for name in EIGHT_BIT})
    back = safetensors.torch.load_file(str(tmp_path / "back.safetensors"))
    for name in EIGHT_BIT:
        assert back[name].dtype == getattr(torch, name)
        assert as_bytes(back[name]) == as_bytes(expected[name])


def test_formats_without_them_refuse_with_the_dtype_named(tmp_path):
    with pytest.raises(ckpt.UnsupportedError, match="float8_e8m0fnu"):
        ckpt.save(tmp_path / "s.npz", {"w": every_byte("float8_e8m0fnu", (2,))})
