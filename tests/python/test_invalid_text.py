"""Files whose names or strings are not UTF-8, each written by the real
framework and then changed in one place: ckpt raises one of its own
exceptions naming the file (never a bare UnicodeDecodeError), and the CLI
prints one clean line. TensorFlow's case is in tests/interop/test_tf_interop.py.

Run: .venv/bin/python -m pytest tests/python/test_invalid_text.py -q
"""

import collections
import os
import pathlib
import subprocess

import flax.serialization
import numpy as np
import pytest
import safetensors.numpy
import torch

import ckpt

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("CKPT_TOOL", str(ROOT / "build" / "ckpt"))


def replaced(path, old, new, count=None):
    """Rewrites `path` with `old` replaced by `new` (same length); checks it
    occurs `count` times (any number when None)."""
    assert len(old) == len(new)
    data = pathlib.Path(path).read_bytes()
    found = data.count(old)
    assert found > 0 and (count is None or found == count), (old, found)
    pathlib.Path(path).write_bytes(data.replace(old, new))


def expect_refused(path, kind=ckpt.CorruptCheckpointError):
    for call in (lambda: ckpt.load(path), lambda: ckpt.load(path, verify=True)):
        with pytest.raises(ckpt.CheckpointError) as raised:
            call()
        assert isinstance(raised.value, kind), repr(raised.value)
        assert str(path) in str(raised.value)
        assert raised.value.path is not None
    result = subprocess.run([CLI, "inspect", str(path), "--json"], capture_output=True, timeout=60)
    assert result.returncode in (1, 2), result
    assert result.stdout == b""
    line = result.stderr.decode("utf-8")  # the line itself is UTF-8
    assert line.count("\n") == 1 and line.endswith("\n"), line
    assert all(c >= " " for c in line[:-1]), line
    assert str(path) in line


def test_torch_key_with_a_lone_surrogate(tmp_path):
    # torch pickles str keys with "surrogatepass": the file holds ED A0 80.
    path = tmp_path / "surrogate.pt"
    torch.save({"w\ud800": torch.zeros(2)}, path)
    expect_refused(path)


def test_torch_legacy_key_that_is_not_utf8(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save({"wxyz": torch.zeros(2)}, path, _use_new_zipfile_serialization=False)
    replaced(path, b"wxyz", b"w\xff\xfez")
    expect_refused(path)


def test_torch_global_that_is_not_utf8(tmp_path):
    # GLOBAL names are text lines; an error that quotes them stays one line.
    path = tmp_path / "global.pt"
    torch.save(collections.OrderedDict(w=torch.zeros(2)), path, _use_new_zipfile_serialization=False)
    replaced(path, b"collections\nOrderedDict", b"collection\xff\nOrdered\x00ict")
    expect_refused(path, ckpt.UnsupportedError)


def test_flax_key_that_is_not_utf8(tmp_path):
    path = tmp_path / "state.msgpack"
    path.write_bytes(flax.serialization.to_bytes({"params": {"kxyz": np.zeros(2, np.float32)}}))
    replaced(path, b"kxyz", b"k\xff\xfez", count=1)
    expect_refused(path)


def test_safetensors_name_that_is_not_utf8(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"wxyz": np.zeros(2, np.float32)}, str(path))
    replaced(path, b"wxyz", b"w\xff\xfez", count=1)
    expect_refused(path)


def test_npz_member_name_that_is_not_utf8(tmp_path):
    # zipfile flags a non-ASCII name as UTF-8; the change breaks it.
    path = tmp_path / "arrays.npz"
    np.savez(path, **{"w\u00e9": np.zeros(2, np.float32)})
    replaced(path, "w\u00e9.npy".encode(), b"w\xff\xa9.npy", count=2)
    expect_refused(path)


def test_orbax_metadata_that_is_not_utf8(tmp_path):
    path = tmp_path / "step"
    ckpt.save(path, {"params": {"wxyz": np.zeros(2, np.float32)}}, format="orbax")
    metadata = path / "_METADATA"
    replaced(metadata, b"wxyz", b"w\xff\xfez")
    expect_refused(path)


def test_string_values_with_surrogates_still_load(tmp_path):
    # A str value may hold a lone surrogate (Python's own str can): it loads
    # as that str; only names must be UTF-8.
    path = tmp_path / "values.pt"
    torch.save({"w": torch.zeros(2), "note": "a\ud800b"}, path)
    loaded = ckpt.load(path)
    assert loaded["note"] == "a\ud800b"
