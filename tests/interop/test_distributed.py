"""Issue 20: sharded saves across processes with the real engines on loopback.

mpirun (Debian's OpenMPI) with mpi4py: save on 4 ranks, load on 1, 2 and 3
bit-exact against the global arrays; replicated tensors written once (the
shard files' keys, read with safetensors.safe_open); a rank SIGKILLed
between its write and the gather leaves the previous checkpoint intact and
no new step directory, and the next save removes its temporary; an error
on one rank raises on every rank. torch.distributed on gloo (127.0.0.1, a
free port): save on 4 processes, load on 1, 2 and 3; on 2 processes:
DTensor, ShardedTensor, ckpt.Shard and replicated leaves, a subgroup, a
rank SIGKILLed mid-save. A jax Array over 4 CPU devices. Every job is
bounded in time; a hung one is killed with its process group.
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from safetensors import safe_open

import ckpt

MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="OpenMPI's mpirun is not installed (scripts/install-deps)")
JOB_TIMEOUT = 180

# The worker: the same seeded global arrays in every process, split over the
# ranks (w by rows, grid by columns), bias replicated; load checks the boxes
# of another split bit for bit.
WORKER = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    import ckpt

    def global_state():
        rng = np.random.default_rng(20)
        return {"w": rng.standard_normal((10, 3)).astype(np.float32),
                "grid": rng.integers(-2**15, 2**15, (4, 6)).astype(np.int16),
                "bias": rng.standard_normal(3)}

    def share(n, rank, size):
        begin = sum(n // size + (r < n % size) for r in range(rank))
        return begin, n // size + (rank < n % size)

    def local_state(rank, size, step):
        g = global_state()
        b, c = share(10, rank, size)
        gb, gc = share(6, rank, size)
        return {"model": {"w": ckpt.Shard((10, 3), (b, 0), g["w"][b:b + c]),
                          "grid": ckpt.Shard((4, 6), (0, gb), np.ascontiguousarray(g["grid"][:, gb:gb + gc])),
                          "bias": g["bias"]},
                "step": step}

    def check_load(path, comm, rank, size, step):
        g = global_state()
        b, c = share(10, rank, size)
        rb, rc = share(4, rank, size)
        got = ckpt.load(path, comm=comm, boxes={"model.w": ((b, 0), (c, 3)), "model.grid": ((rb, 0), (rc, 6))})
        assert got["model"]["w"].tobytes() == g["w"][b:b + c].tobytes(), "w differs"
        assert got["model"]["grid"].tobytes() == g["grid"][rb:rb + rc].tobytes(), "grid differs"
        assert got["model"]["bias"].tobytes() == g["bias"].tobytes(), "bias differs"
        assert got["step"] == step, got["step"]

    def sharded_tensor(array, size):
        """A torch ShardedTensor of `array`, split by rows over the ranks."""
        import warnings
        import torch
        import torch.distributed as dist
        warnings.simplefilter("ignore")
        from torch.distributed._shard import sharded_tensor as st
        from torch.distributed._shard.sharding_spec import ChunkShardingSpec
        spec = ChunkShardingSpec(dim=0, placements=[f"rank:{r}/cpu" for r in range(size)])
        out = st.empty(spec, *array.shape, dtype=torch.float32)
        shard = out.local_shards()[0]
        begin = shard.metadata.shard_offsets[0]
        shard.tensor.copy_(torch.from_numpy(array[begin:begin + shard.tensor.shape[0]]))
        return out

    class Dying:
        """mpi4py's communicator, but this rank stops after writing its shard
        (at its second gather), says so in `marker`, and waits to be killed."""
        def __init__(self, comm, marker):
            self.comm, self.marker, self.calls = comm, marker, 0
        def Get_rank(self): return self.comm.Get_rank()
        def Get_size(self): return self.comm.Get_size()
        def Barrier(self): self.comm.Barrier()
        def bcast(self, data, root): return self.comm.bcast(data, root=root)
        def allgather(self, data):
            self.calls += 1
            if self.calls == 2:
                with open(self.marker + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(self.marker + ".tmp", self.marker)
                time.sleep(600)
            return self.comm.allgather(data)

    def main():
        mode, path, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
        gloo_group = mode.startswith("gloo:")  # "gloo:save", "gloo:load": the MPI modes over gloo
        if gloo_group:
            mode = mode[len("gloo:"):]
        if mode.startswith("gloo") or gloo_group:
            import datetime
            import torch
            import torch.distributed as dist
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=int(os.environ.get("GLOO_TIMEOUT", "60"))))
            comm = dist.group.WORLD
            rank, size = dist.get_rank(), dist.get_world_size()
        else:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
            rank, size = comm.Get_rank(), comm.Get_size()
        if mode == "save":
            ckpt.save(path, local_state(rank, size, step), comm=comm)
        elif mode == "load":
            check_load(path, comm, rank, size, step)
        elif mode == "die":
            dying = int(sys.argv[4])
            use = Dying(comm, path + ".dying") if rank == dying else comm
            ckpt.save(path, local_state(rank, size, step), comm=use)
            sys.exit("the save went through without the dying rank")
        elif mode == "bad":
            state = local_state(rank, size, step)
            if rank == 1:
                state["model"]["w"] = ckpt.Shard((10, 3), (9, 0), state["model"]["w"].local_tensor)
            try:
                ckpt.save(path, state, comm=comm)
            except ValueError as error:
                assert "rank 1" in str(error), str(error)
            else:
                sys.exit("saved a shard outside its tensor")
            assert not os.path.exists(path)
        elif mode == "gloo-save":
            ckpt.save(path, {"w": ckpt.Shard((10, 3), (5 * rank, 0), global_state()["w"][5 * rank:5 * rank + 5]),
                             "step": step}, comm=comm)
            dist.barrier()
            dist.destroy_process_group()
        elif mode == "gloo-die":
            adapter = ckpt._distributed.communicator(comm)
            class DyingGroup:  # rank 1: stops after writing its shard, until killed
                rank, size, calls = adapter.rank, adapter.size, 0
                def barrier(self): adapter.barrier()
                def broadcast(self, data, root): return adapter.broadcast(data, root)
                def all_gather(self, data):
                    DyingGroup.calls += 1
                    if DyingGroup.calls == 2:
                        open(path + ".dying", "w").write(str(os.getpid()))
                        time.sleep(600)
                    return adapter.all_gather(data)
            use = DyingGroup() if rank == 1 else comm
            try:
                ckpt.save(path, {"w": ckpt.Shard((10, 3), (5 * rank, 0), global_state()["w"][5 * rank:5 * rank + 5]),
                                 "step": step}, comm=use)
            except Exception as error:  # the engine's own error (gloo: the peer is gone, or the timeout)
                print("rank", rank, "raised", type(error).__name__, error, flush=True)
                sys.exit(3)
            sys.exit("the save went through without the dying rank")
        elif mode == "gloo":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor import Replicate, Shard, distribute_tensor
            mesh = init_device_mesh("cpu", (size,))
            g = global_state()
            state = {"dt": distribute_tensor(torch.from_numpy(g["w"]), mesh, [Shard(0)]),
                     "dt_cols": distribute_tensor(torch.from_numpy(g["grid"].astype(np.int32)), mesh, [Shard(1)]),
                     "rep": distribute_tensor(torch.from_numpy(g["bias"]), mesh, [Replicate()]),
                     "plain": torch.from_numpy(g["bias"]) * 2,
                     "st": sharded_tensor(g["w"], size),
                     "step": step}
            ckpt.save(path, state, comm=comm)
            b, c = share(10, rank, size)
            got = ckpt.load(path, comm=comm, boxes={"dt": ((b, 0), (c, 3))}, framework="torch")
            assert got["dt"].numpy().tobytes() == g["w"][b:b + c].tobytes(), "dt differs"
            assert got["dt_cols"].numpy().tobytes() == g["grid"].astype(np.int32).tobytes(), "dt_cols differs"
            assert got["rep"].numpy().tobytes() == g["bias"].tobytes(), "rep differs"
            assert got["st"].numpy().tobytes() == g["w"].tobytes(), "st differs"
            assert got["step"] == step
            # A group of rank 1 alone: its rank 0 is global rank 1.
            sub = dist.new_group([1])
            if rank == 1:
                ckpt.save(path + "-sub", {"w": ckpt.Shard((10, 3), (0, 0), torch.from_numpy(g["w"]))}, comm=sub)
                assert ckpt.load(path + "-sub", comm=sub)["w"].tobytes() == g["w"].tobytes()
            dist.barrier()
            dist.destroy_process_group()
        else:
            sys.exit("unknown mode " + mode)
        if gloo_group:
            dist.barrier()
            dist.destroy_process_group()

    main()
''')


@pytest.fixture
def worker(tmp_path):
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(ckpt.__file__)),
                                                    env.get("PYTHONPATH", "")] if p)
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    return env


def bounded(args, timeout=JOB_TIMEOUT, env=None):
    """Runs `args` in a process group of its own; kills the whole group if it
    runs past `timeout`. Returns (returncode, output)."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env=env or _env())
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{' '.join(map(str, args))} ran past {timeout} s and was killed:\n{output}")
    return process.returncode, output


def mpirun(np_, worker, *args, expect_ok=True):
    code, output = bounded([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np_), sys.executable,
                            str(worker), *map(str, args)])
    if expect_ok:
        assert code == 0, f"mpirun -np {np_} {' '.join(map(str, args))} exited {code}:\n{output}"
    return code, output


def global_state():
    namespace = {}
    exec(WORKER.split("def share")[0], namespace)  # the worker's global_state, without running main
    return namespace["global_state"]()


def visible(directory):
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def temporaries(directory):
    return sorted(name for name in os.listdir(directory) if "ckpt-tmp" in name or "ckpt-old" in name)


@needs_mpi
def test_saved_on_four_mpi_ranks_loads_bit_exact_on_one_two_and_three(worker, tmp_path):
    step = tmp_path / "step-7"
    mpirun(4, worker, "save", step, 7)
    for ranks in (1, 2, 3):
        mpirun(ranks, worker, "load", step, 7)
    # And in this process, whole, against the global arrays.
    g = global_state()
    got = ckpt.load(step)
    assert got["model"]["w"].tobytes() == g["w"].tobytes()
    assert got["model"]["grid"].tobytes() == g["grid"].tobytes()
    assert got["step"] == 7


@needs_mpi
def test_replicated_tensors_are_written_once(worker, tmp_path):
    step = tmp_path / "step"
    mpirun(4, worker, "save", step, 1)
    files = [f"model-{k:05d}-of-00004.safetensors" for k in range(1, 5)]
    assert visible(step) == files + ["model.safetensors.index.json"]
    keys = []
    for name in files:
        with safe_open(str(step / name), framework="np") as f:
            keys.append(sorted(f.keys()))
    assert [k.count("model.bias") for k in keys] == [1, 0, 0, 0], keys
    for rank, k in enumerate(keys):  # each rank's own pieces of the sharded tensors
        assert sum(key.startswith("__ckpt_piece__/model.w/") for key in k) == 1, keys
        assert sum(key.startswith("__ckpt_piece__/model.grid/") for key in k) == 1, keys
    index = json.loads((step / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {"model.bias": files[0]}


@needs_mpi
def test_a_rank_killed_mid_save_commits_nothing(worker, tmp_path):
    step = tmp_path / "step"
    mpirun(4, worker, "save", step, 7)
    marker = pathlib.Path(str(step) + ".dying")
    process = subprocess.Popen([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable,
                                str(worker), "die", str(step), "8", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               env=_env())
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not marker.exists():
            assert process.poll() is None, f"the job ended before rank 2 wrote its shard:\n{process.stdout.read()}"
            assert time.monotonic() < deadline, "rank 2 never got past its write"
            time.sleep(0.05)
        # Rank 2 wrote its shard and waits before the gather: the others wait in it.
        os.kill(int(marker.read_text()), signal.SIGKILL)
        output, _ = process.communicate(timeout=JOB_TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode != 0, output
    assert visible(tmp_path) == ["step", "step.dying", "worker.py"]
    assert len(temporaries(tmp_path)) == 1, os.listdir(tmp_path)  # the killed save's temporary, not committed
    mpirun(2, worker, "load", step, 7)
    assert ckpt.load(step)["step"] == 7
    # The next save at that path removes the temporary.
    mpirun(2, worker, "save", step, 9)
    assert temporaries(tmp_path) == []
    mpirun(3, worker, "load", step, 9)


@needs_mpi
def test_an_error_on_one_rank_raises_on_every_rank(worker, tmp_path):
    mpirun(2, worker, "bad", tmp_path / "bad", 1)
    assert temporaries(tmp_path) == []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_start(worker, *args, timeout_s=60, size=2):
    """Starts `size` worker processes of one gloo group on 127.0.0.1 (a free port)."""
    env = _env()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(size), GLOO_SOCKET_IFNAME="lo",
               GLOO_TIMEOUT=str(timeout_s))
    return [subprocess.Popen([sys.executable, str(worker), *map(str, args)], env=dict(env, RANK=str(rank)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for rank in range(size)]


def gloo_finish(processes):
    """Waits for the processes (bounded; killed with their groups); returns their outputs."""
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=JOB_TIMEOUT)[0])
    except subprocess.TimeoutExpired:
        pytest.fail("the gloo job ran past its time")
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    return outputs


def test_torch_distributed_gloo_two_processes(worker, tmp_path):
    step = tmp_path / "step"
    processes = gloo_start(worker, "gloo", step, 5)
    outputs = gloo_finish(processes)
    for rank, process in enumerate(processes):
        assert process.returncode == 0, f"rank {rank}:\n{outputs[rank]}"
    g = global_state()
    got = ckpt.load(step)
    assert got["dt"].tobytes() == g["w"].tobytes()
    assert got["dt_cols"].tobytes() == g["grid"].astype(np.int32).tobytes()
    assert got["rep"].tobytes() == g["bias"].tobytes()
    assert got["plain"].tobytes() == (g["bias"] * 2).tobytes()
    assert got["st"].tobytes() == g["w"].tobytes()
    keys = []
    for k in (1, 2):
        with safe_open(str(step / f"model-{k:05d}-of-00002.safetensors"), framework="np") as f:
            keys.append(sorted(f.keys()))
    # Replicated DTensor and plain tensor: once, by rank 0; sharded ones: a piece per rank.
    assert [sum(key.startswith("__ckpt_piece__/rep/") for key in k) for k in keys] == [1, 0], keys
    assert [k.count("plain") for k in keys] == [1, 0], keys
    assert [sum(key.startswith("__ckpt_piece__/dt/") for key in k) for k in keys] == [1, 1], keys
    assert [sum(key.startswith("__ckpt_piece__/st/") for key in k) for k in keys] == [1, 1], keys
    assert visible(tmp_path / "step-sub") == ["model-00001-of-00001.safetensors", "model.safetensors.index.json"]


def test_saved_on_four_gloo_ranks_loads_bit_exact_on_one_two_and_three(worker, tmp_path):
    step = tmp_path / "step"
    for mode, size in (("gloo:save", 4), ("gloo:load", 1), ("gloo:load", 2), ("gloo:load", 3)):
        processes = gloo_start(worker, mode, step, 4, size=size)
        outputs = gloo_finish(processes)
        for rank, process in enumerate(processes):
            assert process.returncode == 0, f"{mode} on {size}, rank {rank}:\n{outputs[rank]}"
    assert ckpt.load(step)["model"]["w"].tobytes() == global_state()["w"].tobytes()


def test_a_gloo_rank_killed_mid_save_commits_nothing(worker, tmp_path):
    step = tmp_path / "step"
    processes = gloo_start(worker, "gloo-save", step, 7)
    outputs = gloo_finish(processes)
    assert [p.returncode for p in processes] == [0, 0], outputs
    marker = pathlib.Path(str(step) + ".dying")
    processes = gloo_start(worker, "gloo-die", step, 8, timeout_s=20)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT
        while not marker.exists() or not marker.read_text():
            assert processes[1].poll() is None, "rank 1 ended before it wrote its shard"
            assert time.monotonic() < deadline, "rank 1 never got past its write"
            time.sleep(0.05)
        os.kill(int(marker.read_text()), signal.SIGKILL)
    finally:
        outputs = gloo_finish(processes)
    # Rank 0 hears of it from gloo (the peer is gone, or the group's timeout):
    # an exception, no hang, and its temporary removed on the way out.
    assert processes[0].returncode == 3, outputs[0]
    assert processes[1].returncode == -signal.SIGKILL
    assert visible(tmp_path) == ["step", "step.dying", "worker.py"]
    assert temporaries(tmp_path) == [], os.listdir(tmp_path)
    assert ckpt.load(step)["step"] == 7
    assert ckpt.load(step)["w"].tobytes() == global_state()["w"].tobytes()


def test_shards_without_a_communicator_are_one_process(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    ckpt.save(tmp_path / "one", {"w": ckpt.Shard((4, 3), (0, 0), w), "n": 1})
    got = ckpt.load(tmp_path / "one", comm=None, boxes={"w": ((1, 1), (2, 2))})
    assert got["w"].tobytes() == w[1:3, 1:3].tobytes()
    with pytest.raises(ValueError):
        ckpt.Shard((4,), (0, 0), w)
    with pytest.raises(ValueError, match="cover|rank 0"):  # a box that leaves the tensor uncovered
        ckpt.save(tmp_path / "gap", {"w": ckpt.Shard((5, 3), (0, 0), w)})
    with pytest.raises(TypeError, match="comm="):
        ckpt.save(tmp_path / "x", {"w": w}, comm=object())
    with pytest.raises(ValueError, match="format"):
        ckpt.save(tmp_path / "x.pt", {"w": ckpt.Shard((4, 3), (0, 0), w)}, format="torch")


JAX_WORKER = textwrap.dedent('''
    import sys
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from mpi4py import MPI
    import ckpt
    assert len(jax.devices()) == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    arr = jax.device_put(jnp.asarray(x), NamedSharding(mesh, PartitionSpec("a", "b")))
    assert len(arr.addressable_shards) == 4
    ckpt.save(sys.argv[1], {"x": arr, "n": 3}, comm=MPI.COMM_SELF)
    got = ckpt.load(sys.argv[1], comm=MPI.COMM_SELF, boxes={"x": ((2, 3), (4, 3))})
    assert got["x"].tobytes() == x[2:6, 3:6].tobytes()
    assert got["n"] == 3
''')


def test_a_jax_array_sharded_over_devices_of_one_process(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "jax_worker.py"
    script.write_text(JAX_WORKER)
    env = _env()
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    code, output = bounded([sys.executable, str(script), str(tmp_path / "step")], env=env)
    assert code == 0, output
    assert ckpt.load(tmp_path / "step")["x"].tobytes() == np.arange(48, dtype=np.float32).reshape(8, 6).tobytes()


JAX_PROCESSES_WORKER = textwrap.dedent('''
    import sys
    import numpy as np
    import jax
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    jax.distributed.initialize(coordinator_address="127.0.0.1:" + sys.argv[2], num_processes=2, process_id=rank,
                               initialization_timeout=60)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    import ckpt
    assert len(jax.devices()) == 4 and len(jax.local_devices()) == 2, jax.devices()
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    # Rows over all 4 devices: each process holds 2 adjacent row blocks
    # (one box of 4 rows); the (2, 2) mesh sharded by ("b", "a") gives each
    # process blocks 0 and 2 (or 1 and 3): no box.
    rows = jax.make_array_from_callback((8, 6), NamedSharding(Mesh(np.array(jax.devices()), ("a",)),
                                                              PartitionSpec("a")), lambda index: x[index])
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
    apart = jax.make_array_from_callback((8, 6), NamedSharding(mesh, PartitionSpec(("b", "a"))),
                                         lambda index: x[index])
    assert not rows.is_fully_addressable and len(rows.addressable_shards) == 2
    ckpt.save(sys.argv[1], {"x": rows, "n": 3}, comm=MPI.COMM_WORLD)
    got = ckpt.load(sys.argv[1], comm=MPI.COMM_WORLD, boxes={"x": ((4 * rank, 0), (4, 6))})
    assert got["x"].tobytes() == x[4 * rank:4 * rank + 4].tobytes()
    try:
        ckpt.save(sys.argv[1] + "-apart", {"x": apart}, comm=MPI.COMM_WORLD)
    except ValueError as error:
        assert "not one box" in str(error), error
        print("refused:", error)
    else:
        raise AssertionError("saved a jax Array whose shards on a process form no box")
''')


@needs_mpi
def test_a_jax_array_over_two_processes_with_two_devices_each(tmp_path):
    pytest.importorskip("jax")
    script = tmp_path / "jax_processes.py"
    script.write_text(JAX_PROCESSES_WORKER)
    with socket.socket() as probe:  # a free port on loopback for jax's coordinator
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _env()
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    env["JAX_PLATFORMS"] = "cpu"
    code, output = bounded([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
                            str(script), str(tmp_path / "step"), str(port)], env=env)
    assert code == 0, output
    assert output.count("refused:") == 2, output
    assert ckpt.load(tmp_path / "step")["x"].tobytes() == np.arange(48, dtype=np.float32).reshape(8, 6).tobytes()
    assert not (tmp_path / "step-apart").exists()
