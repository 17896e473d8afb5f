"""Foreign run directories written by the real frameworks (torch as RETURNN
saves its epochs, TensorFlow's CheckpointManager, Flax's save_checkpoint,
Orbax's CheckpointManager, Lightning's file names), listed by `ckpt ls
--json`; every listed path must verify. RETURNN's learning_rates file both
ways, with the real RETURNN: a file its LearningRateControl saved read by
ckpt, and the file ckpt writes loaded by its LearningRateControl.
`ckpt average` against a numpy mean. Tiny tensors throughout."""

import json
import math
import os
import pathlib
import subprocess

import numpy as np
import pytest


def ls_json(run, run_dir):
    listing = json.loads(run("ls", run_dir, "--json").stdout)
    assert listing["run_dir"] == str(run_dir)
    for entry in listing["checkpoints"]:
        assert set(entry) == {"step", "epoch", "metrics", "path", "size", "time", "kept_by"}
        assert entry["size"] > 0 and entry["time"] > 1.6e9
        assert entry["kept_by"] == []
    return listing


def verify_all(run, listing):
    for entry in listing["checkpoints"]:
        run("verify", entry["path"])


# ---- RETURNN's learning_rates file ----

def returnn_load(path):
    """What RETURNN reads from a learning_rates file: its own
    LearningRateControl (the constant-rate kind) loading it; epoch -> EpochData."""
    from returnn.learning_rate_control import ConstantLearningRate
    return ConstantLearningRate(default_learning_rate=1.0, filename=str(path)).epoch_data


def returnn_save(path, epochs):
    """A learning_rates file as RETURNN writes it: its own LearningRateControl
    saving {epoch: (learning rate, error dict)}."""
    from returnn.learning_rate_control import ConstantLearningRate
    control = ConstantLearningRate(default_learning_rate=1.0, filename=str(path))
    for epoch, (rate, error) in epochs.items():
        control.epoch_data[epoch] = ConstantLearningRate.EpochData(learning_rate=rate, error=dict(error))
    control.save()


def test_returnn_torch_run_directory(run, tmp_path):
    import torch

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    models = tmp_path / "models"
    models.mkdir()
    for epoch in (1, 2, 3):
        with torch.no_grad():
            model.weight.add_(1.0)
        # As returnn/torch/engine.py _save_model and _save_optimizer save an epoch.
        torch.save({"model": model.state_dict(), "epoch": epoch, "step": epoch * 10,
                    "effective_learning_rate": 1e-3, "returnn_version": "1.0"}, models / f"epoch.{epoch:03d}.pt")
        torch.save({"optimizer": optimizer.state_dict(), "epoch": epoch}, models / f"epoch.{epoch:03d}.opt.pt")
    # RETURNN keeps only the last two optimizer states.
    (models / "epoch.001.opt.pt").unlink()
    (models / "epoch.004.pt.tmp_write").write_bytes(b"half a save")
    epochs = {
        1: (1e-3, {"dev_score": 1.5, "dev_error": 0.5, "train_score": 2.25}),
        2: (1e-3, {"dev_score": 1.25, ":meta:effective_learning_rate": 0.0009}),
        3: (5e-4, {"dev_score": float("nan")}),
    }
    # i6's ReturnnTrainingJob keeps learning_rates beside models/; RETURNN writes it.
    returnn_save(tmp_path / "learning_rates", epochs)

    listing = ls_json(run, models)
    assert listing["layout"] == "returnn"
    entries = listing["checkpoints"]
    assert [e["epoch"] for e in entries] == [1, 2, 3]
    assert [e["step"] for e in entries] == [None, None, None]
    assert [e["path"] for e in entries] == [str(models / f"epoch.{n:03d}.pt") for n in (1, 2, 3)]
    assert entries[0]["metrics"] == {"dev_score": 1.5, "dev_error": 0.5, "train_score": 2.25}
    assert entries[1]["metrics"] == {"dev_score": 1.25}
    assert entries[2]["metrics"] == {"dev_score": "nan"}  # JSON has no NaN
    assert entries[2]["size"] == sum(os.path.getsize(models / f"epoch.003{s}") for s in (".pt", ".opt.pt"))
    verify_all(run, listing)

    # The table names each epoch.
    table = run("ls", models).stdout
    assert "layout returnn, 3 checkpoints" in table
    assert "epoch.002.pt" in table and "dev_score=1.25" in table


def test_returnn_tensorflow_and_jax_models(run, tmp_path):
    """RETURNN's TF backend saves with TF1's Saver (epoch.NNN.index, .data-*,
    .meta and a `checkpoint` state file); its JAX backend an Orbax directory
    epoch.NNN.orbax/."""
    import orbax.checkpoint as ocp
    import tensorflow as tf

    models = tmp_path / "models"
    models.mkdir()
    with tf.Graph().as_default():
        variable = tf.compat.v1.get_variable("w", initializer=np.arange(6, dtype=np.float32).reshape(2, 3))
        saver = tf.compat.v1.train.Saver(max_to_keep=None)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for epoch in (1, 2):
                session.run(variable.assign_add(tf.ones_like(variable)))
                saver.save(session, str(models / f"epoch.{epoch:03d}"), write_meta_graph=True)
    assert (models / "checkpoint").exists() and (models / "epoch.002.meta").exists()
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(models / "epoch.003.orbax", {"w": np.ones((2, 3), np.float32)})
    checkpointer.wait_until_finished()
    (models / "epoch.004.orbax").mkdir()  # a save in progress: no _CHECKPOINT_METADATA yet
    returnn_save(tmp_path / "learning_rates", {2: (0.01, {"dev_score": 0.5})})

    listing = ls_json(run, models)
    assert listing["layout"] == "returnn"
    entries = listing["checkpoints"]
    assert [e["epoch"] for e in entries] == [1, 2, 3]
    assert [e["path"] for e in entries] == [str(models / "epoch.001"), str(models / "epoch.002"),
                                           str(models / "epoch.003.orbax")]
    assert entries[1]["metrics"] == {"dev_score": 0.5}
    prefix = models / "epoch.002"
    assert entries[1]["size"] == sum(os.path.getsize(p) for p in models.glob("epoch.002.*"))
    verify_all(run, listing)
    assert json.loads(run("inspect", prefix, "--json").stdout)["format"] == "tf"


def ckpt_tests_binary(ckpt_tool):
    """The C++ test binary: beside the CLI, else in the sanitizer build that
    `make test` builds, else in the release build."""
    root = pathlib.Path(__file__).resolve().parents[2]
    for folder in (pathlib.Path(ckpt_tool).parent, root / "build-sanitize", root / "build"):
        if os.access(folder / "ckpt_tests", os.X_OK):
            return folder / "ckpt_tests"
    return pathlib.Path(ckpt_tool).parent / "ckpt_tests"


def test_learning_rates_written_by_ckpt_read_by_returnn(ckpt_tool, tmp_path):
    """The gtest LearningRatesTest.WritesForPython writes a file with
    learning_rates_text(); RETURNN's own LearningRateControl reads it."""
    binary = ckpt_tests_binary(ckpt_tool)
    if not os.access(binary, os.X_OK):
        pytest.skip(f"the C++ tests are not built at {binary}")
    out = tmp_path / "learning_rates"
    result = subprocess.run([str(binary), "--gtest_filter=LearningRatesTest.WritesForPython"],
                            env={**os.environ, "CKPT_LEARNING_RATES_OUT": str(out)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    data = returnn_load(out)
    assert sorted(data) == [1, 2, 10]
    assert data[1].learning_rate == 0.001
    assert data[1].error == {"dev_score": 1.5, "train_score": 2.0}
    assert data[2].learning_rate == 1e-05
    assert math.isnan(data[2].error["dev_score"])
    assert data[2].error["dev_error"] == float("inf")
    assert data[2].error["it's \"quoted\"\n"] == -0.25
    assert data[2].error["caf\u00e9/\u00fc"] == 0.1 + 0.2
    assert data[2].meta == {"effective_learning_rate": 0.0005, "note": "x'y", "list": [1, (2, 3), None]}
    assert data[10].learning_rate == 1e16
    assert data[10].error == {}


# ---- TensorFlow, Flax, Orbax, Lightning ----

def test_tensorflow_checkpoint_manager(run, tmp_path):
    import tensorflow as tf

    variable = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    checkpoint = tf.train.Checkpoint(v=variable)
    manager = tf.train.CheckpointManager(checkpoint, str(tmp_path), max_to_keep=2)
    for _ in range(3):
        variable.assign_add(tf.ones_like(variable))
        manager.save()
    listing = ls_json(run, tmp_path)
    assert listing["layout"] == "tf"
    entries = listing["checkpoints"]
    assert [e["step"] for e in entries] == [2, 3]
    assert [e["epoch"] for e in entries] == [None, None]
    assert [e["path"] for e in entries] == [str(tmp_path / "ckpt-2"), str(tmp_path / "ckpt-3")]
    assert entries[-1]["path"] == manager.latest_checkpoint
    verify_all(run, listing)


def test_flax_save_checkpoint(run, tmp_path):
    import flax
    from flax.training import checkpoints

    target = {"params": {"kernel": np.ones((2, 2), np.float32)}, "step": 0}
    # The msgpack files of Flax's legacy writer.
    legacy = tmp_path / "legacy"
    flax.config.update("flax_use_orbax_checkpointing", False)
    try:
        for step in (3, 10, 20):
            checkpoints.save_checkpoint(str(legacy), {**target, "step": step}, step=step, keep=2)
    finally:
        flax.config.update("flax_use_orbax_checkpointing", True)
    listing = ls_json(run, legacy)
    assert listing["layout"] == "flax"
    assert [e["step"] for e in listing["checkpoints"]] == [10, 20]
    assert [e["path"] for e in listing["checkpoints"]] == [str(legacy / "checkpoint_10"), str(legacy / "checkpoint_20")]
    verify_all(run, listing)
    # Flax on Orbax: checkpoint_<step> directories.
    on_orbax = tmp_path / "orbax"
    for step in (1, 2):
        checkpoints.save_checkpoint(str(on_orbax), {**target, "step": step}, step=step, keep=3)
    listing = ls_json(run, on_orbax)
    assert listing["layout"] == "flax"
    assert [e["step"] for e in listing["checkpoints"]] == [1, 2]
    verify_all(run, listing)


def test_orbax_checkpoint_manager(run, tmp_path):
    import orbax.checkpoint as ocp

    tree = {"params": {"w": np.arange(4, dtype=np.float32)}}
    # With a best_fn, Orbax keeps the metrics (in <step>/metrics/metrics).
    options = ocp.CheckpointManagerOptions(max_to_keep=2, best_fn=lambda metrics: metrics["loss"],
                                           best_mode="min")
    with ocp.CheckpointManager(tmp_path, options=options) as manager:
        for step, loss in ((1, 0.75), (5, 0.5), (9, 0.25)):  # the best two are the last two
            manager.save(step, args=ocp.args.StandardSave(tree), metrics={"loss": loss})
        manager.wait_until_finished()
    listing = ls_json(run, tmp_path)
    assert listing["layout"] == "orbax"
    entries = listing["checkpoints"]
    assert [e["step"] for e in entries] == [5, 9]
    assert [e["path"] for e in entries] == [str(tmp_path / "5"), str(tmp_path / "9")]
    assert [e["metrics"].get("loss") for e in entries] == [0.5, 0.25]
    verify_all(run, listing)


def test_lightning_file_names(run, tmp_path):
    import torch

    state = {"state_dict": {"layer.weight": torch.ones(2, 2)}, "pytorch-lightning_version": "2.5.0"}
    for epoch, step in ((0, 50), (1, 100)):
        torch.save({**state, "epoch": epoch, "global_step": step}, tmp_path / f"epoch={epoch}-step={step}.ckpt")
    torch.save({**state, "epoch": 1, "global_step": 100}, tmp_path / "last.ckpt")
    listing = ls_json(run, tmp_path)
    assert listing["layout"] == "lightning"
    entries = listing["checkpoints"]
    assert [(e["epoch"], e["step"]) for e in entries] == [(0, 50), (1, 100), (1, 100)]
    assert entries[-1]["path"] == str(tmp_path / "last.ckpt")
    verify_all(run, listing)


# ---- ckpt average ----

def test_average_against_numpy_mean(run, tmp_path):
    import torch
    from safetensors.numpy import load_file

    rng = np.random.default_rng(7)
    weights = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3)]
    halves = [rng.standard_normal(5).astype(np.float16) for _ in range(3)]
    for epoch in (1, 2, 3):
        torch.save({"model": {"w": torch.from_numpy(weights[epoch - 1]), "h": torch.from_numpy(halves[epoch - 1]),
                              "n": torch.tensor([epoch])},
                    "epoch": epoch}, tmp_path / f"epoch.{epoch:03d}.pt")
        torch.save({"optimizer": {}}, tmp_path / f"epoch.{epoch:03d}.opt.pt")
    out = tmp_path / "avg.safetensors"
    result = run("average", out, tmp_path, "--last", 2)
    assert "averaged 2 checkpoints" in result.stdout
    averaged = load_file(out)
    expected_w = ((weights[1].astype(np.float64) + weights[2].astype(np.float64)) / 2).astype(np.float32)
    expected_h = ((halves[1].astype(np.float64) + halves[2].astype(np.float64)) / 2).astype(np.float16)
    np.testing.assert_array_equal(averaged["model.w"], expected_w)
    np.testing.assert_array_equal(averaged["model.h"], expected_h)
    assert averaged["model.n"].tolist() == [3]  # integers from the newest
    # The merged checkpoints are recorded.
    from safetensors import safe_open
    with safe_open(str(out), framework="np") as f:
        record = json.loads(f.metadata()["ckpt.averaged_from"])
    assert [(r["path"], r["epoch"], r["step"]) for r in record] == [
        (str(tmp_path / "epoch.002.pt"), 2, None), (str(tmp_path / "epoch.003.pt"), 3, None)]

    # Explicit paths, all three.
    run("average", out, *[tmp_path / f"epoch.{n:03d}.pt" for n in (1, 2, 3)])
    expected = (sum(w.astype(np.float64) for w in weights) / 3).astype(np.float32)
    np.testing.assert_array_equal(load_file(out)["model.w"], expected)


def test_average_mismatch_is_one_line(run, tmp_path):
    import torch

    torch.save({"w": torch.ones(2)}, tmp_path / "a.pt")
    torch.save({"w": torch.ones(3)}, tmp_path / "b.pt")
    result = run("average", tmp_path / "out.safetensors", tmp_path / "a.pt", tmp_path / "b.pt", expect=1)
    assert result.stderr.count("\n") == 1
    assert "'w'" in result.stderr and "a.pt" in result.stderr and "b.pt" in result.stderr
    assert not (tmp_path / "out.safetensors").exists()
