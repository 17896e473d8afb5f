"""Issue 20's figure: aggregate save bandwidth of a sharded save on 2 ranks
against one rank's (target: >= 0.8 x 2 x one rank's). Run by hand, never in
tests:

    .venv/bin/python bench/bench_distributed.py [--mib 256] [--repeat 3] [--dir /tmp]

Each rank holds --mib MiB of float32 shards (8 tensors, split by rows) and
saves them with ckpt.save(path, state, comm=MPI.COMM_WORLD) (fsync on, the
whole two-phase commit); the time of a save is the slowest rank's, from a
barrier before it to its return. The best of --repeat saves is reported,
beside the limit measured in the same run, interleaved: each rank writing
the same bytes with plain write() calls (+ fsync) to a file of its own,
which says what the disk allows (a second writer adds no bandwidth where
one saturates the disk or the cores). Needs mpirun (OpenMPI) and mpi4py.

    .venv/bin/python bench/bench_distributed.py --reshard [--mib 64] [--dir /tmp]

The reshard figure (target: a load N -> M reads <= 1.1 x the bytes each rank
needs): 4 ranks save --mib MiB each as above; then each rank of M = 3, 2, 1
loads its rows of every tensor (ckpt.load(path, boxes=...)) alone, in a
process of its own, after the page cache is dropped (needs root), and the
bytes read from the disk are /proc/self/io's read_bytes around the load.
Printed per M: the worst rank's read / needed.
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
    def plain(path):
        """The limit: the same bytes written by plain write() calls (+ fsync)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for shard in state.values():
                view = memoryview(shard.local_tensor).cast("B")
                while view:
                    view = view[os.write(fd, view):]
            if not args.no_fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def timed(work):
        comm.Barrier()
        start = time.perf_counter()
        work()
        return comm.allreduce(time.perf_counter() - start, op=MPI.MAX)

    best = best_plain = None
    for repeat in range(args.repeat):  # interleaved: a ckpt save, then the plain writes
        path = os.path.join(args.dir, f"step-{repeat}")
        elapsed = timed(lambda: ckpt.save(path, state, comm=comm, fsync=not args.no_fsync))
        best = elapsed if best is None else min(best, elapsed)
        comm.Barrier()
        if rank == 0 and not args.keep:
            shutil.rmtree(path)
        plain_path = os.path.join(args.dir, f"plain-{rank}")
        elapsed = timed(lambda: plain(plain_path))
        best_plain = elapsed if best_plain is None else min(best_plain, elapsed)
        comm.Barrier()
        os.unlink(plain_path)
    if rank == 0:
        total = args.mib * 2**20 * size
        print(f"{size} {total / best / 1e6:.1f} {total / best_plain / 1e6:.1f}")


def reshard_main(args):
    """One rank of M loading its rows: prints read_bytes / needed bytes."""
    import numpy as np
    import ckpt
    rank, ranks = args.load_rank
    index = ckpt.load(args.path)
    boxes, needed = {}, 0
    for name, tensor in index.items():
        rows, columns = tensor.shape
        start, stop = rows * rank // ranks, rows * (rank + 1) // ranks
        boxes[name] = ((start, 0), (stop - start, columns))
        needed += (stop - start) * columns * tensor.dtype.itemsize
    del index, tensor  # nothing of the file mapped (drop_caches keeps a mapped file's pages)
    with open("/proc/sys/vm/drop_caches", "w") as drop:
        drop.write("3\n")

    def read_bytes():
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("read_bytes:"))

    before = read_bytes()
    loaded = ckpt.load(args.path, boxes=boxes)
    total = sum(int(np.asarray(value).sum() != 0.5) for value in loaded.values())  # every byte touched
    assert total == len(boxes)
    print(f"{(read_bytes() - before) / needed:.3f} {needed}")


def reshard(args, directory):
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable, __file__,
               "--rank-main", "--keep", "--mib", str(args.mib), "--repeat", "1", "--dir", directory]
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800, env=env)
    path = os.path.join(directory, "step-0")
    for ranks in (3, 2, 1):
        ratios = []
        for rank in range(ranks):
            out = subprocess.run([sys.executable, __file__, "--load-rank", str(rank), str(ranks), "--path", path],
                                 check=True, capture_output=True, text=True, timeout=600).stdout
            ratios.append(float(out.split()[0]))
        print(f"4 -> {ranks} ranks: read / needed per rank {' '.join(f'{r:.3f}' for r in ratios)}; "
              f"worst {max(ratios):.3f} (target <= 1.10)")


def run(ranks, args, directory):
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), sys.executable, __file__,
               "--rank-main", "--mib", str(args.mib), "--repeat", str(args.repeat), "--dir", directory] + (["--no-fsync"] if args.no_fsync else [])
    # Waiting ranks yield their core instead of polling (OpenMPI polls by
    # default, which on a machine with fewer cores than ranks and writer
    # threads takes the writers' time: 0.07 instead of 0.42 on 2 cores).
    env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800, env=env).stdout
    _, ckpt_rate, plain_rate = out.split()[-3:]
    return float(ckpt_rate), float(plain_rate)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256, help="MiB of shards per rank")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--no-fsync", action="store_true",
                        help="saves without fsync: the protocol and the writes into the page cache, not the disk")
    parser.add_argument("--reshard", action="store_true",
                        help="the reshard figure: bytes read per rank loading N -> M against its boxes' bytes")
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load-rank", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args)
        return
    if args.load_rank:
        reshard_main(args)
        return
    directory = tempfile.mkdtemp(prefix="ckpt-bench-dist-", dir=args.dir)
    if args.reshard:
        try:
            reshard(args, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return
    try:
        one, one_plain = run(1, args, directory)
        two, two_plain = run(2, args, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"one rank:  ckpt {one:8.1f} MB/s, plain write(){'' if args.no_fsync else ' + fsync'} {one_plain:8.1f} MB/s"
          f" ({args.mib} MiB)")
    print(f"two ranks: ckpt {two:8.1f} MB/s, plain {two_plain:8.1f} MB/s aggregate ({2 * args.mib} MiB)")
    print(f"ckpt two / (2 x one): {two / (2 * one):.2f} (target >= 0.80 where the disk allows)")
    print(f"what the disk allows, plain two / (2 x one): {two_plain / (2 * one_plain):.2f}")
    print(f"ckpt two ranks / plain two writers: {two / two_plain:.2f}; one rank: {one / one_plain:.2f}")


if __name__ == "__main__":
    main()
