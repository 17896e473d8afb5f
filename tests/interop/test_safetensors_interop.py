"""ckpt against huggingface's real `safetensors` package, both directions."""

import json

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from safetensors import safe_open

from conftest import random_array, raw_safetensors, samples

NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64"]
SAFETENSORS_CODES = {"bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64",
                     "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16",
                     "float32": "F32", "float64": "F64", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
                     "float8_e5m2": "F8_E5M2"}


def numpy_state():
    state = {f"layer.{i}.{dtype}": random_array(dtype, (3, 4), i) for i, dtype in enumerate(NUMPY_DTYPES)}
    state["scalar"] = np.array(3.5, dtype=np.float32)
    state["empty"] = np.zeros((0, 5), dtype=np.float32)
    state["ünïcode.名前"] = np.arange(6, dtype=np.int32).reshape(2, 3)
    return state


def test_files_written_by_safetensors_are_read_bit_exact(tmp_path, run, inspect_json):
    state = numpy_state()
    src = tmp_path / "peer.safetensors"
    safetensors.numpy.save_file(state, str(src), metadata={"format": "np"})
    info = inspect_json(src)
    assert info["format"] == "safetensors"
    assert info["metadata"] == {"format": "np"}
    listed = {t["name"]: t for t in info["tensors"]}
    assert set(listed) == set(state)
    for name, array in state.items():
        assert listed[name]["dtype"] == str(array.dtype)
        assert listed[name]["shape"] == list(array.shape)
        assert listed[name]["nbytes"] == array.nbytes
    # Through npz into numpy: every value bit-exact.
    run("convert", src, tmp_path / "out.npz")
    with np.load(tmp_path / "out.npz") as loaded:
        assert set(loaded.files) == set(state)
        for name, array in state.items():
            assert loaded[name].dtype == array.dtype
            assert loaded[name].tobytes() == array.tobytes(), name


def test_plain_rewrite_is_byte_identical_to_the_reference_writer(tmp_path, run):
    state = numpy_state()
    ref = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(state, str(ref), metadata={"framework": "np"})
    run("convert", ref, tmp_path / "ckpt.safetensors", "--no-extras")
    assert (tmp_path / "ckpt.safetensors").read_bytes() == ref.read_bytes()


def test_flat_dict_from_numpy_is_byte_identical_with_extras_off(tmp_path, run):
    state = numpy_state()
    np.savez(tmp_path / "state.npz", **state)
    run("convert", tmp_path / "state.npz", tmp_path / "ckpt.safetensors", "--no-extras")
    ref = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(state, str(ref))
    assert (tmp_path / "ckpt.safetensors").read_bytes() == ref.read_bytes()


def test_every_dtype_including_ml_dtypes(tmp_path, run):
    """bfloat16 and float8 (which plain numpy lacks) as ml_dtypes arrays."""
    arrays = {}
    for i, dtype in enumerate(SAFETENSORS_CODES):
        if dtype in NUMPY_DTYPES:
            arrays[f"t_{dtype}"] = random_array(dtype, (2, 3), i)
        else:
            np_dtype = np.dtype(getattr(ml_dtypes, dtype))
            arrays[f"t_{dtype}"] = random_array("uint8", (6 * np_dtype.itemsize,), i).view(np_dtype).reshape(2, 3)
    src = tmp_path / "all.safetensors"
    safetensors.numpy.save_file(arrays, str(src))
    reference, _ = raw_safetensors(src)
    assert {v[0] for v in reference.values()} == set(SAFETENSORS_CODES.values())
    run("verify", src)
    run("convert", src, tmp_path / "back.safetensors", "--no-extras")
    assert (tmp_path / "back.safetensors").read_bytes() == src.read_bytes()
    with_extras = tmp_path / "extras.safetensors"
    run("convert", src, with_extras)
    ours, _ = raw_safetensors(with_extras)
    assert ours == reference
    # The peer's numpy API cannot materialize float8 itself (it asks numpy for
    # np.float8_*), so its loader is checked on the dtypes it has.
    with safe_open(str(with_extras), framework="np") as handle:
        for dtype in NUMPY_DTYPES:
            array = handle.get_tensor(f"t_{dtype}")
            assert array.dtype == arrays[f"t_{dtype}"].dtype
            assert array.tobytes() == arrays[f"t_{dtype}"].tobytes(), dtype


def test_files_written_by_ckpt_open_in_safetensors(tmp_path, run):
    state = numpy_state()
    np.savez(tmp_path / "state.npz", **state)
    out = tmp_path / "ckpt.safetensors"
    run("convert", tmp_path / "state.npz", out)  # extras on: tree, version, checksums
    loaded = safetensors.numpy.load_file(str(out))
    assert set(loaded) == set(state)
    for name, array in state.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        assert loaded[name].tobytes() == array.tobytes()
    with safe_open(str(out), framework="np") as handle:
        metadata = handle.metadata()
        assert metadata is not None and len(metadata) >= 1
        assert all(isinstance(v, str) for v in metadata.values())
        assert handle.get_slice("ünïcode.名前")[1:2].tolist() == [[3, 4, 5]]


def test_ckpt_output_is_naturally_aligned(tmp_path, run):
    state = {"a": np.ones(3, np.uint8), "b": np.ones(5, np.float64), "c": np.ones(7, np.float16),
             "d": np.ones(2, np.int32)}
    np.savez(tmp_path / "s.npz", **state)
    out = tmp_path / "s.safetensors"
    run("convert", tmp_path / "s.npz", out)
    data = out.read_bytes()
    n = int.from_bytes(data[:8], "little")
    # ckpt's own files (extras on) start the data buffer 64-aligned, the
    # header padded with spaces only, which the reference reader takes.
    assert (8 + n) % 64 == 0
    text = data[8:8 + n].decode()
    assert text.rstrip(" ").endswith("}") and len(text) - len(text.rstrip(" ")) < 64
    header = json.loads(text)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        size = np.dtype(state[name].dtype).itemsize
        assert (8 + n + info["data_offsets"][0]) % size == 0, name
    loaded = safetensors.numpy.load_file(str(out))
    for name, array in state.items():
        assert loaded[name].dtype == array.dtype and loaded[name].tobytes() == array.tobytes(), name


@pytest.mark.parametrize("path", samples("safetensors-hf") + samples("safetensors-burn"),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_samples_are_read_exactly(tmp_path, run, inspect_json, path):
    reference, metadata = raw_safetensors(path)
    with safe_open(str(path), framework="np") as handle:
        assert set(handle.keys()) == set(reference)
    info = inspect_json(path)
    assert {t["name"] for t in info["tensors"]} == set(reference)
    run("verify", path)
    out = tmp_path / "copy.safetensors"
    run("convert", path, out)
    ours, _ = raw_safetensors(out)
    assert ours.keys() == reference.keys()
    for name in reference:
        assert ours[name] == reference[name], name


def test_no_samples_folder_is_reported():
    if not samples("safetensors-hf"):
        pytest.skip("../shared/interop-samples/safetensors-hf is absent on this machine")
    assert len(samples("safetensors-hf")) >= 5
