"""The Python package `ckpt` against numpy, torch and safetensors: round trips,
zero copy, lifetimes, the handle, the tools, errors, the CLI and threads.
Expected values always come from numpy / torch / safetensors, never from ckpt.

Run: .venv/bin/python -m pytest tests/python -q
"""

import base64
import concurrent.futures
import gc
import inspect as pyinspect
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch
from torch import nn

import ckpt

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("CKPT_TOOL", str(ROOT / "build" / "ckpt"))

ML_DTYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]
NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128"]
DTYPES = NUMPY_DTYPES + ML_DTYPES
SHAPES = {"matrix": (3, 5), "scalar": (), "empty": (0,), "zero_size": (2, 0, 3), "vector": (7,)}
EXT = {"safetensors": ".safetensors", "torch": ".pt", "npz": ".npz"}
FORMATS = list(EXT)


# ---------------------------------------------------------------- helpers

def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name)) if name in ML_DTYPES else np.dtype(name)


def random_array(dtype, shape, seed):
    """Every bit pattern of `dtype` (NaN payloads, subnormals...), reproducibly."""
    dt, rng = np_dtype(dtype), np.random.default_rng(seed)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(0, 256, size=math.prod(shape) * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


def flat_state(dtype, seed=0):
    return {name: random_array(dtype, shape, seed * 100 + i) for i, (name, shape) in enumerate(SHAPES.items())}


def to_torch(value):
    """numpy arrays (ml_dtypes included) in a nest -> torch tensors, bit for bit."""
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_torch(v) for v in value)
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype.name in ML_DTYPES:
        bits = np.uint16 if value.dtype.itemsize == 2 else np.uint8
        return torch.from_numpy(value.view(bits).copy()).view(getattr(torch, value.dtype.name))
    return torch.from_numpy(value.copy())


def raw_bytes(x):
    if isinstance(x, torch.Tensor):
        return x.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(x).tobytes()


def assert_tensor(got, expected, framework="numpy", where=""):
    name = str(expected.dtype).removeprefix("torch.") if isinstance(expected, torch.Tensor) else expected.dtype.name
    if framework == "torch":
        assert isinstance(got, torch.Tensor) and got.dtype == getattr(torch, name), (where, type(got), got.dtype)
    else:
        assert isinstance(got, np.ndarray) and got.dtype == np_dtype(name), (where, type(got), got.dtype)
    assert tuple(got.shape) == tuple(expected.shape), where
    assert raw_bytes(got) == raw_bytes(expected), where


def assert_same(got, expected, framework="numpy", where=""):
    """Exactly equal: tensors bit for bit, floats by their bits, tuples as
    lists, key order kept, bool never standing in for int."""
    if isinstance(expected, (np.ndarray, torch.Tensor)):
        assert_tensor(got, expected, framework, where)
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), (where, got)
        for key, value in expected.items():
            assert_same(got[key], value, framework, f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert type(got) is list and len(got) == len(expected), (where, got)
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_same(a, b, framework, f"{where}.{i}")
    elif isinstance(expected, float):
        assert type(got) is float and struct.pack("<d", got) == struct.pack("<d", expected), (where, got)
    else:
        assert type(got) is type(expected) and got == expected, (where, got, expected)


def by_name(mapping):
    return dict(sorted(mapping.items()))


def float_bits(bits):
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def value_state():
    return {"ints": [0, 1, -1, 2**31, 2**63 - 1, -2**63],
            "floats": [0.0, -0.0, 1.5, 5e-324, 1.7976931348623157e308, math.inf, -math.inf, math.nan,
                       float_bits(0xfff8000000000000), float_bits(0x7ff0000000000001), float_bits(0x7ff80000deadbeef)],
            "bools": [True, False], "none": None,
            "text": ["", "ascii", "ünïcödé 名前 🎉", "quote \" backslash \\ newline \n nul \x00"],
            "blobs": [b"", bytes(range(256))],
            "nested": [[[]], {}, [{}], (), [None, [1, [2.5, ["deep"]]]]],
            "mixed_keys": {1: "one", "x": 2, -5: None, "名前": b"\x00"},
            "tuple": (1, "two", (3.0,))}


def tree_state():
    return dict(value_state(), **{
        "model": {"encoder.weight": random_array("float32", (4, 3), 1), "bias": random_array("bfloat16", (3,), 2)},
        "optimizer": {"state": {0: {"step": random_array("int64", (), 3), "exp_avg": random_array("float16", (4, 3), 4)},
                                1: {"step": 7}},
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1], "amsgrad": False}]},
        "a.b": random_array("int8", (2,), 5), "a": {"b": random_array("int8", (2,), 6)}})


def non_tensor_leaves(state, prefix=""):
    """{dotted name: value} of the non-tensor leaves (empty containers are no leaves)."""
    out = {}
    for key, value in (state.items() if isinstance(state, dict) else enumerate(state)):
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, (dict, list, tuple)):
            out.update(non_tensor_leaves(value, name))
        elif not isinstance(value, (np.ndarray, torch.Tensor)):
            out[name] = value
    return out


def raw_safetensors_header(path):
    """The test's own safetensors header reader: (data start, {name: entry})."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return 8 + n, header


def zip_records(path):
    """{record name: (data offset, CRC-32)} read with zipfile + struct."""
    data, out = pathlib.Path(path).read_bytes(), {}
    for info in zipfile.ZipFile(path).infolist():
        n, m = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
        out[info.filename] = (info.header_offset + 30 + n + m, info.CRC)
    return out


def mapped_regions(path):
    target, regions = os.path.realpath(path), []
    for line in pathlib.Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].removesuffix(" (deleted)") == target:
            regions.append(tuple(int(x, 16) for x in parts[0].split("-")))
    return regions


def inside(address, nbytes, regions):
    return any(lo <= address and address + nbytes <= hi for lo, hi in regions)


def rss_bytes():
    line = next(l for l in pathlib.Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def write_with(writer, path, state):
    """Writes `state` with a reference writer."""
    if writer == "safetensors":
        safetensors.torch.save_file(to_torch(state), str(path))
    elif writer == "torch.save":
        torch.save(to_torch(state), path)
    else:
        with open(path, "wb") as f:
            getattr(np, writer.removeprefix("np."))(f, **state)
    return path


# ---------------------------------------------------------------- round trips

ROUND_TRIPS = [(d, f) for d in DTYPES for f in FORMATS if not (f == "npz" and d in ML_DTYPES)]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("source", ["numpy", "torch"])
@pytest.mark.parametrize("dtype,fmt", ROUND_TRIPS)
def test_tensor_round_trip_is_bit_exact(tmp_path, dtype, fmt, source, framework):
    expected = flat_state(dtype, seed=DTYPES.index(dtype))
    path = tmp_path / f"state{EXT[fmt]}"
    ckpt.save(path, expected if source == "numpy" else to_torch(expected), format=fmt)
    assert_same(ckpt.load(path, framework=framework), expected, framework)


@pytest.mark.parametrize("dtype,fmt", ROUND_TRIPS)
def test_reference_readers_read_what_ckpt_wrote(tmp_path, dtype, fmt):
    expected = flat_state(dtype, seed=7)
    path = tmp_path / f"state{EXT[fmt]}"
    ckpt.save(path, to_torch(expected), format=fmt)
    if fmt == "npz":
        with np.load(path) as loaded:
            assert_same({k: loaded[k] for k in loaded.files}, expected)
    elif fmt == "torch":
        assert_same(torch.load(path, weights_only=True), expected, "torch")
    else:
        loaded = safetensors.torch.load_file(path)
        if dtype == "complex128":  # stored as its float64 view with a trailing 2 (docs/formats/safetensors.md)
            expected = {k: v.reshape(v.shape + (1,)).view(np.float64) for k, v in expected.items()}
        assert_same({k: loaded[k] for k in expected}, expected, "torch")


@pytest.mark.parametrize("writer,dtype", [("safetensors", d) for d in DTYPES if d != "complex128"]
                         + [("np.savez", d) for d in NUMPY_DTYPES])
def test_plain_files_are_byte_identical_to_the_reference_writer(tmp_path, writer, dtype):
    state = flat_state(dtype, seed=3)
    write_with(writer, tmp_path / "ref", state)
    ckpt.save(tmp_path / "ckpt", to_torch(state), format="npz" if writer == "np.savez" else writer, extras=False)
    assert (tmp_path / "ckpt").read_bytes() == (tmp_path / "ref").read_bytes()


WRITERS = ["safetensors", "torch.save", "np.savez", "np.savez_compressed"]


@pytest.mark.parametrize("writer,dtype", [(w, d) for w in WRITERS for d in DTYPES
                                          if not (w.startswith("np") and d in ML_DTYPES)
                                          and not (w == "safetensors" and d == "complex128")])
def test_files_from_reference_writers_load_bit_exact(tmp_path, writer, dtype):
    expected = flat_state(dtype, seed=11)
    path = write_with(writer, tmp_path / "ref.bin", expected)
    for framework in ("numpy", "torch"):
        assert_same(by_name(ckpt.load(path, framework=framework)), by_name(expected), framework)


@pytest.mark.parametrize("writer,reader", [
    ("ckpt:safetensors", "ckpt:numpy"), ("ckpt:safetensors", "ckpt:torch"), ("ckpt:torch", "ckpt:numpy"),
    ("ckpt:torch", "ckpt:torch"), ("ckpt:torch", "torch.load"), ("torch.save", "ckpt:numpy"),
    ("torch.save", "ckpt:torch"), ("ckpt:safetensors", "values-only"), ("ckpt:torch", "values-only")])
def test_nested_state_round_trips(tmp_path, writer, reader):
    expected = value_state() if reader == "values-only" else tree_state()
    path = tmp_path / "tree.bin"
    if writer == "torch.save":
        torch.save(to_torch(expected), path)
    else:
        ckpt.save(path, expected, format=writer.removeprefix("ckpt:"))
    if reader == "torch.load":
        assert_same(torch.load(path, weights_only=True), expected, "torch")
    else:
        framework = "torch" if reader == "ckpt:torch" else "numpy"
        assert_same(ckpt.load(path, framework=framework), expected, framework)


@pytest.mark.parametrize("state,path,match", [
    ({"x": 2**63}, "a.safetensors", "64 bits"), ({"x": -2**63 - 1}, "a.pt", "64 bits"),
    ({"x": {10**30: 1}}, "a.safetensors", "64 bits"), ({"x": {2**64: 1}}, "a.pt", "64 bits"),
    *[({"w": random_array(d, (2,), 0)}, "a.npz", d) for d in ML_DTYPES],
    ({"name": "str"}, "a.safetensors:plain", "'name'"), ({"l": [np.ones(1)]}, "a.safetensors:plain", "'l"),
    ({"w": np.ones(1), "v": 1}, "a.npy", "one tensor")])
def test_what_a_format_cannot_hold_is_refused(tmp_path, state, path, match):
    path, _, plain = path.partition(":")
    with pytest.raises(ckpt.UnsupportedError, match=match):
        ckpt.save(tmp_path / path, state, extras=not plain)
    assert not os.listdir(tmp_path)


AWKWARD = {
    "strided": lambda: np.arange(40, dtype=np.float32).reshape(4, 10)[:, ::3],
    "fortran": lambda: np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    "big_endian": lambda: np.arange(6, dtype=">f8").reshape(2, 3),
    "numpy_scalar": lambda: np.float32(1.5),
    "torch_transposed": lambda: torch.arange(12, dtype=torch.float64).reshape(3, 4).t(),
    "torch_conj": lambda: torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj(),
    "torch_neg_view": lambda: torch._neg_view(torch.arange(4.0)),
    "torch_parameter": lambda: nn.Parameter(torch.ones(3)),
    "torch_slice_of_storage": lambda: torch.arange(100, dtype=torch.int16)[10:20],
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", list(AWKWARD))
def test_awkward_inputs_store_their_values(tmp_path, kind, fmt):
    value = AWKWARD[kind]()
    if isinstance(value, torch.Tensor):
        expected = value.detach().resolve_conj().resolve_neg().contiguous().numpy()
    else:
        expected = np.asarray(value).astype(np.asarray(value).dtype.newbyteorder("="), order="C")
    ckpt.save(tmp_path / f"a{EXT[fmt]}", {"x": value}, format=fmt)
    assert_same(ckpt.load(tmp_path / f"a{EXT[fmt]}")["x"], expected)


@pytest.mark.parametrize("fmt,extras", [("safetensors", True), ("safetensors", False), ("torch", True),
                                        ("npz", True)])
@pytest.mark.parametrize("metadata", [{"author": "me"}, {"k": "v", "ü": "名前", "empty": ""}])
def test_metadata_is_kept_or_refused_never_dropped(tmp_path, fmt, extras, metadata):
    path = tmp_path / f"m{EXT[fmt]}"
    try:
        ckpt.save(path, {"w": np.ones(2, np.float32)}, metadata=metadata, extras=extras)
    except ckpt.UnsupportedError:  # acceptable where the format has no room for it
        assert fmt == "npz" and not path.exists()
        return
    with ckpt.open(path) as f:
        assert f.metadata == metadata
    if fmt == "safetensors":
        with safetensors.safe_open(str(path), "np") as f:
            stored = f.metadata()
        assert {k: v for k, v in stored.items() if k != "ckpt" or not extras} == metadata


# ---------------------------------------------------------------- zero copy, memory, lifetimes

@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.safetensors"
    big = np.arange(16 * 2**20, dtype=np.float32)  # 64 MiB
    safetensors.numpy.save_file({"big": big, "small": np.arange(10, dtype=np.int64)}, str(path))
    return path, big


@pytest.mark.parametrize("via", ["load", "open"])
def test_numpy_arrays_are_read_only_views_of_the_mapped_file(big_file, via):
    path, big = big_file
    if via == "load":
        arrays = ckpt.load(path)
    else:
        with ckpt.open(path) as f:
            arrays = {name: f.get(name) for name in f.keys()}
    regions = mapped_regions(path)
    assert regions, "the file is not mapped"
    for name, array in arrays.items():
        assert inside(array.ctypes.data, array.nbytes, regions), name
        assert array.flags.writeable is False
        with pytest.raises(ValueError):
            array[0] = 1
        with pytest.raises(ValueError):
            array.setflags(write=True)
    assert np.array_equal(arrays["big"], big)


def test_torch_tensors_are_writable_and_never_write_the_file(big_file):
    path, big = big_file
    before = path.read_bytes()
    t = ckpt.load(path, framework="torch")["big"]
    assert inside(t.data_ptr(), t.numel() * 4, mapped_regions(path))
    t[:1000] = -1.0
    t.mul_(2)
    assert t[0].item() == -2.0 and t[5000].item() == 10000.0
    assert path.read_bytes() == before
    assert np.array_equal(ckpt.load(path)["big"], big)  # a fresh load sees the file


def test_lazy_load_reads_nothing_until_touched(tmp_path):
    path, n = tmp_path / "huge.safetensors", 64 * 2**20  # float32: 256 MiB
    header = json.dumps({"huge": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    header += b" " * (-len(header) % 8)
    chunk = np.ones(4 * 2**20, dtype=np.float32).tobytes()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for _ in range(n * 4 // len(chunk)):
            f.write(chunk)
    gc.collect()
    before = rss_bytes()
    state = ckpt.load(path)
    assert rss_bytes() - before < 32 * 2**20
    assert state["huge"].sum(dtype=np.float64) == n
    assert rss_bytes() - before > 128 * 2**20  # the measure does see touched pages
    del state
    gc.collect()
    assert not mapped_regions(path)  # the last array gone, the mapping goes


def test_lazy_false_detaches_from_the_file(tmp_path):
    expected = random_array("float32", (1000,), 1)
    path = tmp_path / "w.safetensors"
    safetensors.numpy.save_file({"w": expected}, str(path))
    array = ckpt.load(path, lazy=False)["w"]
    assert not inside(array.ctypes.data, array.nbytes, mapped_regions(path))
    path.unlink()
    assert_tensor(array, expected)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("writer", ["safetensors", "torch.save", "np.savez"])
def test_arrays_outlive_handle_dict_and_file(tmp_path, writer, framework):
    expected = flat_state("float64", seed=5)
    path = write_with(writer, tmp_path / "s.bin", expected)
    with ckpt.open(path, framework=framework) as f:
        matrix = f.get("matrix")
    state = ckpt.load(path, framework=framework)
    vector = state["vector"]
    del f, state
    gc.collect()
    path.unlink()  # and the file is gone
    assert_tensor(matrix, expected["matrix"], framework)
    assert_tensor(vector, expected["vector"], framework)
    del matrix, vector
    gc.collect()
    assert not mapped_regions(path)  # the last array gone, the mapping goes


# ---------------------------------------------------------------- torch workflow

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.proj = nn.Embedding(50, 16), nn.Linear(16, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.norm, self.bn, self.head = nn.LayerNorm(32), nn.BatchNorm1d(32), nn.Linear(32, 8, bias=False)
        self.register_buffer("scale", torch.linspace(0.5, 2, 8).to(torch.bfloat16))

    def forward(self, ids):
        x = self.norm(self.layer(self.proj(self.emb(ids))))
        return self.head(self.bn(x.mean(1))) * self.scale.float()


def trained_net(seed):
    torch.manual_seed(seed)
    net = Net().train()
    net(torch.randint(0, 50, (4, 6)))  # BatchNorm's running stats move
    return net.eval()


@pytest.mark.parametrize("writer,ext,reader", [
    ("ckpt", ".safetensors", "ckpt"), ("ckpt", ".pt", "ckpt"), ("ckpt-plain", ".safetensors", "safetensors"),
    ("ckpt", ".safetensors", "safetensors"), ("ckpt", ".pt", "torch.load"), ("torch.save", ".pt", "ckpt"),
    ("safetensors", ".safetensors", "ckpt")])
def test_state_dict_round_trip_restores_the_model(tmp_path, writer, ext, reader):
    model = trained_net(0)
    path = tmp_path / f"model{ext}"
    if writer.startswith("ckpt"):
        ckpt.save(path, model.state_dict(), extras=writer == "ckpt")
    else:
        write_with(writer, path, model.state_dict())
    if reader == "ckpt":
        state = ckpt.load(path, framework="torch")
    elif reader == "torch.load":
        state = torch.load(path, weights_only=True)
    else:
        state = safetensors.torch.load_file(str(path))
    model2 = trained_net(1)
    model2.load_state_dict(state, strict=True)
    for name, tensor in model.state_dict().items():
        assert_tensor(model2.state_dict()[name], tensor, "torch", name)
    ids = torch.randint(0, 50, (3, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model2(ids), model(ids))


@pytest.mark.parametrize("ext", [".safetensors", ".pt"])
def test_training_checkpoint_resumes_identically(tmp_path, ext):
    def make():
        model = trained_net(0).train()
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(model, opt, seed):
        opt.zero_grad()
        model(torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(seed))).square().mean().backward()
        opt.step()

    (model, opt), (model2, opt2) = make(), make()
    step(model, opt, 0)
    ckpt.save(tmp_path / f"run{ext}", {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3})
    state = ckpt.load(tmp_path / f"run{ext}", framework="torch")
    model2.load_state_dict(state["model"])
    opt2.load_state_dict(state["optimizer"])
    assert state["epoch"] == 3
    step(model, opt, 1)
    step(model2, opt2, 1)
    for (name, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), name


# ---------------------------------------------------------------- the handle

@pytest.fixture
def reference_file(tmp_path):
    state = {f"layer.{i}.{d}": random_array(d, (i + 1, 2), i) for i, d in enumerate(DTYPES) if d != "complex128"}
    state["scalar"] = np.array(2.5, dtype=np.float32)
    path = tmp_path / "ref.safetensors"
    safetensors.torch.save_file(to_torch(state), str(path), metadata={"author": "me"})
    return path, state


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_handle_reads_index_and_tensors(reference_file, framework):
    path, state = reference_file
    base, header = raw_safetensors_header(path)
    order = sorted(header, key=lambda name: header[name]["data_offsets"])
    with ckpt.open(path, framework=framework) as f:
        assert f.keys() == order and list(f) == order and len(f) == len(state)
        assert f.format == "safetensors" and f.metadata == {"author": "me"}
        assert "layer.0.bool" in f and "nope" not in f and 3 not in f
        for name, array in state.items():
            info = f.info(name)
            begin, end = header[name]["data_offsets"]
            assert (info["dtype"], info["shape"], info["nbytes"]) == (array.dtype.name, array.shape, array.nbytes)
            assert (info["offset"], info["nbytes"]) == (base + begin, end - begin)
            assert_tensor(f.get(name), array, framework, name)
            assert_tensor(f.get_tensor(name), array, framework, name)
        assert repr(f).startswith("<ckpt.Checkpoint ") and not f.closed
    assert f.closed


def test_handle_values_and_tree(tmp_path):
    path = tmp_path / "tree.pt"
    torch.save(to_torch(tree_state()), path)
    with ckpt.open(path) as f:
        assert_same(f.tree(), tree_state())
        assert_same(f.value("optimizer.param_groups"), tree_state()["optimizer"]["param_groups"])
        assert_same(f.value("optimizer.state.0.step"), tree_state()["optimizer"]["state"][0]["step"])
        assert_same(f.values(), non_tensor_leaves(tree_state()))


@pytest.mark.parametrize("use", ["keys", "get", "info", "metadata", "values", "tree", "value", "iter", "len", "in"])
def test_closed_handle_refuses_use(reference_file, use):
    f = ckpt.open(reference_file[0])
    f.close()
    calls = {"keys": f.keys, "get": lambda: f.get("scalar"), "info": lambda: f.info("scalar"),
             "metadata": lambda: f.metadata, "values": f.values, "tree": f.tree, "value": lambda: f.value("scalar"),
             "len": lambda: len(f), "in": lambda: "scalar" in f, "iter": lambda: list(f)}
    with pytest.raises(ValueError, match="closed"):
        calls[use]()


@pytest.mark.parametrize("call", ["get", "info", "value"])
def test_missing_tensor_name_raises_key_error(reference_file, call):
    with ckpt.open(reference_file[0]) as f, pytest.raises(KeyError, match="nope"):
        getattr(f, call)("nope")


# ---------------------------------------------------------------- convert, inspect, verify, diff, formats

def test_convert_chain_keeps_every_bit(tmp_path):
    expected = by_name({f"w.{d}": random_array(d, (3, 2), i) for i, d in enumerate(NUMPY_DTYPES[:-1])})
    safetensors.numpy.save_file(expected, str(tmp_path / "a.safetensors"), metadata={"author": "me"})
    assert ckpt.convert(tmp_path / "a.safetensors", tmp_path / "b.pt") == "torch"
    assert_same(by_name(torch.load(tmp_path / "b.pt", weights_only=True)), expected, "torch")
    assert ckpt.convert(tmp_path / "b.pt", tmp_path / "c.bin", to="npz") == "npz"
    with np.load(tmp_path / "c.bin") as loaded:
        assert_same(by_name({k: loaded[k] for k in loaded.files}), expected)
    assert ckpt.convert(tmp_path / "b.pt", tmp_path / "d.safetensors", extras=False) == "safetensors"
    assert_same(by_name(safetensors.numpy.load_file(tmp_path / "d.safetensors")), expected)
    assert ckpt.open(tmp_path / "d.safetensors").metadata == {"author": "me"}


@pytest.mark.parametrize("state,match", [({"w": random_array("bfloat16", (2,), 0)}, "'w'"),
                                         ({"w": np.ones(2), "epoch": 3}, "'epoch'")])
def test_convert_refuses_what_the_target_cannot_hold(tmp_path, state, match):
    torch.save(to_torch(state), tmp_path / "a.pt")
    with pytest.raises(ckpt.UnsupportedError, match=match):
        ckpt.convert(tmp_path / "a.pt", tmp_path / "a.npz")
    assert not (tmp_path / "a.npz").exists()


def inspect_state():
    return {"model": {"w": random_array("float32", (4, 3), 0), "b": random_array("bfloat16", (3,), 1),
                      "step": np.array(5, dtype=np.int64)},
            "epoch": 4, "lr": 0.5, "loss": math.nan, "name": "run-名", "rng": b"\x01\xfe", "done": False, "none": None}


def json_value(value):
    if isinstance(value, bytes):
        return {"bytes_base64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def test_inspect_describes_the_file_as_the_cli_does(tmp_path):
    path = tmp_path / "s.pt"
    torch.save(to_torch(inspect_state()), path)
    info, records, tensors = ckpt.inspect(path), zip_records(path), inspect_state()["model"]
    assert (info["path"], info["format"], info["format_version"], info["checksum"]) == (str(path), "torch", 0, "crc32")
    assert [t["name"] for t in info["tensors"]] == ["model.w", "model.b", "model.step"]
    for i, t in enumerate(info["tensors"]):
        array, (offset, crc) = tensors[t["name"].removeprefix("model.")], records[f"s/data/{i}"]
        assert (t["dtype"], t["shape"], t["nbytes"]) == (array.dtype.name, list(array.shape), array.nbytes)
        assert (t["offset"], t["checksum"]) == (offset, f"{crc:08x}")
    assert_same(info["values"], non_tensor_leaves(inspect_state()))
    assert info["metadata"] == {} and info["total_nbytes"] == sum(a.nbytes for a in tensors.values())
    cli = json.loads(subprocess.run([CLI, "inspect", str(path), "--json"], capture_output=True, check=True).stdout)
    info["values"] = {k: json_value(v) for k, v in info["values"].items()}
    assert info == cli


def test_inspect_and_verify_count_a_tied_tensor_once_as_the_cli_does(tmp_path):
    path, shared = tmp_path / "tied.safetensors", np.arange(12, dtype=np.float32).reshape(4, 3)
    ckpt.save(path, {"embed": shared, "head": shared, "bias": np.ones(3, np.float16)})
    with ckpt.open(path) as f:
        assert sorted(f.keys()) == ["bias", "embed", "head"]  # the handle still names every tensor
    info = ckpt.inspect(path)
    assert [t["name"] for t in info["tensors"]] == ["embed", "bias"]
    assert info["total_nbytes"] == shared.nbytes + 6
    cli = json.loads(subprocess.run([CLI, "inspect", str(path), "--json"], capture_output=True, check=True).stdout)
    assert info == cli
    assert ckpt.verify(path) == {"tensors": 2, "nbytes": shared.nbytes + 6, "checksum": "xxh3"}


@pytest.mark.parametrize("checksum", ["xxh3", "crc32c", "none", "torch.save"])
def test_verify_passes_an_intact_file(tmp_path, checksum):
    state, path = flat_state("float32", seed=2), tmp_path / "s.safetensors"
    if checksum == "torch.save":
        write_with("torch.save", path, state)
    else:
        ckpt.save(path, state, checksum=checksum)
    kind = {"none": None, "torch.save": "crc32"}.get(checksum, checksum)
    assert ckpt.verify(path) == {"tensors": len(state), "nbytes": sum(a.nbytes for a in state.values()),
                                 "checksum": kind}


@pytest.mark.parametrize("how", ["verify", "load", "open"])
@pytest.mark.parametrize("writer", ["ckpt.save", "torch.save"])
def test_a_flipped_data_byte_is_named(tmp_path, writer, how):
    path = tmp_path / "s.bin"
    state = {"a": np.zeros(64, np.float32), "target": np.arange(64, dtype=np.float32)}
    if writer == "torch.save":
        write_with(writer, path, state)
        offset, entry = zip_records(path)["s/data/1"][0], "s/data/1"
    else:
        ckpt.save(path, state, format="safetensors")
        base, header = raw_safetensors_header(path)
        offset, entry = base + header["target"]["data_offsets"][0], "target"
    data = bytearray(path.read_bytes())
    data[offset + 17] ^= 0x10
    path.write_bytes(bytes(data))
    ckpt.load(path)  # without verify, nothing reads the checksums
    with pytest.raises(ckpt.CorruptCheckpointError) as error:
        {"verify": ckpt.verify, "load": lambda p: ckpt.load(p, verify=True),
         "open": lambda p: ckpt.open(p, verify=True)}[how](path)
    assert str(path) in str(error.value) and entry in str(error.value)
    assert (error.value.path, error.value.entry) == (str(path), entry) and error.value.reason


def test_diff(tmp_path):
    a = {"w": np.arange(6, dtype=np.float32), "v": np.ones(3, np.int64), "epoch": 3, "old": 1.0}
    torch.save(to_torch(a), tmp_path / "a.pt")
    ckpt.convert(tmp_path / "a.pt", tmp_path / "a.safetensors")
    same = ckpt.diff(tmp_path / "a.safetensors", tmp_path / "a.pt")
    assert same["identical"] is True and same["compared"] == 4
    b = dict(a, w=a["w"] + np.array([0, 0, 0.25, 0, 0, 0], np.float32), epoch=4, new=None)
    del b["old"]
    torch.save(to_torch(b), tmp_path / "b.pt")
    result = ckpt.diff(tmp_path / "a.safetensors", tmp_path / "b.pt")
    assert result["identical"] is False
    assert (result["a"], result["b"]) == (str(tmp_path / "a.safetensors"), str(tmp_path / "b.pt"))
    assert result["only_in_a"] == ["old"] and result["only_in_b"] == ["new"]
    assert [(d["name"], d["differing_elements"], d["numel"], d["max_abs_diff"])
            for d in result["value_differences"]] == [("w", 1, 6, 0.25)]
    assert result["leaf_differences"] == [{"name": "epoch", "a": 3, "b": 4}]
    tolerant = ckpt.diff(tmp_path / "a.safetensors", tmp_path / "b.pt", atol=0.5)
    assert tolerant["within_tolerance"] == ["w"] and not tolerant["value_differences"]
    cli = subprocess.run([CLI, "diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.pt"), "--json"],
                         capture_output=True)
    assert cli.returncode == 1 and json.loads(cli.stdout) == result


def test_convert_is_the_cli_s_conversion(tmp_path):
    state = {"model": {"w": np.arange(6, dtype=np.float32)}, "epoch": 3}
    ckpt.save(tmp_path / "a.safetensors", state)
    with pytest.raises(ValueError, match="cannot tell the target format"):
        ckpt.convert(tmp_path / "a.safetensors", tmp_path / "a.weights")
    assert ckpt.convert(tmp_path / "a.safetensors", tmp_path / "a.weights", "torch") == "torch"
    assert ckpt.load(tmp_path / "a.weights")["epoch"] == 3
    with pytest.raises(ckpt.UnsupportedError, match="'epoch'"):
        ckpt.convert(tmp_path / "a.safetensors", tmp_path / "a.npz")
    assert ckpt.convert(tmp_path / "a.safetensors", tmp_path / "a.npz", drop_unsupported=True) == "npz"
    assert set(ckpt.load(tmp_path / "a.npz")) == {"model.w"}


def test_formats():
    formats = {f["id"]: f for f in ckpt.formats()}
    assert {"safetensors", "torch", "npz", "npy"} <= set(formats)
    for f in formats.values():
        assert set(f) == {"id", "description", "extensions", "read", "write", "nested_tree", "lists_and_int_keys",
                          "checksums", "single_tensor", "metadata", "shards", "colliding_names", "ties",
                          "file_per_tensor", "state_file", "dtypes"}
        assert all(ext.startswith(".") for ext in f["extensions"]) and f["description"]
    assert ".safetensors" in formats["safetensors"]["extensions"] and ".pt" in formats["torch"]["extensions"]
    assert formats["safetensors"]["nested_tree"] is True and formats["npz"]["nested_tree"] is False
    assert formats["torch"]["lists_and_int_keys"] is True and formats["flax"]["lists_and_int_keys"] is False
    assert formats["torch"]["metadata"] is True and formats["npz"]["metadata"] is False
    assert formats["tf"]["shards"] is True and formats["npz"]["shards"] is False
    assert "bfloat16" in formats["safetensors"]["dtypes"] and "bfloat16" not in formats["npz"]["dtypes"]
    cli = json.loads(subprocess.run([CLI, "formats", "--json"], capture_output=True, check=True).stdout)
    assert cli["formats"] == ckpt.formats()


# ---------------------------------------------------------------- errors

MISSING_CALLS = {"load": ckpt.load, "open": ckpt.open, "inspect": ckpt.inspect, "verify": ckpt.verify,
                 "convert": lambda p: ckpt.convert(p, p.with_name("out.pt")), "diff": lambda p: ckpt.diff(p, p)}


@pytest.mark.parametrize("call", list(MISSING_CALLS))
def test_missing_file_raises_file_not_found(tmp_path, call):
    path = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError) as error:
        MISSING_CALLS[call](path)
    assert error.value.filename == str(path) and error.value.errno == 2
    assert not (tmp_path / "out.pt").exists()


def truncated(tmp_path, writer, keep):
    path = write_with(writer, tmp_path / "t.bin", {"w": np.arange(4096, dtype=np.float32), "v": np.ones(8, np.int8)})
    path.write_bytes(path.read_bytes()[:int(path.stat().st_size * keep)])
    return path


@pytest.mark.parametrize("keep", [0.002, 0.5, 0.99])
@pytest.mark.parametrize("writer", WRITERS)
def test_truncated_file_is_corrupt(tmp_path, writer, keep):
    path = truncated(tmp_path, writer, keep)
    for call in (ckpt.load, ckpt.inspect, ckpt.verify):
        with pytest.raises(ckpt.CorruptCheckpointError) as error:
            call(path)
        assert isinstance(error.value, ValueError) and error.value.path == str(path)
        assert str(error.value).startswith(f"{path}: ")


def test_unsupported_requests_raise_unsupported_and_leave_the_old_file(tmp_path):
    path = tmp_path / "s.safetensors"
    ckpt.save(path, {"step": 1})
    before = path.read_bytes()
    with pytest.raises(ckpt.UnsupportedError, match="bogus"):
        ckpt.save(path, {"step": 2}, format="bogus")
    with pytest.raises(ckpt.UnsupportedError, match="md5"):
        ckpt.save(path, {"step": 2}, checksum="md5")
    with pytest.raises(ckpt.UnsupportedError, match="bogus"):
        ckpt.convert(path, tmp_path / "x.out", to="bogus")
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["s.safetensors"]


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_torch_file_with_forbidden_global_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"w": torch.ones(2), "x": Evil(marker)}, tmp_path / "evil.pt")
    for call in (ckpt.load, ckpt.open, ckpt.inspect):
        with pytest.raises(ckpt.UnsupportedError, match="system") as error:
            call(tmp_path / "evil.pt")
        assert error.value.path == str(tmp_path / "evil.pt")
    assert not marker.exists()


@pytest.mark.parametrize("state,name", [
    ({"model": {"layers": [1, object()]}}, "'model.layers.1'"), ({"opt": {"s": {1, 2}}}, "'opt.s'"),
    ({"model": {1.5: 1}}, "'model.1.5'"), ({"model": {True: 1}}, "'model.True'"),
    ({"w": np.array(["a", "b"])}, "'w'"), ({"w": np.array([None])}, "'w'"),
    ({"w": torch.zeros(2, dtype=torch.complex32)}, "'w'")])
def test_unstorable_values_raise_type_error_naming_the_key(tmp_path, state, name):
    with pytest.raises(TypeError, match=name.replace(".", r"\.")):
        ckpt.save(tmp_path / "x.safetensors", state)
    assert not (tmp_path / "x.safetensors").exists()


def test_exception_types_and_bad_arguments(tmp_path):
    for cls in (ckpt.CorruptCheckpointError, ckpt.UnsupportedError, ckpt.MismatchError):
        assert issubclass(cls, ckpt.CheckpointError) and issubclass(cls, ValueError)
    assert not issubclass(ckpt.CheckpointError, ValueError)
    ckpt.save(tmp_path / "s.safetensors", {"step": 1})
    with pytest.raises(ValueError, match="framework"):
        ckpt.load(tmp_path / "s.safetensors", framework="jax")
    with pytest.raises(TypeError, match="metadata"):
        ckpt.save(tmp_path / "m.safetensors", {"step": 1}, metadata={"k": 1})
    cycle = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="cycle"):
        ckpt.save(tmp_path / "c.safetensors", {"a": cycle})


# ---------------------------------------------------------------- the command line

@pytest.mark.parametrize("case,rc", [("ok", 0), ("corrupt", 1), ("missing", 2)])
def test_python_m_ckpt_matches_the_cli(tmp_path, case, rc):
    path = tmp_path / "missing.safetensors"
    if case == "ok":
        path = tmp_path / "ok.pt"
        torch.save(to_torch(inspect_state()), path)
    elif case == "corrupt":
        path = truncated(tmp_path, "safetensors", 0.99)
    args = ["inspect", str(path), "--json"]
    native = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60)
    python = subprocess.run([sys.executable, "-m", "ckpt", *args], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path)
    assert (python.returncode, python.stdout, python.stderr) == (native.returncode, native.stdout, native.stderr)
    assert native.returncode == rc
    if rc == 0:
        assert [t["name"] for t in json.loads(python.stdout)["tensors"]] == ["model.w", "model.b", "model.step"]
    else:
        assert python.stdout == "" and str(path) in python.stderr


# ---------------------------------------------------------------- threads

def check_load(path, expected, n):
    framework = ("numpy", "torch")[n % 2]
    if n % 3 == 0:
        with ckpt.open(path, framework=framework) as f:
            got = {name: f.get(name) for name in expected}
    else:
        got = ckpt.load(path, framework=framework, lazy=n % 4 != 1)
    assert_same(by_name(got), by_name(expected), framework)
    return n


def test_concurrent_loads(tmp_path):
    files = [(write_with(w, tmp_path / f"f{i}.bin", flat_state(NUMPY_DTYPES[i + 8], seed=i)),
              flat_state(NUMPY_DTYPES[i + 8], seed=i)) for i, w in enumerate(["safetensors", "torch.save", "np.savez"])]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        jobs = [pool.submit(check_load, *files[n % 3], n) for n in range(96)]
        assert sorted(job.result() for job in jobs) == list(range(96))


def test_concurrent_saves_and_loads(tmp_path):
    def work(n):
        state = {"w": random_array("float32", (256, 64), n), "b": random_array("bfloat16", (64,), n), "n": n}
        path = tmp_path / f"own{n}{EXT[FORMATS[n % 2]]}"
        ckpt.save(path, state if n % 4 < 2 else to_torch(state))
        assert_same(ckpt.load(path), state)
        return n

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(work, range(48))) == list(range(48))
    assert gc.isenabled()  # save/load pause the collector; the last one out turns it back on


FIRST_USE = """
import sys, threading
import ckpt
start, states = threading.Barrier(8), []
def work():
    start.wait()
    states.append(ckpt.load(sys.argv[1]))
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads], [t.join() for t in threads]
print(sorted(str(s[k].dtype) for s in states for k in s) == ["bfloat16"] * 8 + ["float32"] * 8)
"""


def test_concurrent_first_use_in_a_fresh_process(tmp_path):
    path = tmp_path / "s.safetensors"
    safetensors.torch.save_file({"w": torch.tensor([1.0, 2.0]), "b": torch.ones(3, dtype=torch.bfloat16)}, str(path))
    result = subprocess.run([sys.executable, "-c", FIRST_USE, str(path)], capture_output=True, text=True, timeout=10)
    assert result.stdout == "True\n", result.stderr


# ---------------------------------------------------------------- documentation

@pytest.mark.parametrize("name", ckpt.__all__)
def test_public_names_are_documented(name):
    obj = getattr(ckpt, name)
    assert obj.__doc__ and obj.__doc__.strip(), name
    if pyinspect.isfunction(obj):
        signature = pyinspect.signature(obj)
        assert signature.return_annotation is not pyinspect.Signature.empty, name
        assert all(p.annotation is not pyinspect.Parameter.empty for p in signature.parameters.values()), name
