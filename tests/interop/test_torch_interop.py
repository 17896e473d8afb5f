"""ckpt against the real PyTorch (torch.save / torch.load), both directions.

The truth is always what torch itself saved or loads; ckpt's own outputs are
only ever compared against it."""

import builtins
import collections
import json
import math
import os
import pickle
import struct
import subprocess
import zipfile

import pytest
import safetensors.torch
import torch
from torch import nn

from conftest import raw_safetensors, samples

DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16,
          torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2]
LAYOUTS = ["zip", "legacy"]
ALL_LAYOUTS = LAYOUTS + ["zip-protocol5"]  # torch.save(pickle_protocol=5): FRAME, MEMOIZE, BYTEARRAY8...


# ---------------------------------------------------------------- helpers

def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def random_tensor(dtype, shape, seed):
    """Every bit pattern of `dtype` (NaN payloads, subnormals...), reproducibly."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (math.prod(shape) * itemsize,), dtype=torch.uint8, generator=gen)
    return raw.view(dtype).reshape(shape)


def raw(tensor):
    """The tensor's elements in C order, as bytes."""
    return tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def save(obj, path, layout="zip", **kwargs):
    torch.save(obj, path, _use_new_zipfile_serialization=layout.startswith("zip"),
               pickle_protocol=5 if layout.endswith("protocol5") else 2, **kwargs)
    return path


def flatten(obj, prefix=""):
    """{dotted name: tensor} as ckpt names tree leaves (no dots inside keys here)."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else []
    out = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def strides(tensor):
    return [s for s, n in zip(tensor.stride(), tensor.shape) if n > 1]


def sharing(flat):
    """name -> (the names sharing its storage, its byte offset from the group's lowest tensor)."""
    groups = collections.defaultdict(list)
    for name, tensor in flat.items():
        if tensor.numel():
            groups[tensor.untyped_storage().data_ptr()].append(name)
    out = {}
    for names in groups.values():
        low = min(flat[n].data_ptr() for n in names)
        for n in names:
            out[n] = (frozenset(names), flat[n].data_ptr() - low)
    return out


def assert_same(actual, expected, path="root", same_strides=True):
    """Torch values equal bit for bit; tuples come back as lists, bytearrays as bytes."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), path
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), path
        assert raw(actual) == raw(expected), path
        if same_strides:
            assert strides(actual) == strides(expected), path
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert list(actual) == list(expected), path
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}.{key}", same_strides)
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is list and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}.{i}")
    elif isinstance(expected, float):
        assert type(actual) is float and struct.pack("<d", actual) == struct.pack("<d", expected), path
    elif isinstance(expected, (bytes, bytearray)):
        assert type(actual) is bytes and actual == bytes(expected), path
    else:
        assert type(actual) is type(expected) and actual == expected, path


def check_inspect(info, truth):
    """ckpt's listing against torch's own tensors: names, dtypes, shapes, sizes."""
    listed = {t["name"]: t for t in info["tensors"]}
    assert info["format"] == "torch"
    assert set(listed) == set(truth)
    for name, tensor in truth.items():
        assert listed[name]["dtype"] == dtype_name(tensor.dtype), name
        assert listed[name]["shape"] == list(tensor.shape), name
        assert listed[name]["nbytes"] == tensor.numel() * tensor.element_size(), name
    return listed


def check_safetensors(path, truth):
    """A ckpt-written safetensors file holds each tensor's bytes exactly; tied
    tensors once, the other names as aliases of the stored one."""
    ours, metadata = raw_safetensors(path)
    aliases = json.loads(metadata["ckpt"]).get("aliases", {}) if metadata and "ckpt" in metadata else {}
    assert set(ours) == set(truth) - set(aliases)
    for name, tensor in truth.items():
        assert ours[aliases.get(name, name)][2] == raw(tensor), name


def full_check(tmp_path, run, inspect_json, src, truth=None):
    """torch.load(src) (or what was saved) is the truth: inspect, .safetensors and .pt through ckpt."""
    truth = torch.load(src, weights_only=True) if truth is None else truth
    flat = flatten(truth)
    check_inspect(inspect_json(src), flat)
    run("convert", src, tmp_path / "via.safetensors")
    check_safetensors(tmp_path / "via.safetensors", flat)
    out = tmp_path / "ckpt.pt"
    run("convert", src, out)
    ours = torch.load(out)  # default: weights_only=True
    assert_same(ours, truth)
    assert_same(torch.load(out, mmap=True), truth)
    assert sharing(flatten(ours)) == sharing(flat)
    return out


def make_transformer(seed):
    torch.manual_seed(seed)
    return nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                          dim_feedforward=32, dropout=0.0, batch_first=True)


def transformer_batch(seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 16, generator=gen), torch.randn(2, 4, 16, generator=gen)


def trained(seed):
    model = make_transformer(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    src, tgt = transformer_batch(seed)
    model(src, tgt).square().mean().backward()
    opt.step()
    opt.zero_grad()
    return model, opt


def record_data_offset(path, record):
    """File offset of a zip record's first data byte (from its local header)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(record)
    data = path.read_bytes()
    start = info.header_offset
    assert data[start:start + 4] == b"PK\x03\x04"
    name_len, extra_len = struct.unpack("<HH", data[start + 26:start + 30])
    return start + 30 + name_len + extra_len


# ---------------------------------------------------------------- torch writes, ckpt reads

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_every_dtype_is_read_bit_exact(tmp_path, run, inspect_json, dtype, layout):
    base = random_tensor(dtype, (3, 5), DTYPES.index(dtype))
    state = {"t": base, "t_transposed": base.t(), "row": base[1, 1:4],
             "scalar": random_tensor(dtype, (), 100), "empty": random_tensor(dtype, (0, 4), 0)}
    src = save(state, tmp_path / "in.pt", layout)
    listed = check_inspect(inspect_json(src), state)
    data = src.read_bytes()
    for name in ["t", "row", "scalar"]:  # contiguous: the listed offset points at the bytes
        entry = listed[name]
        assert entry["offset"] > 0, name
        assert data[entry["offset"]:entry["offset"] + entry["nbytes"]] == raw(state[name]), name
    # torch 2.13 cannot load its own legacy uint16/32/64 files: the saved object is the truth.
    full_check(tmp_path, run, inspect_json, src, truth=state)


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_views_shared_storages_and_parameters(tmp_path, run, inspect_json, layout):
    base = random_tensor(torch.float32, (6, 8), 1)
    cube = random_tensor(torch.int64, (2, 3, 4), 2)
    state = {
        "base": base, "tied": base, "transposed": base.t(), "sliced": base[1:4, 2:7],
        "stepped": base[::2, 1::3], "row": base[5], "expanded": base[0, :3].expand(4, 3),
        "permuted": cube.permute(2, 0, 1), "cube_tail": cube[1, 1:],
        "param": nn.Parameter(random_tensor(torch.float64, (4,), 3)),
        "alone_view": random_tensor(torch.float16, (5, 5), 4)[1:3].t(),
    }
    src = save(state, tmp_path / "in.pt", layout)
    assert not state["transposed"].is_contiguous() and not state["stepped"].is_contiguous()
    # torch's weights_only loader lacks protocol 5's FRAME: the saved object is the truth.
    out = full_check(tmp_path, run, inspect_json, src, truth=state)
    ours = torch.load(out)
    for name in ["tied", "transposed", "sliced", "stepped", "row", "expanded"]:
        assert ours[name].untyped_storage().data_ptr() == ours["base"].untyped_storage().data_ptr(), name
    assert ours["transposed"].stride() == base.t().stride()
    assert ours["expanded"].stride() == (0, 1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tied_weights_written_by_ckpt_share_one_storage(tmp_path, run, layout):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    torch.manual_seed(5)
    model = Tied()
    state = model.state_dict()
    state["emb_row"] = model.emb.weight.detach()[3]
    save(state, tmp_path / "tied.pt", layout)
    run("convert", tmp_path / "tied.pt", tmp_path / "ckpt.pt")
    ours = torch.load(tmp_path / "ckpt.pt")
    assert type(ours) is collections.OrderedDict
    ptr = ours["emb.weight"].untyped_storage().data_ptr()
    assert ours["head.weight"].untyped_storage().data_ptr() == ptr
    assert ours["emb_row"].untyped_storage().data_ptr() == ptr
    assert ours["emb_row"].data_ptr() - ours["emb.weight"].data_ptr() == 3 * 4 * 4
    assert_same(ours, state)
    fresh = Tied()
    del ours["emb_row"]
    fresh.load_state_dict(ours)
    assert raw(fresh.head.weight) == raw(model.emb.weight)


def test_transformer_state_dict_and_safetensors_round_trip(tmp_path, run, inspect_json):
    model = make_transformer(0)
    state = model.state_dict()
    src = save(state, tmp_path / "model.pt")
    check_inspect(inspect_json(src), state)
    src_b, tgt_b = transformer_batch(1)
    with torch.no_grad():
        expected = model(src_b, tgt_b)
    run("convert", src, tmp_path / "ckpt.pt")
    run("convert", src, tmp_path / "model.safetensors")
    assert_same(dict(sorted(safetensors.torch.load_file(tmp_path / "model.safetensors").items())),
                dict(sorted(state.items())))
    run("convert", tmp_path / "model.safetensors", tmp_path / "back.pt")
    for path in [tmp_path / "ckpt.pt", tmp_path / "back.pt"]:
        loaded = torch.load(path)
        assert type(loaded) is collections.OrderedDict
        assert_same(loaded, state)
        fresh = make_transformer(1)
        fresh.load_state_dict(loaded, strict=True)
        with torch.no_grad():
            assert torch.equal(fresh(src_b, tgt_b), expected), path.name


@pytest.mark.parametrize("layout", LAYOUTS)
def test_training_checkpoint_round_trips(tmp_path, run, inspect_json, layout):
    model, opt = trained(0)
    ckpt_obj = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}
    assert all(isinstance(k, int) for k in ckpt_obj["optimizer"]["state"])
    src = save(ckpt_obj, tmp_path / "train.ckpt", layout)
    check_inspect(inspect_json(src), flatten(ckpt_obj))
    run("convert", src, tmp_path / "back.pt")
    loaded = torch.load(tmp_path / "back.pt")
    assert_same(loaded, ckpt_obj)  # betas: tuple -> list
    assert list(loaded["optimizer"]["state"]) == list(ckpt_obj["optimizer"]["state"])
    assert loaded["optimizer"]["param_groups"][0]["betas"] == list(opt.param_groups[0]["betas"])
    assert loaded["epoch"] == 3
    # Both resume identically: one more step gives bit-identical parameters.
    model2, opt2 = trained(1)
    model2.load_state_dict(loaded["model"])
    opt2.load_state_dict(loaded["optimizer"])
    for m, o in [(model, opt), (model2, opt2)]:
        src_b, tgt_b = transformer_batch(7)
        m(src_b, tgt_b).square().mean().backward()
        o.step()
    for (name, a), b in zip(model.named_parameters(), model2.parameters()):
        assert raw(a) == raw(b), name


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
def test_non_tensor_values_survive(tmp_path, run, inspect_json, layout):
    nan_payload = struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0]
    values = {
        "state": collections.OrderedDict(w=torch.arange(6.0).reshape(2, 3), b=torch.zeros(2)),
        "od_mixed": collections.OrderedDict(a=1, w=torch.ones(1)),
        "meta": {"epoch": 3, "lr": 1e-3, "name": "ünïcode 名前 🤖", "done": False, "none": None,
                 "blob": bytes(range(256)), "ba": bytearray(b"ab")},
        "ints": [0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**31, 2**40, 2**63 - 1, -2**63],
        "floats": [1.5, -0.0, math.inf, -math.inf, nan_payload, 5e-324],
        "tuple": (1, (2.5, "x"), []), "int_keys": {i: str(i) for i in range(-3, 1200)},
        "long_list": list(range(2500)), "empty_dict": {}, "empty_od": collections.OrderedDict(),
        "nested": {"a": {"b": [{"c": [True]}]}}, "long_text": "y" * 70000,
    }
    src = save(values, tmp_path / "values.pt", layout)
    info = inspect_json(src)
    for key in ["epoch", "lr", "name", "done", "none"]:
        assert info["values"][f"meta.{key}"] == values["meta"][key], key
    run("convert", src, tmp_path / "back.pt")
    loaded = torch.load(tmp_path / "back.pt")
    assert_same(loaded, values)
    # Documented: maps of tensors come back as OrderedDict, other maps as dict.
    assert type(loaded) is dict
    assert type(loaded["state"]) is collections.OrderedDict
    for key in ["od_mixed", "meta", "int_keys", "empty_dict", "empty_od"]:
        assert type(loaded[key]) is dict, key


def test_lone_surrogates_in_string_values_round_trip(tmp_path, run):
    values = {"text": "a\udc80b", "key": 1}  # Python pickles them (surrogatepass)
    src = save(values, tmp_path / "s.pt")
    run("convert", src, tmp_path / "back.pt")
    assert_same(torch.load(tmp_path / "back.pt"), values)


def test_a_key_with_a_lone_surrogate_is_refused_in_one_line(tmp_path, run):
    # Names travel to every format, and JSON headers (safetensors, Orbax)
    # cannot hold a lone surrogate: a name must be UTF-8 (issue 15, defect 5).
    src = save({"key\udc81": 1}, tmp_path / "s.pt")
    result = run("convert", src, tmp_path / "back.pt", expect=1)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not valid UTF-8" in lines[0] and str(src) in lines[0], lines
    assert not (tmp_path / "back.pt").exists()


def test_inspect_json_is_utf8_with_lone_surrogates(tmp_path, ckpt_tool):
    src = save({"text": "a\udc80b"}, tmp_path / "s.pt")
    result = subprocess.run([ckpt_tool, "inspect", src, "--json"], capture_output=True, timeout=120)
    assert result.returncode == 0
    assert json.loads(result.stdout.decode("utf-8"))["values"]["text"] == "a\udc80b"


@pytest.mark.parametrize("name", ["model.v1.final.pth", "pytorch_model.bin", "run.2024.last.ckpt"])
def test_file_names_with_dots_and_other_extensions(tmp_path, run, inspect_json, name):
    state = {"w": random_tensor(torch.float32, (4, 3), 9), "step": torch.tensor(12)}
    (tmp_path / "torch").mkdir()
    src = save(state, tmp_path / "torch" / name)
    assert inspect_json(src)["format"] == "torch"
    out = tmp_path / ("copy." + name)
    run("convert", src, out)
    assert_same(torch.load(out), state)
    # Same archive folder as torch itself gives a file of that name.
    reference = save(state, tmp_path / "torch" / out.name)
    with zipfile.ZipFile(out) as ours, zipfile.ZipFile(reference) as theirs:
        assert ours.namelist()[0].split("/")[0] == theirs.namelist()[0].split("/")[0]


TORCH_SAMPLES = samples("torch2-burn", "*.pt") + samples("torch-legacy-burn", "*.pt")


@pytest.mark.parametrize("path", TORCH_SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_samples_are_read_exactly(tmp_path, run, inspect_json, path):
    full_check(tmp_path, run, inspect_json, path)
    run("verify", path)


def test_torch_samples_are_present():
    if not TORCH_SAMPLES:
        pytest.skip("../shared/interop-samples/torch2-burn and torch-legacy-burn are absent on this machine")
    assert len(samples("torch2-burn", "*.pt")) >= 20 and len(samples("torch-legacy-burn", "*.pt")) >= 3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_conjugate_and_negative_views(tmp_path, run, layout):
    z1, z2 = (torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(i)) for i in (1, 2))
    state = {"conj": z1.conj(), "neg": z2.conj().imag}
    assert state["conj"].is_conj() and state["neg"].is_neg()
    src = save(state, tmp_path / "in.pt", layout)
    run("convert", src, tmp_path / "back.pt")
    # ckpt resolves the bits into plain values (written contiguously).
    back = torch.load(tmp_path / "back.pt")
    assert not back["conj"].is_conj() and not back["neg"].is_neg()
    assert_same(back, torch.load(src), same_strides=False)


# ---------------------------------------------------------------- ckpt writes, torch reads

def test_safetensors_sources_load_in_torch(tmp_path, run, inspect_json):
    state = {f"t_{dtype_name(d)}": random_tensor(d, (3, 4), i) for i, d in enumerate(DTYPES) if not d.is_complex}
    state["scalar"] = torch.tensor(2.5)
    state["empty"] = torch.zeros(0, 2, dtype=torch.bfloat16)
    metadata = {"format": "pt", "note": "ünïcode 🤖"}
    safetensors.torch.save_file(state, tmp_path / "peer.safetensors", metadata=metadata)
    run("convert", tmp_path / "peer.safetensors", tmp_path / "out.pt")
    assert inspect_json(tmp_path / "out.pt")["metadata"] == metadata  # kept in a record torch ignores
    expected = safetensors.torch.load_file(tmp_path / "peer.safetensors")  # in the file's order
    assert_same(dict(sorted(expected.items())), dict(sorted(state.items())))
    loaded = torch.load(tmp_path / "out.pt")
    assert type(loaded) is collections.OrderedDict
    assert_same(loaded, expected)
    assert_same(torch.load(tmp_path / "out.pt", mmap=True), expected)


def layout_case(kind):
    if kind == "three storages":
        return {"a": torch.ones(3), "b": torch.arange(5.0, dtype=torch.float64), "c": torch.ones(1, dtype=torch.int8)}
    if kind == "eleven storages":
        return {f"layer{i}": torch.full((2,), float(i)) for i in range(11)}
    return {"a": torch.ones(3), "empty": torch.zeros(0), "b": torch.arange(5.0, dtype=torch.float64),
            "c": torch.ones(1, dtype=torch.int8)}


def records(path):
    """Each zip record: name in the archive folder, has a data descriptor, data 64-byte aligned."""
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    out = []
    for info in infos:
        (flags,) = struct.unpack("<H", data[info.header_offset + 6:info.header_offset + 8])
        aligned = record_data_offset(path, info.filename) % 64 == 0
        out.append((info.filename.split("/", 1)[1], bool(flags & 8), aligned))
    return out


@pytest.mark.parametrize("kind", ["three storages", "eleven storages", "an empty storage"])
def test_zip_layout_matches_torch(tmp_path, run, monkeypatch, kind):
    """Records as torch lays them out, so that torch.load can compute their offsets itself."""
    from torch.utils.serialization import config
    state = layout_case(kind)
    (tmp_path / "torch").mkdir()
    theirs = save(state, tmp_path / "torch" / "model_weights.pt")
    ours = tmp_path / "model_weights.pt"
    run("convert", theirs, ours)
    assert records(ours) == records(theirs)
    previous = config.load.calculate_storage_offsets
    config.load.calculate_storage_offsets = True
    try:
        assert_same(torch.load(ours, mmap=True), state)
    finally:
        config.load.calculate_storage_offsets = previous
    monkeypatch.setenv("TORCH_SERIALIZATION_DEBUG", "1")  # torch checks its offsets against the zip's
    assert_same(torch.load(ours), state)


# ---------------------------------------------------------------- verify and safety

@pytest.mark.parametrize("writer", ["torch", "ckpt"])
def test_verify_detects_a_flipped_data_byte(tmp_path, run, writer):
    state = {"a": random_tensor(torch.float32, (64,), 1), "b": random_tensor(torch.int16, (8, 8), 2)}
    path = save(state, tmp_path / "torch.pt")
    if writer == "ckpt":
        run("convert", path, tmp_path / "ckpt.pt")
        path = tmp_path / "ckpt.pt"
    run("verify", path)
    run("verify", save(state, tmp_path / "legacy.pt", "legacy"))
    with zipfile.ZipFile(path) as archive:
        record = next(n for n in archive.namelist() if n.endswith("/data/0"))
    position = record_data_offset(path, record) + 37
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    bad = tmp_path / f"bad_{writer}.pt"
    bad.write_bytes(bytes(data))
    result = run("verify", bad, expect=1)  # 1: corrupt
    assert bad.name in result.stderr and record in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


class Payload:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payload(kind, marker):
    if kind.startswith("os.system"):
        return Payload(os.system, (f"touch '{marker}'",))
    if kind == "builtins.open":
        return Payload(builtins.open, (str(marker), "w"))
    return Payload(builtins.exec, (f"open({str(marker)!r}, 'w').close()",))


def malicious_file(path, obj, protocol, legacy):
    data = pickle.dumps({"weight": [1, obj]}, protocol=protocol)
    if legacy:
        header = [0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}]
        path.write_bytes(b"".join(pickle.dumps(x, protocol=2) for x in header) + data + pickle.dumps([], protocol=2))
        return path
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data)
        archive.writestr("archive/byteorder", b"little")
        archive.writestr("archive/version", b"3\n")
    return path


@pytest.mark.parametrize("kind,protocol,legacy", [
    ("os.system", 2, False), ("os.system", 4, False), ("builtins.open", 2, False),
    ("builtins.exec", 5, False), ("os.system (legacy)", 2, True)])
def test_malicious_pickle_is_refused(tmp_path, run, kind, protocol, legacy):
    # The payload is live: Python's own unpickler runs it.
    probe = tmp_path / "PROBE"
    pickle.loads(pickle.dumps(payload(kind, probe), protocol=protocol))
    assert probe.exists()
    marker = tmp_path / "MARKER"
    path = malicious_file(tmp_path / "evil.pt", payload(kind, marker), protocol, legacy)
    func = payload(kind, marker).func
    refused = f"{func.__module__}.{func.__name__}"  # what the pickle names: posix.system, io.open
    for command in [["inspect", path], ["verify", path], ["convert", path, tmp_path / "out.safetensors"]]:
        result = run(*command, expect=None)
        assert result.returncode != 0, command
        assert refused in result.stderr and "evil.pt" in result.stderr, result.stderr
    assert not marker.exists()
    assert not (tmp_path / "out.safetensors").exists()


def test_diff_between_torch_and_safetensors_files(tmp_path, run):
    generator = torch.Generator().manual_seed(7)
    state = {"model": {"w": torch.randn(4, 3, generator=generator), "b": torch.randn(3, generator=generator)},
             "step": 10}
    torch.save(state, tmp_path / "a.pt")
    run("convert", tmp_path / "a.pt", tmp_path / "a.safetensors")
    same = run("diff", tmp_path / "a.pt", tmp_path / "a.safetensors", "--json")
    assert json.loads(same.stdout)["identical"] is True
    state["model"]["w"][1, 2] += 0.5
    torch.save(state, tmp_path / "b.pt")
    different = run("diff", tmp_path / "a.safetensors", tmp_path / "b.pt", "--json", expect=1)
    report = json.loads(different.stdout)
    assert report["identical"] is False and report["compared"] == 3
    assert [d["name"] for d in report["value_differences"]] == ["model.w"]
    assert report["value_differences"][0]["max_abs_diff"] == pytest.approx(0.5, rel=1e-6)
