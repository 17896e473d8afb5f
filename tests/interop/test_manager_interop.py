"""The manager's TF run directories read by the real TensorFlow.

A run made by ckpt::Manager with format "tf" (the crash harness's writer,
`ckpt_crash_writer manager tf RUN COUNT ELEMENTS`, built beside the CLI:
keep_last=2, steps from 1) keeps TF's `checkpoint` state file in the run
directory, so that tf.train.latest_checkpoint(run) names the newest step's
bundle, and the pruned steps are gone from it. `ckpt prune` then prunes the
run, and TensorFlow follows.
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import tool_path

tf = pytest.importorskip("tensorflow")

ELEMENTS = 64


def writer_path():
    path = pathlib.Path(tool_path()).parent / "ckpt_crash_writer"
    if not os.access(path, os.X_OK):
        pytest.fail(f"ckpt_crash_writer is not built beside the CLI at {path}")
    return str(path)


def expected_weights(step):
    # crash_state(step, ELEMENTS) of tests/crash/crash_states.h
    return np.float32(step) + (np.arange(ELEMENTS) % 1000).astype(np.float32) / np.float32(1000)


def make_run(tmp_path, count):
    run_dir = tmp_path / "run"
    subprocess.run([writer_path(), "manager", "tf", str(run_dir), str(count), str(ELEMENTS)],
                   check=True, timeout=120)
    return run_dir


def test_latest_checkpoint_finds_the_newest_step(tmp_path):
    run_dir = make_run(tmp_path, 4)
    latest = tf.train.latest_checkpoint(str(run_dir))
    assert latest == str(run_dir / "step-00000004" / "state")
    state = tf.train.get_checkpoint_state(str(run_dir))
    # keep_last=2: steps 1 and 2 were pruned, and the state file says so.
    assert [os.path.relpath(p, run_dir) for p in state.all_model_checkpoint_paths] == [
        "step-00000003/state", "step-00000004/state"]
    reader = tf.train.load_checkpoint(latest)
    np.testing.assert_array_equal(reader.get_tensor("weights"), expected_weights(4))
    assert reader.get_tensor("step").tolist() == [4]


def test_a_restarted_run_goes_on_from_the_latest(tmp_path):
    run_dir = make_run(tmp_path, 2)
    subprocess.run([writer_path(), "manager", "tf", str(run_dir), "1", str(ELEMENTS)], check=True, timeout=120)
    assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "step-00000003" / "state")


def test_prune_updates_the_state_file(tmp_path, run):
    run_dir = make_run(tmp_path, 3)
    result = run("prune", run_dir, "--keep-last", "1")
    assert result.stdout.splitlines() == [f"removed {run_dir / 'step-00000002'}"]
    state = tf.train.get_checkpoint_state(str(run_dir))
    assert [os.path.relpath(p, run_dir) for p in state.all_model_checkpoint_paths] == ["step-00000003/state"]
    assert tf.train.latest_checkpoint(str(run_dir)) == str(run_dir / "step-00000003" / "state")
