"""Shared fixtures for the interop tests: the ckpt CLI and the samples."""

import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "interop-samples"


def tool_path():
    return os.environ.get("CKPT_TOOL", str(ROOT / "build" / "ckpt"))


@pytest.fixture(scope="session")
def ckpt_tool():
    path = tool_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"the ckpt CLI is not built at {path} (run `make build`)")
    return path


@pytest.fixture
def run(ckpt_tool):
    """Runs the CLI; returns the CompletedProcess (text mode)."""

    def _run(*args, expect=0):
        result = subprocess.run([ckpt_tool, *map(str, args)], capture_output=True, text=True, timeout=120)
        if expect is not None:
            assert result.returncode == expect, (
                f"ckpt {' '.join(map(str, args))} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}")
        return result

    return _run


@pytest.fixture
def inspect_json(run):
    def _inspect(path):
        return json.loads(run("inspect", path, "--json").stdout)

    return _inspect


def samples(folder, pattern="*"):
    base = SAMPLES / folder
    if not base.is_dir():
        return []
    return sorted(base.glob(pattern))


def raw_safetensors(path):
    """The test's own minimal safetensors reader (json + struct, no ckpt code):
    {name: (dtype code, shape, raw bytes)} and the __metadata__ dict."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", None)
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], list(info["shape"]), data[base + begin:base + end])
    return tensors, metadata


def random_array(dtype, shape, seed):
    """Every bit pattern of `dtype` (NaN payloads, subnormals...), reproducibly."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)
