"""ckpt beside torch 2.13 on .pt files, in one run (make bench-torch).

Writes two states with torch.save -- a 1 GiB state (100 float32 tensors) and
a 10,000-tensor state (10 KiB each) -- then times, best of N, on the same
warm files:
  torch.load (all tensors materialized)  vs  ckpt open + copy every tensor
  torch.load(mmap=True)                  vs  ckpt lazy open
  torch.save                             vs  ckpt save (.pt, no fsync; and with fsync)
  torch.save onto an existing file       vs  ckpt save onto an existing file
      (interleaved pairs, each after a sync; torch truncates in place, ckpt
      replaces by rename and frees the old file's blocks in the background,
      drained untimed before the next contender)
  plain write() + fsync of the same bytes  vs  ckpt durable save (fsync), in
      turns in one process (ckpt_bench file), with and without the early
      writeback (sync_file_range) of durable writes
ckpt's figures come from `ckpt_bench file PATH` (C++), run as a subprocess
that reports its own timings, so process start-up is not counted.
Prints ratios (peer time / ckpt time: higher is better for ckpt). Never part
of pass/fail.

    .venv/bin/python bench/bench_torch.py [--repeats N] [--gib X] [--bench build/ckpt_bench]
"""

import json
import math
import os
import subprocess
import time

import torch

from bench_common import best, run
from bench_vm import touch_and_free


def overwrite_pairs(sd, path, directory, bench, repeats, in_process=None):
    """Best times of torch.save and of ckpt's save onto an existing file of
    the same state, in pairs (torch, ckpt), each after os.sync() and after
    touching and freeing memory the size of the state (bench_vm.py; the
    serving process does the same before each of its saves): ckpt's side
    saves in a `ckpt_bench file --serve` process that loaded `path` once and
    reports each save's own time. With `in_process` (a function saving a
    state to a path, such as ckpt.save), it is timed too, in this process
    onto its own existing file, third in each turn after the same os.sync()
    and touch: the like-for-like of torch.save's side (same process, same
    tensors). Returns (torch, serving process, in_process or None)."""
    out_torch = directory / "overwrite-torch.pt"
    out_ckpt = directory / "overwrite-ckpt.pt"
    out_in_process = directory / "overwrite-in-process.pt"
    torch.save(sd, out_torch)
    if in_process is not None:
        in_process(out_in_process, sd)
    server = subprocess.Popen([bench, "file", str(path), "--serve", str(out_ckpt)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        t_torch = t_ckpt = t_in_process = math.inf
        nbytes = path.stat().st_size
        for _ in range(repeats):
            os.sync()
            touch_and_free(nbytes)
            start = time.perf_counter()
            torch.save(sd, out_torch)
            t_torch = min(t_torch, time.perf_counter() - start)
            os.sync()
            server.stdin.write("overwrite\n")
            server.stdin.flush()
            t_ckpt = min(t_ckpt, float(server.stdout.readline()))
            if in_process is not None:
                os.sync()
                touch_and_free(nbytes)
                start = time.perf_counter()
                in_process(out_in_process, sd)
                t_in_process = min(t_in_process, time.perf_counter() - start)
    finally:
        server.stdin.close()
        server.wait()
    out_torch.unlink()
    out_ckpt.unlink()
    out_in_process.unlink(missing_ok=True)
    return t_torch, t_ckpt, (t_in_process if in_process is not None else None)


def measure(label, sd, directory, bench, repeats):
    path = directory / f"{label}.pt"
    out = directory / f"{label}-torch-save.pt"
    torch.save(sd, path)
    n = len(sd)
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())

    def remove_out():
        if out.exists():
            out.unlink()

    t_save = best(repeats, lambda: torch.save(sd, out), before=remove_out)
    remove_out()
    t_load = best(repeats, lambda: torch.load(path))
    t_mmap = best(repeats, lambda: torch.load(path, mmap=True))
    result = subprocess.run([bench, "file", str(path), "--repeats", str(repeats), "--dir", str(directory)],
                            check=True, capture_output=True, text=True)
    c = json.loads(result.stdout)
    assert c["tensors"] == n and c["bytes"] == nbytes, (c, n, nbytes)
    t_over_torch, t_over_ckpt, _ = overwrite_pairs(sd, path, directory, bench, repeats)

    print(f"\n== {label}: {n} float32 tensors, {nbytes / 2**20:.0f} MiB (best of {repeats}) ==")
    print(f"load, all tensors materialized: torch.load {t_load * 1e3:9.1f} ms | ckpt {c['load_s'] * 1e3:9.1f} ms"
          f" | ratio {t_load / c['load_s']:6.2f}x")
    print(f"lazy open: torch.load {t_load * 1e3:9.1f} ms | torch.load(mmap=True) {t_mmap * 1e3:9.1f} ms"
          f" | ckpt open {c['open_s'] * 1e3:8.2f} ms | ratio vs load {t_load / c['open_s']:7.1f}x,"
          f" vs mmap {t_mmap / c['open_s']:6.2f}x")
    print(f"save: torch.save {t_save * 1e3:9.1f} ms | ckpt {c['save_s'] * 1e3:9.1f} ms | ratio {t_save / c['save_s']:6.2f}x"
          f" | ckpt with fsync {c['save_fsync_s'] * 1e3:9.1f} ms, ratio {t_save / c['save_fsync_s']:6.2f}x")
    print(f"overwrite an existing file: torch.save {t_over_torch * 1e3:9.1f} ms | ckpt {t_over_ckpt * 1e3:9.1f} ms"
          f" | ratio {t_over_torch / t_over_ckpt:6.2f}x")
    print(f"durable save: plain write()+fsync {c['plain_fsync_s'] * 1e3:9.1f} ms | ckpt with fsync"
          f" {c['save_fsync_s'] * 1e3:9.1f} ms | ratio {c['plain_fsync_s'] / c['save_fsync_s']:5.2f}x of plain"
          f" | without early writeback {c['flush_early_off_fsync_s'] * 1e3:9.1f} ms,"
          f" ratio {c['plain_fsync_s'] / c['flush_early_off_fsync_s']:5.2f}x")
    print(f"per tensor: torch.load {t_load / n * 1e6:7.2f} us, torch.load(mmap) {t_mmap / n * 1e6:7.2f} us"
          f" | ckpt open {c['open_s'] / n * 1e6:6.2f} us, ckpt load {c['load_s'] / n * 1e6:6.2f} us")


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    run(measure, lambda d: f"torch {torch.__version__}; ratios are torch time / ckpt time (higher: ckpt faster);"
                           f" files in {d}", "ckpt-bench-torch-")


if __name__ == "__main__":
    main()
