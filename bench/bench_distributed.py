"""Issue 20's figure: aggregate save bandwidth of a sharded save on 2 ranks
against one rank's (target: >= 0.8 x 2 x one rank's). Run by hand, never in
tests:

    .venv/bin/python bench/bench_distributed.py [--mib 256] [--repeat 3] [--dir /tmp]

Each rank holds --mib MiB of float32 shards (8 tensors, split by rows) and
saves them with ckpt.save(path, state, comm=MPI.COMM_WORLD) (fsync on, the
whole two-phase commit); the time of a save is the slowest rank's, from a
barrier before it to its return. The best of --repeat saves is reported.
Needs mpirun (OpenMPI) and mpi4py.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time


def rank_main(args):
    import numpy as np
    from mpi4py import MPI
    import ckpt
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rows = args.mib * 2**20 // 4 // 8 // 1024  # per tensor, of 1024 float32 each
    rng = np.random.default_rng(rank)
    state = {f"layer{i}": ckpt.Shard((rows * size, 1024), (rows * rank, 0),
                                     rng.standard_normal((rows, 1024), dtype=np.float32)) for i in range(8)}
    best = None
    for repeat in range(args.repeat):
        path = os.path.join(args.dir, f"step-{repeat}")
        comm.Barrier()
        start = time.perf_counter()
        ckpt.save(path, state, comm=comm, fsync=not args.no_fsync)
        elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        best = elapsed if best is None else min(best, elapsed)
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(path)
    if rank == 0:
        total = args.mib * 2**20 * size
        print(f"{size} {total / best / 1e6:.1f}")


def run(ranks, args, directory):
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), sys.executable, __file__,
               "--rank-main", "--mib", str(args.mib), "--repeat", str(args.repeat), "--dir", directory] + (["--no-fsync"] if args.no_fsync else [])
    # Waiting ranks yield their core instead of polling (OpenMPI polls by
    # default, which on a machine with fewer cores than ranks and writer
    # threads takes the writers' time: 0.07 instead of 0.42 on 2 cores).
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800, env=env).stdout
    return float(out.split()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256, help="MiB of shards per rank")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--no-fsync", action="store_true",
                        help="saves without fsync: the protocol and the writes into the page cache, not the disk")
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return
    directory = tempfile.mkdtemp(prefix="ckpt-bench-dist-", dir=args.dir)
    try:
        one = run(1, args, directory)
        two = run(2, args, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"one rank:  {one:8.1f} MB/s ({args.mib} MiB)")
    print(f"two ranks: {two:8.1f} MB/s aggregate ({2 * args.mib} MiB)")
    print(f"ratio two / (2 x one): {two / (2 * one):.2f} (target >= 0.80)")


if __name__ == "__main__":
    main()
