"""ckpt against real Flax (flax.serialization, flax.training.checkpoints), both directions."""

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import torch

from conftest import random_array, raw_safetensors, samples

flax = pytest.importorskip("flax")
import flax.linen as nn  # noqa: E402
import flax.serialization  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax.training import checkpoints, train_state  # noqa: E402

# Every numpy / ml_dtypes dtype ckpt has, by the name flax writes.
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
          "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]


def array_of(name, shape, seed):
    """random_array for numpy's dtypes, random bits for ml_dtypes' (bfloat16, float8)."""
    if hasattr(ml_dtypes, name):
        dtype = np.dtype(getattr(ml_dtypes, name))
        return random_array(f"uint{8 * dtype.itemsize}", shape, seed).view(dtype)
    return random_array(name, shape, seed)


def flat(tree, prefix=""):
    """{dotted name: leaf} of a msgpack_restore result (dicts and lists)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else None
    if items is None:
        return {prefix: tree}
    out = {}
    for key, value in items:
        out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def arrays(tree):
    return {k: v for k, v in flat(tree).items() if isinstance(v, (np.ndarray, np.generic))}


def assert_safetensors_match(path, truth):
    """ckpt's safetensors (converted from a flax file) holds `truth`'s arrays bit for bit."""
    tensors, _ = raw_safetensors(path)
    expected = arrays(truth)
    assert sorted(tensors) == sorted(expected)
    for name, array in expected.items():
        array = np.asarray(array)
        _, shape, data = tensors[name]
        assert shape in (list(array.shape), list(array.shape) + [2]), name  # complex128: pairs
        assert data == array.tobytes(), name


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(16)(x))
        x = nn.LayerNorm()(x)
        return nn.Dense(3, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(x)


def make_state():
    model = MLP()
    params = model.init(jax.random.PRNGKey(0), jnp.ones((2, 5)))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))
    grads = jax.tree_util.tree_map(jnp.ones_like, state.params)
    return state.apply_gradients(grads=grads)  # non-zero moments, step 1


def test_train_state_to_bytes_is_read_bit_exact(tmp_path, run, inspect_json):
    state = make_state()
    encoded = flax.serialization.to_bytes(state)
    (tmp_path / "checkpoint_0").write_bytes(encoded)
    info = inspect_json(tmp_path / "checkpoint_0")
    assert info["format"] == "flax"
    truth = flax.serialization.msgpack_restore(encoded)
    assert [t["name"] for t in info["tensors"]] == list(arrays(truth))
    assert "params.Dense_1.kernel" in arrays(truth)
    assert arrays(truth)["params.Dense_1.kernel"].dtype == jnp.bfloat16
    assert "opt_state.0.mu.Dense_0.kernel" in arrays(truth)  # tuples become {"0": ...} maps
    run("convert", tmp_path / "checkpoint_0", tmp_path / "s.safetensors")
    assert_safetensors_match(tmp_path / "s.safetensors", truth)
    # Re-encoding gives flax's bytes.
    run("convert", tmp_path / "checkpoint_0", tmp_path / "again.msgpack")
    assert (tmp_path / "again.msgpack").read_bytes() == encoded


def every_dtype_tree():
    tree = {f"t_{name}": array_of(name, (3, 5), i) for i, name in enumerate(DTYPES)}
    tree["zero_d"] = np.array(2.5, dtype=np.float32)
    tree["empty"] = np.zeros((0, 4), dtype=np.int32)
    tree["jax"] = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    tree["leaves"] = {"int": 7, "neg": -300, "big": 2**62, "float": 0.1, "true": True, "none": None,
                      "str": "héllo", "bytes": b"\x00\xff"}
    tree["tuple"] = {"0": np.ones(2, np.float16), "1": np.zeros(1, np.uint64)}
    return tree


def test_every_dtype_and_leaf_kind(tmp_path, run, inspect_json):
    encoded = flax.serialization.msgpack_serialize(every_dtype_tree(), in_place=True)
    (tmp_path / "f.msgpack").write_bytes(encoded)
    info = inspect_json(tmp_path / "f.msgpack")
    assert {t["name"]: t["dtype"] for t in info["tensors"] if t["name"].startswith("t_")} == \
        {f"t_{name}": name for name in DTYPES}
    run("convert", tmp_path / "f.msgpack", tmp_path / "s.safetensors")
    truth = flax.serialization.msgpack_restore(encoded)
    assert_safetensors_match(tmp_path / "s.safetensors", truth)
    run("convert", tmp_path / "f.msgpack", tmp_path / "again.msgpack")
    assert (tmp_path / "again.msgpack").read_bytes() == encoded


def test_ckpt_written_files_restore_in_flax(tmp_path, run):
    state = {f"layer.{i}.w": random_array(name, (4, 3), i) for i, name in enumerate(
        ["float32", "float16", "int64", "uint8", "bool"])}
    state["bf16"] = array_of("bfloat16", (2, 2), 9)
    state["scalar"] = np.array(1.25, dtype=np.float64)
    safetensors.numpy.save_file(state, str(tmp_path / "in.safetensors"))
    for extras in [[], ["--no-extras"]]:
        out = tmp_path / f"out{len(extras)}.msgpack"
        run("convert", tmp_path / "in.safetensors", out, *extras)
        restored = arrays(flax.serialization.msgpack_restore(out.read_bytes()))
        assert sorted(restored) == sorted(state)
        for name, array in state.items():
            assert restored[name].dtype == array.dtype, name
            assert restored[name].shape == array.shape, name
            assert restored[name].tobytes() == array.tobytes(), name
        # And flax's own encoder gives the same bytes for what it restored.
        again = flax.serialization.msgpack_serialize(flax.serialization.msgpack_restore(out.read_bytes()),
                                                     in_place=True)
        assert again == out.read_bytes()


def test_torch_files_convert_to_flax(tmp_path, run):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torch.save({"model": model.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    run("convert", tmp_path / "ckpt.pt", tmp_path / "checkpoint_3", "--to", "flax")
    restored = flax.serialization.msgpack_restore((tmp_path / "checkpoint_3").read_bytes())
    assert restored["epoch"] == 3
    for name, tensor in model.state_dict().items():
        assert np.array_equal(restored["model"][name], tensor.numpy()), name


def test_lists_and_integer_keys_come_back_as_such(tmp_path, run):
    torch.save({"state": {0: {"step": torch.tensor(1.0)}}, "groups": [{"lr": 0.1, "params": [0, 1]}]},
               tmp_path / "opt.pt")
    run("convert", tmp_path / "opt.pt", tmp_path / "opt.msgpack")
    restored = flax.serialization.msgpack_restore((tmp_path / "opt.msgpack").read_bytes())
    assert restored["groups"] == [{"lr": 0.1, "params": [0, 1]}]
    assert list(restored["state"]) == [0]
    assert restored["state"][0]["step"] == np.float32(1.0)


def test_chunked_arrays_are_read(tmp_path, run, monkeypatch):
    monkeypatch.setattr(flax.serialization, "MAX_CHUNK_SIZE", 64)
    big = random_array("float32", (10, 7), 3)
    tree = {"big": big, "small": np.ones(3, np.float32),
            # Chunks of 64 // itemsize elements; complex128 at a limit of 8:
            # one element per chunk.
            "params": {"dense": {"kernel": array_of("bfloat16", (9, 11), 4),
                                 "mask": random_array("bool", (3, 50), 5),
                                 "ids": random_array("uint64", (17,), 6)}},
            "opt": {"0": {"mu": random_array("float16", (2, 3, 13), 7)}},
            # Flax chunks no array inside a list, not even in a dict there.
            "list": [random_array("int8", (100,), 8), {"inner": random_array("int8", (100,), 9)}]}
    encoded = flax.serialization.msgpack_serialize(tree, in_place=True)
    assert encoded.count(b"__msgpack_chunked_array__") == 5
    (tmp_path / "c.msgpack").write_bytes(encoded)
    truth = flax.serialization.msgpack_restore(encoded)
    assert isinstance(truth["params"]["dense"]["kernel"], np.ndarray)
    run("convert", tmp_path / "c.msgpack", tmp_path / "c.safetensors")
    tensors, _ = raw_safetensors(tmp_path / "c.safetensors")
    assert tensors["big"][1] == [10, 7]
    assert tensors["big"][2] == big.tobytes()
    assert_safetensors_match(tmp_path / "c.safetensors", truth)
    monkeypatch.setattr(flax.serialization, "MAX_CHUNK_SIZE", 8)
    scalar = {"z": np.array(1.5 - 2j, np.complex128), "v": random_array("complex128", (3,), 10)}
    encoded = flax.serialization.msgpack_serialize(scalar, in_place=True)
    assert encoded.count(b"__msgpack_chunked_array__") == 2
    (tmp_path / "z.msgpack").write_bytes(encoded)
    run("convert", tmp_path / "z.msgpack", tmp_path / "z.safetensors")
    assert_safetensors_match(tmp_path / "z.safetensors", flax.serialization.msgpack_restore(encoded))


def test_chunked_arrays_are_rewritten_as_flax_would(tmp_path, run, monkeypatch):
    # ckpt writes at flax's own MAX_CHUNK_SIZE (2^30; tests/formats/flax_test.cc
    # compares its chunked bytes with flax's at small sizes): re-encoding a
    # file flax chunked at 64 bytes gives what flax writes by default.
    def make_tree():  # msgpack_serialize(in_place=True) chunks the dicts it is given
        return {"params": {"w": random_array("float32", (10, 7), 11), "b": random_array("int16", (40,), 12)}}

    monkeypatch.setattr(flax.serialization, "MAX_CHUNK_SIZE", 64)
    chunked = flax.serialization.msgpack_serialize(make_tree(), in_place=True)
    assert chunked.count(b"__msgpack_chunked_array__") == 2
    (tmp_path / "c.msgpack").write_bytes(chunked)
    run("convert", tmp_path / "c.msgpack", tmp_path / "again.msgpack")
    monkeypatch.undo()
    assert flax.serialization.MAX_CHUNK_SIZE == 2 ** 30
    assert (tmp_path / "again.msgpack").read_bytes() == flax.serialization.msgpack_serialize(make_tree(), in_place=True)
    restored = flax.serialization.msgpack_restore((tmp_path / "again.msgpack").read_bytes())
    for name, array in arrays(make_tree()).items():
        assert arrays(restored)[name].tobytes() == array.tobytes(), name


@pytest.fixture
def legacy_checkpointing():
    """flax.training.checkpoints' own msgpack files instead of Orbax's directories."""
    before = flax.config.flax_use_orbax_checkpointing
    flax.config.update("flax_use_orbax_checkpointing", False)
    yield
    flax.config.update("flax_use_orbax_checkpointing", before)


@pytest.mark.parametrize("step", [0, 1200])
def test_flax_training_checkpoints_files(tmp_path, run, inspect_json, step, legacy_checkpointing):
    state = make_state()
    checkpoints.save_checkpoint(tmp_path, target=state, step=step, keep=3)
    path = tmp_path / f"checkpoint_{step}"
    assert path.is_file()
    info = inspect_json(path)
    assert info["format"] == "flax"
    truth = flax.serialization.msgpack_restore(path.read_bytes())
    run("convert", path, tmp_path / "s.safetensors")
    assert_safetensors_match(tmp_path / "s.safetensors", truth)
    run("convert", path, tmp_path / "again", "--to", "flax")
    assert (tmp_path / "again").read_bytes() == path.read_bytes()
    # And flax restores what ckpt wrote from the safetensors copy.
    run("convert", tmp_path / "s.safetensors", tmp_path / "checkpoint_99999", "--to", "flax")
    restored = checkpoints.restore_checkpoint(tmp_path / "checkpoint_99999", target=state)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: np.asarray(a).tobytes() == np.asarray(b).tobytes(), restored.params, state.params))


@pytest.mark.parametrize("path", samples("flax-map", "checkpoint_*") + samples("flax-depth", "checkpoint_*"),
                         ids=lambda p: p.parent.name)
def test_shared_samples(tmp_path, run, inspect_json, path):
    truth = flax.serialization.msgpack_restore(path.read_bytes())
    info = inspect_json(path)
    assert info["format"] == "flax"
    expected = arrays(truth)
    assert len(expected) == 114
    assert {t["name"]: (t["dtype"], t["shape"]) for t in info["tensors"]} == \
        {name: (str(array.dtype), list(np.shape(array))) for name, array in expected.items()}
    run("convert", path, tmp_path / "s.safetensors")
    assert_safetensors_match(tmp_path / "s.safetensors", truth)
    run("convert", path, tmp_path / "checkpoint_0", "--to", "flax")
    assert (tmp_path / "checkpoint_0").read_bytes() == path.read_bytes()


def test_corrupt_file_is_refused_with_the_entry(tmp_path, run):
    encoded = flax.serialization.to_bytes({"params": {"w": np.ones((2, 2), np.float32)}})
    (tmp_path / "checkpoint_1").write_bytes(encoded[:-3])
    result = run("inspect", tmp_path / "checkpoint_1", "--json", expect=None)
    assert result.returncode != 0
    assert "checkpoint_1" in result.stderr
