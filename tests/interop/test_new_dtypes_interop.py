"""The dtypes torch 2.13 and safetensors 0.8 added (float8_e4m3fnuz,
float8_e5m2fnuz, float8_e8m0fnu, float4_e2m1fn_x2) against the real packages,
both directions: files torch.save and safetensors.torch.save_file write are
read by ckpt bit-exact, and files ckpt writes are read by torch.load and
safetensors.torch.load_file with the same bytes, dtypes and shapes.

float4_e2m1fn_x2 packs two 4-bit values per byte: torch's shape counts bytes,
the safetensors header (dtype F4) counts values, so its last dimension is
twice torch's; ckpt keeps torch's shape."""

import pytest
import safetensors.torch
import torch

from conftest import raw_safetensors

NEW = {
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4",
}
SHAPES = {"matrix": (3, 4), "empty": (0, 2), "row": (1, 5)}


def every_byte(dtype_name, shape, seed):
    """A tensor of `dtype_name` holding every byte value 0..255 in turn (NaNs,
    fnuz's 0x80, e8m0's 0xFF included), shifted by `seed`."""
    count = 1
    for size in shape:
        count *= size
    raw = (torch.arange(count, dtype=torch.int64) * 37 + seed) % 256
    return raw.to(torch.uint8).reshape(shape).view(getattr(torch, dtype_name))


def state():
    out = {}
    for seed, name in enumerate(NEW):
        for label, shape in SHAPES.items():
            out[f"{name}.{label}"] = every_byte(name, shape, seed)
    # 0-d tensors of the 8-bit types (F4 needs a last dimension).
    for name in ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]:
        out[f"{name}.scalar"] = torch.tensor(0x80, dtype=torch.uint8).view(getattr(torch, name))
    return out


def as_bytes(tensor):
    return tensor.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()


def assert_same(got, expected):
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype, name
        assert tuple(got[name].shape) == tuple(tensor.shape), name
        assert as_bytes(got[name]) == as_bytes(tensor), name


def ckpt_lists(info, expected):
    """ckpt inspect --json names every tensor with ckpt's dtype and torch's shape."""
    listed = {t["name"]: t for t in info["tensors"]}
    assert set(listed) == set(expected)
    for name, tensor in expected.items():
        assert listed[name]["dtype"] == str(tensor.dtype).removeprefix("torch."), name
        assert listed[name]["shape"] == list(tensor.shape), name
        assert listed[name]["nbytes"] == tensor.numel(), name


def test_safetensors_files_are_read_bit_exact(tmp_path, run, inspect_json):
    expected = state()
    src = tmp_path / "peer.safetensors"
    safetensors.torch.save_file(expected, str(src))
    header, _ = raw_safetensors(src)
    assert header["float4_e2m1fn_x2.matrix"][:2] == ("F4", [3, 8])  # what the peer wrote: values, not bytes
    assert header["float8_e8m0fnu.matrix"][0] == "F8_E8M0"
    ckpt_lists(inspect_json(src), expected)
    run("verify", src)
    # Through ckpt's own files and back to the peer's: the same tensors.
    for target in ["copy.safetensors", "copy.pt"]:
        run("convert", src, tmp_path / target, "--no-extras")
    assert_same(safetensors.torch.load_file(str(tmp_path / "copy.safetensors")), expected)
    assert_same(torch.load(tmp_path / "copy.pt", weights_only=True), expected)
    # Byte for byte the peer's header and data (ckpt orders as the reference does).
    ours, _ = raw_safetensors(tmp_path / "copy.safetensors")
    assert ours == header


def test_torch_files_are_read_bit_exact(tmp_path, run, inspect_json):
    expected = state()
    # A view into a shared storage too: offset and strides survive.
    base = every_byte("float8_e5m2fnuz", (4, 6), 9)
    expected["view"] = base[1:, ::2]
    src = tmp_path / "peer.pt"
    torch.save(expected, src)
    ckpt_lists(inspect_json(src), expected)
    run("convert", src, tmp_path / "copy.safetensors", "--no-extras")
    assert_same(safetensors.torch.load_file(str(tmp_path / "copy.safetensors")), expected)
    run("convert", src, tmp_path / "copy.pt")
    assert_same(torch.load(tmp_path / "copy.pt", weights_only=True), expected)


@pytest.mark.parametrize("extras", [True, False])
def test_ckpt_files_load_in_the_peers(tmp_path, run, extras):
    # The peer writes, ckpt rewrites (with and without its extras): what the
    # peers load from ckpt's files equals what they wrote.
    expected = state()
    src = tmp_path / "peer.safetensors"
    safetensors.torch.save_file(expected, str(src))
    flag = [] if extras else ["--no-extras"]
    run("convert", src, tmp_path / "ckpt.safetensors", *flag)
    assert_same(safetensors.torch.load_file(str(tmp_path / "ckpt.safetensors")), expected)
    run("convert", tmp_path / "ckpt.safetensors", tmp_path / "ckpt.pt")
    assert_same(torch.load(tmp_path / "ckpt.pt", weights_only=True), expected)
    # torch.load's default (weights_only) path knows no other globals: the
    # dtype is a torch.<name> global and the storage untyped, as torch writes.
    assert_same(torch.load(tmp_path / "ckpt.pt"), expected)


def test_odd_float4_values_per_row_are_refused_with_the_entry_named(tmp_path, run):
    # Valid safetensors (6 values, 3 bytes) that torch refuses too: the last
    # dimension holds no whole number of packed bytes.
    import json
    import struct

    header = json.dumps({"w": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x01\x02\x03")
    with pytest.raises(Exception, match="divisible by 2"):
        safetensors.torch.load_file(str(path))
    result = run("inspect", path, expect=None)
    assert result.returncode != 0
    assert "odd last dimension" in result.stderr and "w" in result.stderr
