"""ckpt against real numpy (np.save, np.savez, np.savez_compressed, np.load), both directions."""

import io
import json
import zipfile

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import torch

from conftest import random_array, raw_safetensors

# numpy dtype name -> ckpt dtype name (the same spelling).
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def c_order_little_endian(array):
    """The bytes ckpt holds for `array`: C order, little-endian."""
    return np.array(array, order="C").astype(array.dtype.newbyteorder("<")).tobytes()


def same_shape(stored, array):
    """safetensors lacks complex128: ckpt may store it with a trailing pair axis."""
    return stored == list(array.shape) or (array.dtype.kind == "c" and stored == list(array.shape) + [2])


def numpy_state():
    state = {f"layer.{i}.{dtype}": random_array(dtype, (3, 4), i) for i, dtype in enumerate(DTYPES)}
    state["scalar"] = np.array(3.5, dtype=np.float32)
    state["empty"] = np.zeros((0, 5), dtype=np.float32)
    state["zero_size"] = np.zeros((2, 0, 3), dtype=np.int16)
    state["ünïcode.名前"] = np.arange(6, dtype=np.int32).reshape(2, 3)
    return state


def odd_layouts():
    """Arrays numpy writes with big-endian descrs or fortran_order True."""
    base = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * 1.5
    return {
        "big_i4": np.arange(12, dtype=">i4").reshape(3, 4),
        "big_c16": (np.arange(6) + 1j * np.arange(6)).astype(">c16"),
        "big_f2": np.linspace(-2, 2, 7).astype(">f2"),
        "fortran_f8": np.asfortranarray(base),
        "fortran_big_i2": np.asfortranarray(np.arange(24, dtype=">i2").reshape(4, 6)),
        "fortran_u1": np.asfortranarray(np.arange(6, dtype=np.uint8).reshape(2, 3)),
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_np_save_files_are_read_bit_exact(tmp_path, run, inspect_json, dtype):
    array = random_array(dtype, (3, 5), 7)
    np.save(tmp_path / "a.npy", array)
    info = inspect_json(tmp_path / "a.npy")
    assert info["format"] == "npy"
    [tensor] = info["tensors"]
    assert tensor["dtype"] == dtype
    assert tensor["shape"] == [3, 5]
    assert tensor["offset"] == 128
    run("convert", tmp_path / "a.npy", tmp_path / "a.safetensors")  # extras: complex too
    tensors, _ = raw_safetensors(tmp_path / "a.safetensors")
    [(_, shape, data)] = tensors.values()
    assert same_shape(shape, array)
    assert data == array.tobytes()


@pytest.mark.parametrize("name", sorted(odd_layouts()))
def test_big_endian_and_fortran_order_are_converted(tmp_path, run, name):
    array = odd_layouts()[name]
    np.save(tmp_path / "a.npy", array)
    run("convert", tmp_path / "a.npy", tmp_path / "b.npy")
    back = np.load(tmp_path / "b.npy")
    assert back.dtype == array.dtype.newbyteorder("<")
    assert back.flags.c_contiguous
    assert np.array_equal(back, array)
    assert back.tobytes() == c_order_little_endian(array)


@pytest.mark.parametrize("compressed", [False, True])
def test_np_savez_files_are_read_bit_exact(tmp_path, run, inspect_json, compressed):
    state = {**numpy_state(), **odd_layouts()}
    (np.savez_compressed if compressed else np.savez)(tmp_path / "s.npz", **state)
    info = inspect_json(tmp_path / "s.npz")
    assert info["format"] == "npz"
    assert [t["name"] for t in info["tensors"]] == list(state)
    run("verify", tmp_path / "s.npz")
    run("convert", tmp_path / "s.npz", tmp_path / "s.safetensors")
    tensors, _ = raw_safetensors(tmp_path / "s.safetensors")
    for name, array in state.items():
        assert same_shape(tensors[name][1], array), name
        assert tensors[name][2] == c_order_little_endian(array), name


def test_npz_written_by_ckpt_loads_in_numpy(tmp_path, run):
    state = numpy_state()
    safetensors.numpy.save_file({k: v for k, v in state.items() if v.dtype.kind != "c"},
                                str(tmp_path / "s.safetensors"))
    for extras in [[], ["--no-extras"]]:
        out = tmp_path / f"out{len(extras)}.npz"
        run("convert", tmp_path / "s.safetensors", out, *extras)
        with np.load(out) as loaded, zipfile.ZipFile(out) as archive:
            assert archive.testzip() is None
            for name, array in state.items():
                if array.dtype.kind == "c":
                    continue
                assert loaded[name].dtype == array.dtype, name
                assert loaded[name].shape == array.shape, name
                assert loaded[name].tobytes() == array.tobytes(), name


def test_plain_npz_is_byte_identical_to_np_savez(tmp_path, run):
    state = numpy_state()
    np.savez(tmp_path / "ref.npz", **state)
    run("convert", tmp_path / "ref.npz", tmp_path / "ckpt.npz", "--no-extras")
    assert (tmp_path / "ckpt.npz").read_bytes() == (tmp_path / "ref.npz").read_bytes()


def test_default_npz_aligns_every_array_to_64_bytes(tmp_path, run, inspect_json):
    np.savez(tmp_path / "ref.npz", **numpy_state())
    run("convert", tmp_path / "ref.npz", tmp_path / "ckpt.npz")
    for tensor in inspect_json(tmp_path / "ckpt.npz")["tensors"]:
        assert tensor["offset"] % 64 == 0, tensor


def test_npz_with_tied_arrays_is_read_by_numpy_and_zipfile(tmp_path, run, inspect_json):
    """Ties (here: two keys of one torch storage) are stored once; ckpt names
    the alias in the zip archive comment, which np.load and zipfile ignore."""
    embed = torch.arange(512 * 16, dtype=torch.float32).reshape(512, 16)
    torch.save({"embed": embed, "bias": torch.ones(16), "head": embed}, tmp_path / "tied.pt")
    run("convert", tmp_path / "tied.pt", tmp_path / "tied.npz")
    path = tmp_path / "tied.npz"
    assert path.stat().st_size < 2 * embed.numel() * 4
    with np.load(path) as loaded, zipfile.ZipFile(path) as archive:
        assert loaded.files == ["embed", "bias"]
        assert np.array_equal(loaded["embed"], embed.numpy())
        assert archive.testzip() is None
        assert archive.namelist() == ["embed.npy", "bias.npy"]
        assert archive.comment.startswith(b"ckpt:")
        assert json.loads(archive.comment[len(b"ckpt:"):]) == {"version": 1, "aliases": {"head": "embed"}}
    assert [t["name"] for t in inspect_json(path)["tensors"]] == ["embed", "bias"]
    # ckpt reads the alias back as a tie: safetensors gets it as its own alias.
    run("convert", path, tmp_path / "tied.safetensors")
    tensors, metadata = raw_safetensors(tmp_path / "tied.safetensors")
    assert sorted(tensors) == ["bias", "embed"]
    assert json.loads(metadata["ckpt"])["aliases"] == {"head": "embed"}


def test_npy_is_byte_identical_to_np_save(tmp_path, run):
    for i, (name, array) in enumerate({**numpy_state(), **odd_layouts()}.items()):
        np.save(tmp_path / f"{i}.npy", array)
        run("convert", tmp_path / f"{i}.npy", tmp_path / f"{i}-ckpt.npy")
        reference = io.BytesIO()
        np.save(reference, np.array(array, order="C").astype(array.dtype.newbyteorder("<")))
        assert (tmp_path / f"{i}-ckpt.npy").read_bytes() == reference.getvalue(), name


def test_ten_thousand_arrays(tmp_path, run, inspect_json):
    state = {f"layers.{i}.w": np.full((3,), i, dtype=np.float32) for i in range(10000)}
    np.savez(tmp_path / "many.npz", **state)
    assert len(inspect_json(tmp_path / "many.npz")["tensors"]) == 10000
    run("convert", tmp_path / "many.npz", tmp_path / "back.npz")
    with np.load(tmp_path / "back.npz") as loaded:
        assert loaded.files == list(state)
        assert loaded["layers.9999.w"].tolist() == [9999.0] * 3


def test_ml_dtypes_void_arrays_are_unsupported_not_guessed(tmp_path, run):
    # np.save writes an ml_dtypes bfloat16 array with descr '<V2': the type is lost.
    np.save(tmp_path / "bf16.npy", np.arange(4, dtype=ml_dtypes.bfloat16))
    result = run("inspect", tmp_path / "bf16.npy", expect=2)
    assert "bfloat16" in result.stderr and result.stderr.count("\n") == 1
    # And ckpt refuses to write bfloat16 to npz rather than lose the type.
    safetensors.numpy.save_file({"w": np.arange(4, dtype=ml_dtypes.bfloat16)}, str(tmp_path / "bf.safetensors"))
    result = run("convert", tmp_path / "bf.safetensors", tmp_path / "bf.npz", expect=2)
    assert "bfloat16" in result.stderr
    assert not (tmp_path / "bf.npz").exists()


def test_corrupt_npz_is_reported_with_member_and_offset(tmp_path, run):
    np.savez(tmp_path / "s.npz", w=np.arange(100, dtype=np.float32))
    data = bytearray((tmp_path / "s.npz").read_bytes())
    data[-200] ^= 0xFF  # inside w's data
    (tmp_path / "bad.npz").write_bytes(bytes(data))
    result = run("verify", tmp_path / "bad.npz", expect=1)
    assert "bad.npz" in result.stderr and "w.npy" in result.stderr and "CRC" in result.stderr


def test_torch_style_zip_is_not_taken_for_npz(tmp_path, run):
    with zipfile.ZipFile(tmp_path / "model.pt", "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    result = run("inspect", tmp_path / "model.pt", "--json", expect=None)
    if result.returncode == 0:
        assert json.loads(result.stdout)["format"] != "npz"
    else:
        assert result.returncode == 2 and "npz" not in result.stderr
