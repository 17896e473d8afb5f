"""Issue 20 with the manager: ``ckpt.Manager(run, comm=...)`` over the real
engines on loopback, 2 processes each: mpirun with mpi4py (``ckpt.Shard``
leaves) and torch.distributed on gloo (DTensor leaves), blocking and
asynchronous saves (on the manager's thread: mpi4py at MPI_THREAD_MULTIPLE,
torch on a gloo group of the manager's own). Three steps with keep_last=2:
two step directories, each loaded in this one process bit-exact, each
rank's boxes loaded in the job, restore_latest on every rank. Every job is
bounded in time (test_distributed's launchers)."""

import os
import textwrap

import numpy as np
import pytest

import ckpt
from test_distributed import bounded, gloo_finish, gloo_start, mpirun, needs_mpi  # noqa: F401 (bounded: mpirun's)

WORKER = textwrap.dedent('''
    import os, sys
    import numpy as np
    import ckpt

    def global_state(step):
        rng = np.random.default_rng(step)
        return {"w": rng.standard_normal((10, 3)).astype(np.float32), "bias": rng.standard_normal(3)}

    def share(n, rank, size):
        begin = sum(n // size + (r < n % size) for r in range(rank))
        return begin, n // size + (rank < n % size)

    def main():
        engine, run, blocking = sys.argv[1], sys.argv[2], sys.argv[3] == "blocking"
        if engine == "gloo":
            import datetime
            import torch
            import torch.distributed as dist
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor import Shard, distribute_tensor
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
            comm = dist.group.WORLD
            rank, size = dist.get_rank(), dist.get_world_size()
            mesh = init_device_mesh("cpu", (size,))
        else:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
            rank, size = comm.Get_rank(), comm.Get_size()
        b, c = share(10, rank, size)
        with ckpt.Manager(run, keep_last=2, comm=comm, fsync=False, max_in_flight=2) as manager:
            for step in (1, 2, 3):
                g = global_state(step)
                if engine == "gloo":
                    state = {"w": distribute_tensor(torch.from_numpy(g["w"]), mesh, [Shard(0)]),
                             "bias": torch.from_numpy(g["bias"]), "step": step}
                else:
                    local = g["w"][b:b + c].copy()
                    state = {"w": ckpt.Shard((10, 3), (b, 0), local), "bias": g["bias"], "step": step}
                manager.save(step, state, metrics={"loss": 1.0 / step}, blocking=blocking)
                if engine != "gloo":
                    local[:] = 0  # the caller's memory changes: the snapshot (or the commit) has it already
            manager.wait()
            steps = [entry.step for entry in manager.list()]
            assert steps == [2, 3], steps
            got = manager.load(3, boxes={"w": ((b, 0), (c, 3))})
            assert got["w"].tobytes() == global_state(3)["w"][b:b + c].tobytes(), "w's box differs"
            assert got["step"] == 3, got["step"]
            target = {"w": np.zeros((10, 3), np.float32), "bias": np.zeros(3), "step": 0}
            assert manager.restore_latest(target) is not None
        if engine == "gloo":
            dist.barrier()
            dist.destroy_process_group()

    main()
''')


@pytest.fixture
def manager_worker(tmp_path):
    path = tmp_path / "manager_worker.py"
    path.write_text(WORKER)
    return path


def global_state(step):
    namespace = {}
    exec(WORKER.split("def share")[0], namespace)  # the worker's global_state, without running main
    return namespace["global_state"](step)


def check_run(run):
    """The run the worker left: steps 2 and 3, whole and bit-exact here."""
    entries = ckpt.Manager(run, read_only=True).list()
    assert [entry.step for entry in entries] == [2, 3]
    assert sorted(name for name in os.listdir(run) if name.startswith("step-")) == ["step-00000002", "step-00000003"]
    for entry in entries:
        assert entry.path == str(run / f"step-{entry.step:08d}" / "state")
        assert sorted(os.listdir(entry.path)) == ["model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors",
                                                  "model.safetensors.index.json"]
        assert entry.metrics == {"loss": 1.0 / entry.step}
        g = global_state(entry.step)
        got = ckpt.load(entry.path)
        assert got["w"].tobytes() == g["w"].tobytes()
        assert got["bias"].tobytes() == g["bias"].tobytes()
        assert got["step"] == entry.step
    # A one-process manager opens the run and sees the same.
    with ckpt.Manager(run) as one:
        assert [entry.step for entry in one.list()] == [2, 3]
        assert one.load(3)["w"].tobytes() == global_state(3)["w"].tobytes()


@needs_mpi
@pytest.mark.parametrize("blocking", ["blocking", "async"])
def test_manager_over_mpi4py_on_two_ranks(manager_worker, tmp_path, blocking):
    run = tmp_path / "run"
    mpirun(2, manager_worker, "mpi", run, blocking)
    check_run(run)


@pytest.mark.parametrize("blocking", ["blocking", "async"])
def test_manager_over_torch_gloo_on_two_processes(manager_worker, tmp_path, blocking):
    pytest.importorskip("torch")
    run = tmp_path / "run"
    processes = gloo_start(manager_worker, "gloo", run, blocking)
    outputs = gloo_finish(processes)
    for rank, process in enumerate(processes):
        assert process.returncode == 0, f"rank {rank}:\n{outputs[rank]}"
    check_run(run)
