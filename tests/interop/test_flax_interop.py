"""ckpt against real Flax (flax.serialization, flax.training.checkpoints), both directions."""

from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import torch

import ckpt

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


def torch_to_numpy(value):
    """A torch state dict as numpy, containers kept: what a Flax user hands to_bytes."""
    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {k: torch_to_numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(torch_to_numpy(v) for v in value)
    return value


def test_a_torch_optimizer_converts_to_what_flax_writes_for_its_state_dict(tmp_path, run):
    # Integer keys (state), lists (param_groups, params), tuples (betas),
    # None (foreach), 0-d tensors (step).
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.ones(5, 4)).sum().backward()
    optimizer.step()
    state = optimizer.state_dict()
    torch.save(state, tmp_path / "opt.pt")
    run("convert", tmp_path / "opt.pt", tmp_path / "opt.msgpack")
    data = (tmp_path / "opt.msgpack").read_bytes()
    assert data == flax.serialization.to_bytes(torch_to_numpy(state))
    restored = flax.serialization.msgpack_restore(data)
    assert list(restored["state"]) == ["0", "1", "2", "3"]  # as to_state_dict keys them
    assert restored["param_groups"]["0"]["params"] == {"0": 0, "1": 1, "2": 2, "3": 3}
    assert restored["param_groups"]["0"]["betas"] == {"0": 0.9, "1": 0.999}
    np.testing.assert_array_equal(restored["state"]["1"]["exp_avg"], state["state"][1]["exp_avg"].numpy())
    # ckpt reads back what msgpack_restore gives: maps keyed "0", "1", ...
    loaded = ckpt.load(tmp_path / "opt.msgpack")
    assert list(loaded["state"]) == ["0", "1", "2", "3"] and isinstance(loaded["param_groups"], dict)
    assert flat(loaded).keys() == flat(restored).keys()


def make_train_state(tx, seed=0):
    model = MLP()
    params = model.init(jax.random.PRNGKey(seed), jnp.ones((2, 5)))["params"]
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


OPTIMIZERS = {
    "adam": lambda: optax.adam(1e-3),
    "clip_adamw": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3, weight_decay=1e-4)),
    "sgd_momentum": lambda: optax.sgd(0.1, momentum=0.9),
    "inject_hyperparams": lambda: optax.inject_hyperparams(optax.adam)(learning_rate=1e-3),
}


def leaves_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        for x, y in zip(la, lb))


def trained_state(optimizer, seed, steps):
    state = make_train_state(OPTIMIZERS[optimizer](), seed)
    for _ in range(steps):
        state = state.apply_gradients(grads=jax.tree_util.tree_map(jnp.ones_like, state.params))
    return state


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_ckpt_saves_a_train_state_as_flaxs_to_bytes_and_flax_restores_it(tmp_path, run, optimizer):
    state = trained_state(optimizer, seed=0, steps=2)  # non-zero moments, step 2
    path = tmp_path / "checkpoint_2.msgpack"
    ckpt.save(path, state)
    data = path.read_bytes()
    assert data == flax.serialization.to_bytes(state)
    # Flax restores it into another TrainState of the same structure and
    # dtypes (inject_hyperparams' moments of bfloat16 params become float32
    # after a step): other params and moments, step 1.
    template = trained_state(optimizer, seed=1, steps=1)
    restored = flax.serialization.from_bytes(template, data)
    assert restored.step == 2
    assert type(restored.opt_state) is type(state.opt_state)
    assert leaves_equal(restored.params, state.params) and leaves_equal(restored.opt_state, state.opt_state)
    # (A training step from `restored` need not equal one from `state`:
    # from_bytes gives numpy arrays, without jax's weak types, whatever wrote
    # the bytes.)
    restored.apply_gradients(grads=jax.tree_util.tree_map(jnp.ones_like, state.params))
    # And ckpt restores it too: the target's tuples match the "0", "1" maps.
    report = ckpt.restore(template, path)
    assert report.ok, report.summary
    assert type(report.tree) is type(state) and report.tree.step == 2
    assert [type(x) for x in report.tree.opt_state] == [type(x) for x in state.opt_state]
    assert leaves_equal(report.tree.opt_state, state.opt_state) and leaves_equal(report.tree.params, state.params)
    # A trip through safetensors (which keeps the tree) comes back as flax's bytes.
    run("convert", path, tmp_path / "s.safetensors")
    run("convert", tmp_path / "s.safetensors", tmp_path / "again.msgpack")
    assert (tmp_path / "again.msgpack").read_bytes() == data


def test_optax_states_inside_a_dict_are_written_by_field_name(tmp_path):
    # No dataclass around them: the namedtuples reach the binding as they are.
    state = make_train_state(optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)))
    nest = {"opt_state": state.opt_state, "step": 3, "params": state.params}
    ckpt.save(tmp_path / "o.msgpack", nest)
    assert (tmp_path / "o.msgpack").read_bytes() == flax.serialization.to_bytes(nest)
    names = {t["name"] for t in ckpt.inspect(tmp_path / "o.msgpack")["tensors"]}
    assert "opt_state.1.0.mu.Dense_0.kernel" in names  # chain: positions; ScaleByAdamState: fields


class Moments(NamedTuple):
    mu: Any
    nu: Any


def every_kind_state():
    """Nested dicts, lists, tuples, NamedTuples, None, Python scalars of each
    kind, and arrays of every dtype flax writes (numpy, ml_dtypes and jax)."""
    return {
        "arrays": {name: array_of(name, (3, 5), i) for i, name in enumerate(DTYPES)},
        "zero_d": {name: array_of(name, (), 40 + i) for i, name in enumerate(DTYPES)},
        "empty": np.zeros((0, 4), np.int32),
        "strided": np.arange(24, dtype=np.int16).reshape(4, 6)[:, ::2],
        "jax": {"f": jnp.arange(6, dtype=jnp.float32).reshape(2, 3), "bf16": jnp.ones(3, jnp.bfloat16),
                "count": jnp.zeros([], jnp.int32)},
        "scalars": {"int": 7, "neg": -300, "max": 2**63 - 1, "min": -2**63, "float": 0.1, "nan": float("nan"),
                    "inf": float("-inf"), "neg_zero": -0.0, "true": True, "false": False, "none": None,
                    "str": "héllo", "empty_str": "", "bytes": b"\x00\xff", "empty_bytes": b""},
        "list": [1, [2.5, None], np.ones(2, np.float16), {"in": "list"}],
        "tuple": (np.zeros(1, np.uint64), "x", ()),
        "namedtuple": Moments(mu=np.ones(2, np.float32), nu=(np.zeros(1, np.int8),)),
        "empty_list": [], "empty_tuple": (), "empty_dict": {}, "empty_state": optax.EmptyState(),
        "int_keys": {0: np.ones(1), 7: "seven", -1: None},
        "deep": {"a": {"b": {"c": [{"d": np.arange(3)}]}}},
        "long": list(range(20)),
    }


def test_every_kind_of_state_is_written_as_flaxs_to_bytes(tmp_path):
    state = every_kind_state()
    ckpt.save(tmp_path / "x.msgpack", state)
    data = (tmp_path / "x.msgpack").read_bytes()
    assert data == flax.serialization.to_bytes(state)
    # A list or tuple at the root too.
    ckpt.save(tmp_path / "root.msgpack", [np.ones(2, np.float32), (1, "a")])
    assert (tmp_path / "root.msgpack").read_bytes() == flax.serialization.to_bytes([np.ones(2, np.float32), (1, "a")])
    # What loads back is msgpack_restore's state dict.
    truth, loaded = flax.serialization.msgpack_restore(data), ckpt.load(tmp_path / "x.msgpack")
    assert flat(loaded).keys() == flat(truth).keys()
    assert loaded["tuple"]["2"] == {} and loaded["empty_list"] == {} and loaded["int_keys"]["-1"] is None
    for name, value in flat(truth).items():
        if isinstance(value, np.ndarray):
            assert flat(loaded)[name].dtype == value.dtype and flat(loaded)[name].tobytes() == value.tobytes(), name
        elif not (isinstance(value, float) and np.isnan(value)):
            assert flat(loaded)[name] == value and type(flat(loaded)[name]) is type(value), name


def test_numpy_and_complex_scalars_restore_in_flax_as_equal_values(tmp_path):
    # The tree has no numpy-scalar or complex leaf: ckpt writes 0-d arrays
    # (ext 1) where flax writes ext 3 (np.generic) and ext 2 (complex); every
    # other byte is flax's, and from_bytes gives equal values.
    state = {"f32": np.float32(1.5), "i64": np.int64(-3), "b": np.bool_(True), "bf16": ml_dtypes.bfloat16(2.0),
             "c": complex(1.5, -2.0), "w": np.ones(2, np.float32)}
    ckpt.save(tmp_path / "s.msgpack", state)
    data = (tmp_path / "s.msgpack").read_bytes()
    as_arrays = {k: np.asarray(v) for k, v in state.items()}
    assert data == flax.serialization.to_bytes(as_arrays)
    restored = flax.serialization.from_bytes(state, data)
    for name, value in state.items():
        assert np.asarray(restored[name]).dtype == np.asarray(value).dtype, name
        assert np.asarray(restored[name]).tobytes() == np.asarray(value).tobytes(), name


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
