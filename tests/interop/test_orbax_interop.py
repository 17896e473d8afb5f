"""ckpt against real Orbax (orbax-checkpoint, tensorstore, zarr): Orbax writes,
ckpt reads bit-exact (Orbax's own restore is the truth); the shared sample
orbax-step-1 likewise."""

import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import SAMPLES, random_array, raw_safetensors

# Orbax refuses zero-size arrays, so every array here has elements.
NUMPY_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64"]


def flatten(tree, prefix=""):
    """{dotted name: leaf} over dicts, lists and tuples, as ckpt names leaves."""
    out = {}
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    else:
        return {prefix: tree}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def ckpt_contents(run, inspect_json, path, tmp_path):
    """ckpt's view of `path`: {name: (dtype, shape, bytes)} via a conversion
    to safetensors, plus inspect --json."""
    out = tmp_path / "ckpt-view.safetensors"
    run("convert", path, out)
    tensors, _ = raw_safetensors(out)
    return tensors, inspect_json(path)


ST_CODES = {"bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
            "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16", "bfloat16": "BF16",
            "float32": "F32", "float64": "F64", "complex64": "C64"}


def assert_same_as_restore(tensors, info, restored):
    """Every leaf Orbax restores is in ckpt's view, bit-exact."""
    values = info["values"]
    flat = flatten(restored)
    assert set(tensors) | set(values) == set(flat)
    for name, leaf in flat.items():
        if isinstance(leaf, (np.ndarray, jax.Array)):
            array = np.asarray(leaf)
            dtype, shape, data = tensors[name]
            assert dtype == ST_CODES[array.dtype.name], name
            assert shape == list(array.shape), name
            assert data == np.ascontiguousarray(array).tobytes(), name
        else:
            assert values[name] == leaf, name


def small_flax_params():
    import flax.linen as nn

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(8)(x)
            x = nn.LayerNorm()(x)
            return nn.Dense(3, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)(x)

    return Mlp().init(jax.random.PRNGKey(0), jnp.ones((1, 5)))


def mixed_tree():
    tree = {"model": small_flax_params(),
            "arrays": {dtype: random_array(dtype, (3, 4), i) for i, dtype in enumerate(NUMPY_DTYPES)},
            "layers": [{"w": random_array("float32", (2, 2), 40 + i)} for i in range(12)],
            "bf16": jnp.asarray(random_array("float32", (5,), 60)).astype(jnp.bfloat16),
            "step": 7, "lr": 0.25, "done": False, "name": "run-7", "nothing": None}
    return tree


def test_orbax_default_ocdbt_pytree_is_read_bit_exact(tmp_path, run, inspect_json):
    tree = mixed_tree()
    ocp.PyTreeCheckpointer().save(tmp_path / "ckpt", tree)
    assert (tmp_path / "ckpt" / "manifest.ocdbt").is_file()
    tensors, info = ckpt_contents(run, inspect_json, tmp_path / "ckpt", tmp_path)
    assert info["format"] == "orbax"
    restored = ocp.PyTreeCheckpointer().restore(tmp_path / "ckpt")
    restored.pop("nothing")
    assert info["values"].pop("nothing") is None
    assert_same_as_restore(tensors, info, restored)
    assert "layers.11.w" in tensors and "layers.2.w" in tensors  # list order by index, not by string


def test_standard_checkpointer_and_multi_chunk_arrays(tmp_path, run, inspect_json):
    tree = {"w": jnp.asarray(random_array("float32", (300, 37), 1)),
            "b": jnp.asarray(random_array("int16", (31, 10), 2))}
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=4096), tree)
    ocp.PyTreeCheckpointer().save(tmp_path / "ckpt", tree, save_args=save_args)
    tensors, info = ckpt_contents(run, inspect_json, tmp_path / "ckpt", tmp_path)
    assert_same_as_restore(tensors, info, ocp.PyTreeCheckpointer().restore(tmp_path / "ckpt"))


def test_callers_own_ckpt_custom_metadata_is_not_taken_for_ckpts_record(tmp_path, run, inspect_json):
    # Orbax keeps a caller's custom_metadata; a "ckpt" key in it that is not
    # ckpt's record (an object with "version" and "tree") is the caller's.
    tree = {"w": random_array("float32", (4, 3), 3), "b": random_array("int8", (5,), 4)}
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", tree, custom_metadata={"ckpt": {"version": 1, "note": "mine"}})
    tensors, info = ckpt_contents(run, inspect_json, tmp_path / "ckpt", tmp_path)
    with ocp.StandardCheckpointer() as checkpointer:
        assert_same_as_restore(tensors, info, checkpointer.restore(tmp_path / "ckpt"))
    assert info["format_version"] == 0
    assert {k: v for k, v in info["metadata"].items() if k.startswith("custom_metadata")} == {
        "custom_metadata.ckpt.version": "1", "custom_metadata.ckpt.note": "mine"}


def test_composite_checkpoint_manager_reads_every_item(tmp_path, run, inspect_json):
    state = {"params": small_flax_params(), "step": np.int64(3)}
    extra = {"ema": [np.arange(6, dtype=np.float32), np.ones((2, 3), np.uint8)]}
    with ocp.CheckpointManager(tmp_path / "run", item_names=("state", "extra")) as manager:
        manager.save(3, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                 extra=ocp.args.StandardSave(extra)))
        manager.wait_until_finished()
        restored = manager.restore(3, args=ocp.args.Composite(state=ocp.args.StandardRestore(),
                                                             extra=ocp.args.StandardRestore()))
    step_dir = tmp_path / "run" / "3"
    tensors, info = ckpt_contents(run, inspect_json, step_dir, tmp_path)
    assert_same_as_restore(tensors, info, {"state": restored["state"], "extra": restored["extra"]})
    assert "item_handlers.state" in info["metadata"]
    # An item's folder reads on its own too.
    assert inspect_json(step_dir / "extra")["format"] == "orbax"


@pytest.mark.skipif(not (SAMPLES / "orbax-step-1").is_dir(), reason="shared sample missing")
def test_shared_sample_matches_orbax_restore(tmp_path, run, inspect_json):
    sample = SAMPLES / "orbax-step-1"
    tensors, info = ckpt_contents(run, inspect_json, sample, tmp_path)
    restored = ocp.PyTreeCheckpointer().restore(sample / "default")
    assert len(tensors) == 134
    assert_same_as_restore(tensors, info, restored)
    assert info["metadata"]["item_handlers.default"].endswith("StandardCheckpointHandler")


def test_per_array_zarr_layout_is_read(tmp_path, run, inspect_json):
    tree = mixed_tree()
    ocp.PyTreeCheckpointer(use_ocdbt=False).save(tmp_path / "ckpt", tree)
    assert (tmp_path / "ckpt" / "arrays.float32" / ".zarray").is_file()
    tensors, info = ckpt_contents(run, inspect_json, tmp_path / "ckpt", tmp_path)
    restored = ocp.PyTreeCheckpointer().restore(tmp_path / "ckpt")
    restored.pop("nothing")
    info["values"].pop("nothing")
    assert_same_as_restore(tensors, info, restored)


def test_corrupted_orbax_checkpoint_is_reported(tmp_path, run):
    ocp.PyTreeCheckpointer().save(tmp_path / "ckpt", {"w": np.arange(64, dtype=np.float32)})
    [data_file] = sorted((tmp_path / "ckpt" / "d").iterdir())
    data = bytearray(data_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    data_file.chmod(0o644)
    data_file.write_bytes(bytes(data))
    result = run("inspect", tmp_path / "ckpt", expect=None)
    assert result.returncode == 1, result.stderr
    assert "CRC-32C" in result.stderr or "zstd" in result.stderr


def test_ckpt_writes_what_orbax_restores_and_zarr_reads(tmp_path, run):
    import safetensors.numpy
    import zarr

    arrays = {f"layer.{i}.{dtype}": random_array(dtype, (3, 5), i) for i, dtype in enumerate(NUMPY_DTYPES)}
    arrays["bf16"] = random_array("float32", (4, 2), 99).astype(ml_dtypes.bfloat16)
    arrays["scalar"] = np.array(2.5, dtype=np.float32)
    safetensors.numpy.save_file(arrays, tmp_path / "in.safetensors")
    run("convert", tmp_path / "in.safetensors", tmp_path / "out", "--to", "orbax")
    assert not [p for p in tmp_path.iterdir() if ".ckpt-tmp-" in p.name], "a temporary was left behind"
    for restored in (ocp.PyTreeCheckpointer().restore(tmp_path / "out"),
                     ocp.StandardCheckpointer().restore(tmp_path / "out")):
        assert set(restored) == set(arrays)
        for name, array in arrays.items():
            back = np.asarray(restored[name])
            assert back.dtype == array.dtype and back.shape == array.shape, name
            assert back.tobytes() == array.tobytes(), name
    for name, array in arrays.items():
        if array.dtype == ml_dtypes.bfloat16:
            continue  # zarr-python has no bfloat16 (Orbax's own files have the same limit)
        back = zarr.open_array(tmp_path / "out" / name, mode="r")[...]
        assert back.dtype == array.dtype and back.tobytes() == array.tobytes(), name
    # ckpt reads its own output, and a second save replaces the first.
    run("convert", tmp_path / "in.safetensors", tmp_path / "out", "--to", "orbax")
    assert json.loads(run("inspect", tmp_path / "out", "--json").stdout)["format"] == "orbax"


def test_orbax_round_trip_through_ckpt_keeps_every_tensor(tmp_path, run):
    """Orbax -> ckpt (safetensors) -> ckpt writes Orbax -> Orbax restores the
    same tree: the orbax format keeps nested trees (capability nested_tree),
    so the CLI hands the writer the tree, not dotted names."""
    tree = {"params": small_flax_params()["params"], "ema": [np.arange(4, dtype=np.int32), np.ones(3, np.float16)]}
    ocp.PyTreeCheckpointer().save(tmp_path / "orbax", tree)
    run("convert", tmp_path / "orbax", tmp_path / "mid.safetensors")
    run("convert", tmp_path / "mid.safetensors", tmp_path / "back", "--to", "orbax")
    restored = ocp.PyTreeCheckpointer().restore(tmp_path / "back")
    flat_in, flat_back = flatten(tree), flatten(restored)
    assert set(flat_back) == set(flat_in)
    assert isinstance(restored["ema"], list) and isinstance(restored["params"], dict)
    for name, leaf in flat_in.items():
        back = np.asarray(flat_back[name])
        assert back.dtype == np.asarray(leaf).dtype, name
        assert back.tobytes() == np.asarray(leaf).tobytes(), name


def torch_like_state():
    """A training state as torch.save writes it: a model's state dict, an
    optimizer's state (integer keys), param groups (lists, floats, bools,
    None), an epoch."""
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    model = {"encoder.layer.0.weight": torch.randn(4, 3, generator=generator),
             "encoder.layer.0.bias": torch.randn(4, generator=generator).to(torch.bfloat16),
             "head.weight": torch.randint(-100, 100, (2, 4), dtype=torch.int64, generator=generator)}
    optimizer = {"state": {i: {"step": torch.tensor(float(10 + i)),
                               "exp_avg": torch.randn(4, 3, generator=generator),
                               "exp_avg_sq": torch.rand(4, 3, generator=generator)} for i in (0, 1)},
                 "param_groups": [{"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
                                   "amsgrad": False, "maximize": False, "foreach": None, "params": [0, 1]}]}
    return torch, {"model": model, "optimizer": optimizer, "epoch": 3, "tag": "run-7"}


def to_orbax_view(tree):
    """What Orbax restores for a ckpt tree: string keys, numpy arrays."""
    if isinstance(tree, dict):
        return {str(key): to_orbax_view(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [to_orbax_view(value) for value in tree]
    if hasattr(tree, "detach"):
        import torch

        if tree.dtype == torch.bfloat16:
            return tree.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return tree.numpy()
    return tree


def assert_same_tree(restored, expected, path="root"):
    if isinstance(expected, dict):
        assert isinstance(restored, dict), path
        assert list(restored) == list(expected) or set(restored) == set(expected), path
        for key, value in expected.items():
            assert_same_tree(restored[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(restored, (list, tuple)) and len(restored) == len(expected), path
        for i, value in enumerate(expected):
            assert_same_tree(restored[i], value, f"{path}.{i}")
    elif isinstance(expected, np.ndarray):
        array = np.asarray(restored)
        assert array.dtype == expected.dtype and array.shape == expected.shape, path
        assert array.tobytes() == expected.tobytes(), path
    else:
        assert restored == expected, path


def test_nested_torch_state_converts_to_orbax_and_back_exactly(tmp_path, run, inspect_json):
    torch, state = torch_like_state()
    torch.save(state, tmp_path / "state.pt")
    run("convert", tmp_path / "state.pt", tmp_path / "orbax", "--to", "orbax")
    # Orbax restores the nested tree, integer keys as strings.
    restored = ocp.PyTreeCheckpointer().restore(tmp_path / "orbax")
    assert set(restored["optimizer"]["state"]) == {"0", "1"}
    assert_same_tree(restored, to_orbax_view(state))
    # ckpt reads back the original tree (integer keys, leaf kinds): the same
    # inspection as the torch file's, and a safetensors copy of each with the
    # same tree and bytes.
    original, through = inspect_json(tmp_path / "state.pt"), inspect_json(tmp_path / "orbax")
    assert through["values"] == original["values"]
    described = lambda info: [(t["name"], t["dtype"], t["shape"], t["nbytes"]) for t in info["tensors"]]  # noqa: E731
    assert described(through) == described(original)  # offsets are each format's own
    run("convert", tmp_path / "state.pt", tmp_path / "a.safetensors")
    run("convert", tmp_path / "orbax", tmp_path / "b.safetensors")
    tensors_a, metadata_a = raw_safetensors(tmp_path / "a.safetensors")
    tensors_b, metadata_b = raw_safetensors(tmp_path / "b.safetensors")
    assert tensors_a == tensors_b
    assert json.loads(metadata_a["ckpt"])["tree"] == json.loads(metadata_b["ckpt"])["tree"]
