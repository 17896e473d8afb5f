"""ckpt.Manager and the run-directory functions (ckpt.list_run_directory,
ckpt.prune, ckpt.average, ckpt.detect) over the C++ manager: retention,
a Python keep= predicate, async snapshots of numpy arrays and torch tensors,
background failures, restarts, restore_latest into a torch module, the lock
between processes, foreign (RETURNN) directories. Expected values come from
numpy / torch, never from ckpt.

Run: .venv/bin/python -m pytest tests/python/test_manager.py -q
"""

import os
import socket
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
from torch import nn

import ckpt

LOSSES = [5.0, 1.0, 4.0, 3.0, 2.0, 6.0]  # step i's dev_loss: the best are steps 1 and 4


def steps(entries):
    return [e.step for e in entries]


def state(step):
    return {"w": np.full((2, 3), step, dtype=np.float32), "step": step}


def test_keep_last_and_keep_best_together(tmp_path):
    with ckpt.Manager(tmp_path / "run", keep_last=2, keep_best=2, metric="dev_loss") as manager:
        for step, loss in enumerate(LOSSES):
            manager.save(step, state(step), metrics={"dev_loss": loss}, epoch=step // 2)
        manager.wait()
        entries = manager.list()
        # Best two: 1 (1.0) and 4 (2.0); last two: 4 and 5.
        assert steps(entries) == [1, 4, 5]
        assert sorted(os.listdir(tmp_path / "run")) == ["ckpt_manager.json", "ckpt_manager.lock", "step-00000001",
                                                        "step-00000004", "step-00000005"]
        by_step = {e.step: e for e in entries}
        assert by_step[1].kept_by == ["keep_best(2, dev_loss, min)"]
        assert "keep_last(2)" in by_step[4].kept_by and "keep_best(2, dev_loss, min)" in by_step[4].kept_by
        assert by_step[5].epoch == 2 and by_step[5].metrics == {"dev_loss": 6.0}
        assert by_step[5].size > 0 and by_step[5].time > 0
        assert manager.best().step == 1
        assert manager.best("dev_loss", mode="max").step == 5
        assert manager.latest().step == 5
        assert manager.best("no_such_metric") is None


def test_entries_paths_open_with_ckpt_load(tmp_path):
    with ckpt.Manager(tmp_path / "run") as manager:
        manager.save(3, state(3))
        entry = manager.latest()
        loaded = ckpt.load(entry.path)
        np.testing.assert_array_equal(loaded["w"], state(3)["w"])
        assert loaded["step"] == 3
        via_manager = manager.load(3, framework="torch")
        assert isinstance(via_manager["w"], torch.Tensor)
        assert torch.equal(via_manager["w"], torch.full((2, 3), 3.0))
        with pytest.raises(FileNotFoundError):
            manager.load(4)


def test_python_keep_predicate(tmp_path):
    seen, threads = [], set()

    def keep_even(entries):
        seen.append([(e.step, dict(e.metrics)) for e in entries])
        threads.add(threading.get_ident())
        return [e.step for e in entries if e.step % 2 == 0]

    with ckpt.Manager(tmp_path / "run", keep=keep_even) as manager:
        for step in range(5):
            manager.save(step, state(step), metrics={"loss": float(step)})
        manager.wait()
        assert steps(manager.list()) == [0, 2, 4]
        assert all("custom" in e.kept_by for e in manager.list())
    assert seen and seen[-1][-1] == (4, {"loss": 4.0})  # given the entries with their metrics
    assert threads - {threading.get_ident()}  # called from the manager's background thread (with the GIL)


def test_policy_objects_compose(tmp_path):
    policy = [ckpt.KeepLast(1), ckpt.KeepSteps([0]), ckpt.KeepEverySteps(3)]
    with ckpt.Manager(tmp_path / "run", policy=policy) as manager:
        for step in range(7):
            manager.save(step, state(step))
        manager.wait()
        assert steps(manager.list()) == [0, 3, 6]
    assert ckpt.ReturnnPolicy().keep_last_n == 2 and ckpt.ReturnnPolicy().keep_best_n == 4
    assert repr(ckpt.KeepBest(2, "dev_loss", mode="max")) == "keep_best(2, dev_loss, max)"
    with pytest.raises(ValueError):
        ckpt.KeepLast(-1)
    with pytest.raises(ValueError):
        ckpt.KeepBest(1, "loss", mode="sideways")
    with pytest.raises(TypeError):
        ckpt.Manager(tmp_path / "other", policy=[42])


def test_returnn_policy_keeps_by_epoch_and_scores(tmp_path):
    # RETURNN's rule, epochs 1..8 with keep_last_n=2, keep_best_n=1 and its
    # default pattern for E <= 10 (every 4th epoch and 5·2^i): 4, 5, 8; the
    # last two: 7, 8; the best dev_score: epoch 2.
    scores = [0.9, 0.1, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    with ckpt.Manager(tmp_path / "run", policy=ckpt.ReturnnPolicy(keep_last_n=2, keep_best_n=1)) as manager:
        for epoch, score in enumerate(scores, start=1):
            manager.save(epoch, state(epoch), metrics={"dev_score": score}, epoch=epoch)
        manager.wait()
        assert steps(manager.list()) == [2, 4, 5, 7, 8]


def test_async_save_snapshots_numpy(tmp_path):
    array = np.arange(1000, dtype=np.float64)
    expected = array.copy()
    with ckpt.Manager(tmp_path / "run") as manager:
        manager.save(1, {"x": array}, blocking=False)
        array[:] = -1  # right after save returns: the checkpoint must hold the old values
        manager.wait()
        np.testing.assert_array_equal(ckpt.load(manager.latest().path)["x"], expected)


def test_async_save_snapshots_torch(tmp_path):
    weight = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    transposed = weight.t()  # not contiguous: made contiguous, then snapshotted
    expected, expected_t = weight.clone(), transposed.clone()
    with ckpt.Manager(tmp_path / "run", max_in_flight=2) as manager:
        manager.save(1, {"w": weight, "t": transposed}, blocking=False)
        with torch.no_grad():
            weight.fill_(7.0)
        manager.save(2, {"w": weight}, blocking=False)
        with torch.no_grad():
            weight.zero_()
        manager.wait()
        first = manager.load(1, framework="torch")
        assert torch.equal(first["w"], expected) and torch.equal(first["t"], expected_t)
        assert torch.equal(manager.load(2, framework="torch")["w"], torch.full((3, 4), 7.0))


def test_async_save_of_mapped_arrays(tmp_path):
    # Arrays mapping a checkpoint file: saved from the mapping, same values.
    source = tmp_path / "source.safetensors"
    ckpt.save(source, {"x": np.arange(6, dtype=np.int32)})
    loaded = ckpt.load(source)
    with ckpt.Manager(tmp_path / "run") as manager:
        manager.save(1, loaded, blocking=False)
        manager.wait()
        np.testing.assert_array_equal(ckpt.load(manager.latest().path)["x"], np.arange(6, dtype=np.int32))


def test_failed_background_save_raises_on_wait(tmp_path):
    # npz holds tensors only: the string leaf fails in the writer, on the
    # background thread; save() has returned already.
    manager = ckpt.Manager(tmp_path / "run", format="npz")
    manager.save(1, {"w": np.ones(2), "note": "text"}, blocking=False)
    with pytest.raises(ckpt.UnsupportedError, match="note"):
        manager.wait()
    manager.wait()  # raised once
    assert manager.list() == []
    manager.save(1, {"w": np.ones(2)})  # the step is free again
    assert steps(manager.list()) == [1]
    manager.close()


def test_failed_background_save_raises_on_next_save_and_close(tmp_path):
    manager = ckpt.Manager(tmp_path / "run", format="npz")
    manager.save(1, {"note": "text"}, blocking=False)
    with pytest.raises(ckpt.UnsupportedError):
        manager.save(2, {"w": np.ones(2)})
    manager.save(3, {"note": "text"}, blocking=False)
    with pytest.raises(ckpt.UnsupportedError):
        manager.close()


def test_keep_predicate_that_raises_fails_the_cleanup(tmp_path):
    def broken(entries):
        raise RuntimeError("predicate broke")

    manager = ckpt.Manager(tmp_path / "run", keep=broken)
    manager.save(1, state(1))
    with pytest.raises(ValueError, match="^the keep= function raised RuntimeError: predicate broke$"):
        manager.wait()
    assert steps(ckpt.list_run_directory(tmp_path / "run").checkpoints) == [1]  # nothing deleted
    with pytest.raises(ValueError, match="predicate broke"):  # list() runs the policies too, in the caller
        manager.list()
    manager.close()


def test_context_manager_closes_and_releases_the_lock(tmp_path):
    run = tmp_path / "run"
    with ckpt.Manager(run) as manager:
        manager.save(1, state(1), blocking=False)
    # Closed: the save is committed, the lock is free for the next writer.
    assert steps(ckpt.list_run_directory(run).checkpoints) == [1]
    with pytest.raises(ValueError, match="closed"):
        manager.save(2, state(2))
    manager.close()  # a second close does nothing
    with ckpt.Manager(run) as again:
        again.save(2, state(2))


def test_restart_sees_checkpoints_and_decides_the_same(tmp_path):
    run = tmp_path / "run"
    with ckpt.Manager(run, keep_last=1, keep_best=1, metric="dev_loss") as first:
        for step in range(4):
            first.save(step, state(step), metrics={"dev_loss": LOSSES[step]})
        first.wait()
        kept = [(e.step, e.kept_by) for e in first.list()]
    assert [s for s, _ in kept] == [1, 3]
    with ckpt.Manager(run, keep_last=1, keep_best=1, metric="dev_loss") as second:
        assert [(e.step, e.kept_by) for e in second.list()] == kept
        assert second.latest().metrics == {"dev_loss": 3.0}
        with pytest.raises(ValueError, match="not newer"):
            second.save(3, state(3))
        second.save(4, state(4), metrics={"dev_loss": 2.0})
        second.wait()
        assert steps(second.list()) == [1, 4]
    # The listing (no manager) reports what the run recorded.
    listing = ckpt.list_run_directory(run)
    assert listing.layout == "ckpt" and steps(listing.checkpoints) == [1, 4]


def test_restore_latest_into_a_torch_module(tmp_path):
    torch.manual_seed(0)
    trained = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with ckpt.Manager(tmp_path / "run") as manager:
        assert manager.restore_latest(nn.Linear(3, 4)) is None  # empty run: a fresh start
        manager.save(10, trained.state_dict())
        fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        report = manager.restore_latest(fresh)
        assert report is not None and report.tree is fresh
        assert report.missing == [] and report.unexpected == []
        for name, tensor in trained.state_dict().items():
            assert torch.equal(fresh.state_dict()[name], tensor), name
        with pytest.raises(ckpt.MismatchError) as raised:  # strict by default
            manager.restore_latest(nn.Sequential(nn.Linear(3, 4)))
        assert "2.weight" in raised.value.report.unexpected
        report = manager.restore_latest(nn.Sequential(nn.Linear(3, 4)), strict=False)
        assert "2.weight" in report.unexpected


def test_restore_latest_into_a_nest(tmp_path):
    with ckpt.Manager(tmp_path / "run") as manager:
        manager.save(1, {"w": np.arange(3, dtype=np.float32), "step": 1})
        report = manager.restore_latest({"w": np.zeros(3, dtype=np.float32), "step": 0})
        np.testing.assert_array_equal(report.tree["w"], np.arange(3, dtype=np.float32))
        assert report.tree["step"] == 1


def test_detect_every_format(tmp_path):
    tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    written = {
        "safetensors": (tmp_path / "a.safetensors", {}),
        "npz": (tmp_path / "a.npz", {}),
        "torch": (tmp_path / "a.pt", {}),
        "flax": (tmp_path / "a.msgpack", {}),
        "tf": (tmp_path / "prefix", {"format": "tf"}),
        "orbax": (tmp_path / "orbax_dir", {"format": "orbax"}),
    }
    for path, options in written.values():
        ckpt.save(path, tensors, **options)
    ckpt.save(tmp_path / "a.npy", np.ones(3))
    for expected, (path, _) in written.items():
        assert ckpt.detect(path) == expected, path
        assert ckpt.detect(str(path)) == expected
    assert ckpt.detect(tmp_path / "a.npy") == "npy"
    torch.save({"w": torch.ones(2)}, tmp_path / "by_torch.bin")  # content, not extension
    assert ckpt.detect(tmp_path / "by_torch.bin") == "torch"
    with pytest.raises(FileNotFoundError):
        ckpt.detect(tmp_path / "missing.safetensors")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(ckpt.UnsupportedError):
        ckpt.detect(tmp_path / "notes.txt")


def test_manager_in_every_format_writes_what_detect_names(tmp_path):
    for format in ["npz", "torch", "flax", "tf", "orbax"]:
        with ckpt.Manager(tmp_path / format, format=format) as manager:
            manager.save(1, {"w": np.arange(4, dtype=np.float32)})
            entry = manager.latest()
            assert ckpt.detect(entry.path) == format
            np.testing.assert_array_equal(ckpt.load(entry.path)["w"], np.arange(4, dtype=np.float32))


def returnn_run(run):
    """A RETURNN-style directory written by torch.save: epoch.NNN.pt beside
    epoch.NNN.opt.pt, and a file that belongs to no checkpoint."""
    run.mkdir()
    for epoch in (1, 2, 3, 4):
        torch.save({"model": {"w": torch.full((2,), float(epoch))}, "epoch": epoch}, run / f"epoch.{epoch:03d}.pt")
        torch.save({"optimizer": {"lr": 0.1}}, run / f"epoch.{epoch:03d}.opt.pt")
    (run / "notes.txt").write_text("keep me")
    return run


def test_list_run_directory_on_a_foreign_returnn_dir(tmp_path):
    run = returnn_run(tmp_path / "returnn")
    listing = ckpt.ls(run)
    assert listing.layout == "returnn" and listing.run_dir == str(run)
    assert [e.epoch for e in listing.checkpoints] == [1, 2, 3, 4]
    first = listing.checkpoints[0]
    assert first.path == str(run / "epoch.001.pt")
    assert sorted(first.files) == [str(run / "epoch.001.opt.pt"), str(run / "epoch.001.pt")]
    assert first.size == os.path.getsize(run / "epoch.001.pt") + os.path.getsize(run / "epoch.001.opt.pt")
    assert first.kept_by == [] and first.metrics == {}
    document = listing.document()  # what `ckpt ls --json` prints
    assert document["layout"] == "returnn" and [c["epoch"] for c in document["checkpoints"]] == [1, 2, 3, 4]
    assert document["checkpoints"][0]["step"] is None and document["checkpoints"][0]["path"] == first.path
    loaded = ckpt.load(first.path, framework="torch")
    assert torch.equal(loaded["model"]["w"], torch.full((2,), 1.0))
    with pytest.raises(FileNotFoundError):
        ckpt.list_run_directory(tmp_path / "missing")
    assert ckpt.list_run_directory(tmp_path / "returnn" / "..").layout == "empty"


def test_prune(tmp_path):
    run = tmp_path / "run"
    with ckpt.Manager(run) as manager:  # no policy: nothing deleted
        for step in range(4):
            manager.save(step, state(step))
    assert ckpt.prune(run, keep_last=1, dry_run=True) == [str(run / f"step-0000000{i}") for i in range(3)]
    assert len(ckpt.list_run_directory(run).checkpoints) == 4
    assert ckpt.prune(run, keep_last=2) == [str(run / "step-00000000"), str(run / "step-00000001")]
    assert steps(ckpt.list_run_directory(run).checkpoints) == [2, 3]

    returnn = returnn_run(tmp_path / "returnn")
    with pytest.raises(ValueError, match="foreign"):
        ckpt.prune(returnn, keep_last=1)
    removed = ckpt.prune(returnn, keep_last=2, foreign=True)
    assert sorted(removed) == sorted(str(returnn / f"epoch.00{e}{k}.pt") for e in (1, 2) for k in ("", ".opt"))
    assert sorted(os.listdir(returnn)) == ["epoch.003.opt.pt", "epoch.003.pt", "epoch.004.opt.pt", "epoch.004.pt",
                                           "notes.txt"]


def test_average(tmp_path):
    run = tmp_path / "run"
    with ckpt.Manager(run) as manager:
        for step, loss in enumerate([3.0, 1.0, 2.0]):
            manager.save(step, {"w": np.full(3, float(step), dtype=np.float32), "count": step},
                         metrics={"loss": loss})
    used = ckpt.average(tmp_path / "last.safetensors", run, last=2)
    assert [(u["step"], u["epoch"]) for u in used] == [(1, None), (2, None)]
    averaged = ckpt.load(tmp_path / "last.safetensors")
    np.testing.assert_array_equal(averaged["w"], np.full(3, 1.5, dtype=np.float32))
    assert averaged["count"] == 2  # non-tensor leaves: the newest input's
    ckpt.average(tmp_path / "best.pt", run, best=2, metric="loss")
    np.testing.assert_array_equal(ckpt.load(tmp_path / "best.pt")["w"], np.full(3, 1.5, dtype=np.float32))
    paths = [e.path for e in ckpt.ls(run).checkpoints]
    ckpt.average(tmp_path / "all.safetensors", paths)
    np.testing.assert_array_equal(ckpt.load(tmp_path / "all.safetensors")["w"], np.full(3, 1.0, dtype=np.float32))
    ckpt.save(tmp_path / "other.safetensors", {"w": np.zeros(4, dtype=np.float32)})
    with pytest.raises(ckpt.MismatchError, match="other.safetensors"):
        ckpt.average(tmp_path / "bad.safetensors", [paths[0], tmp_path / "other.safetensors"])
    with pytest.raises(ValueError):
        ckpt.average(tmp_path / "bad.safetensors", run, last=1, best=1, metric="loss")


def test_a_second_writer_in_another_process_is_refused(tmp_path):
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import ckpt, sys
        try:
            ckpt.Manager({str(run)!r})
        except OSError as error:
            print("refused:", error)
            sys.exit(0)
        sys.exit(1)
    """)
    with ckpt.Manager(run) as manager:
        manager.save(1, state(1))
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"pid {os.getpid()}" in done.stdout and socket.gethostname() in done.stdout
        assert "ckpt_manager.lock" in done.stdout or str(run) in done.stdout
        # A read-only manager takes no lock: it reads alongside the writer.
        reader = ckpt.Manager(run, read_only=True)
        assert steps(reader.list()) == [1]
        with pytest.raises(ValueError, match="read-only"):
            reader.save(2, state(2))
        reader.close()
    # Released: the next process may write.
    again = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert again.returncode == 1, again.stdout + again.stderr


def test_bad_options(tmp_path):
    with pytest.raises(ValueError, match="metric"):
        ckpt.Manager(tmp_path / "a", keep_best=2)
    with pytest.raises(ValueError):
        ckpt.Manager(tmp_path / "b", max_in_flight=0)
    with pytest.raises(ckpt.UnsupportedError):
        ckpt.Manager(tmp_path / "c", format="no-such-format")
    with pytest.raises(TypeError):
        ckpt.Manager(tmp_path / "d", keep=3)
    with pytest.raises(FileNotFoundError):
        ckpt.Manager(tmp_path / "missing", read_only=True)
    with ckpt.Manager(tmp_path / "e") as manager:
        with pytest.raises(TypeError, match="'bad'"):
            manager.save(1, {"bad": object()})
        with pytest.raises(ValueError):
            manager.best()  # no metric configured nor given


def test_dropping_a_manager_with_pending_saves_and_a_keep_predicate_does_not_hang(tmp_path):
    # The destructor waits for the background thread, which needs the GIL to
    # run keep= and to release lent arrays: it must wait with the GIL released.
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import gc, ckpt, numpy as np, torch
        manager = ckpt.Manager({str(run)!r}, keep=lambda entries: [e.step for e in entries][-1:], max_in_flight=3)
        for step in range(3):
            manager.save(step, {{"w": np.ones(1000) * step, "t": torch.ones(10) * step}}, blocking=False)
        del manager
        gc.collect()
        print([e.step for e in ckpt.ls({str(run)!r}).checkpoints])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2]"


def test_exiting_without_close_commits_the_pending_saves(tmp_path):
    # Python closes open managers at exit, before it finalizes (the background
    # thread could no longer take the GIL); a failure is a warning then.
    run, failing = tmp_path / "run", tmp_path / "failing"
    script = textwrap.dedent(f"""
        import ckpt, numpy as np, torch
        manager = ckpt.Manager({str(run)!r}, keep=lambda entries: [e.step for e in entries][-1:], max_in_flight=3)
        for step in range(3):
            manager.save(step, {{"w": np.ones(1000) * step, "t": torch.ones(10) * step}}, blocking=False)
        broken = ckpt.Manager({str(failing)!r}, format="npz")
        broken.save(1, {{"note": "text"}}, blocking=False)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert steps(ckpt.ls(run).checkpoints) == [2]
    assert "RuntimeWarning" in done.stderr and "npz holds only tensors" in done.stderr
    assert ckpt.ls(failing).checkpoints == []


SNAPSHOT_MEMORY = r"""
import sys, numpy as np, ckpt

def anon_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024

source, run, kind = sys.argv[1:]
loaded = ckpt.load(source)                                   # read-only arrays over the mapped file
state = loaded if kind == "mapped" else {k: np.array(v) for k, v in loaded.items()}
with ckpt.Manager(run, fsync=False) as manager:
    before = anon_bytes()
    manager.save(1, state, blocking=False)
    grown = anon_bytes() - before
    manager.wait()
print(grown)
"""


def test_async_save_copies_arrays_but_not_mapped_ones(tmp_path):
    # What an asynchronous save copies shows in the process's anonymous
    # memory: a read-only array over a mapped checkpoint is not copied (the
    # core gets the mapping itself), a numpy array of the caller's is.
    size = 32 << 20
    source = tmp_path / "big.safetensors"
    ckpt.save(source, {"w": np.ones(size // 4, dtype=np.float32)}, fsync=False)
    grown = {}
    for kind in ("mapped", "copy"):
        done = subprocess.run([sys.executable, "-c", SNAPSHOT_MEMORY, str(source), str(tmp_path / kind), kind],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        grown[kind] = int(done.stdout)
        np.testing.assert_array_equal(ckpt.load(ckpt.ls(tmp_path / kind).checkpoints[0].path)["w"],
                                      np.ones(size // 4, dtype=np.float32))
    assert grown["copy"] >= size * 3 // 4, grown
    assert grown["mapped"] < size // 4, grown


def test_load_latest(tmp_path):
    with ckpt.Manager(tmp_path / "run") as manager:
        assert manager.load_latest() is None
        manager.save(3, {"w": np.full(2, 3.0)})
        manager.save(7, {"w": np.full(2, 7.0)}, blocking=False)
        manager.wait()
        np.testing.assert_array_equal(manager.load_latest()["w"], np.full(2, 7.0))
        assert torch.is_tensor(manager.load_latest(framework="torch")["w"])
