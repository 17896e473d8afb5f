"""The speed table of issue 18 in one run (make bench-speed): each row a
ratio against the plain system-call limit measured in the same process on
the same bytes (ckpt's side timed in C++ by `ckpt_bench file`), with the
peer beside it.

  save .safetensors (no fsync)   ckpt / plain write()       peer: safetensors.save_file
                                 (and ckpt without its per-tensor checksums / plain write(); and ckpt
                                 / plain pwrite() of the bytes at the offsets ckpt's file holds them; beside
                                 the ratio of the bests, the median of each turn's plain/ckpt pair)
  durable save .pt (fsync)       ckpt / plain write()+fsync peer: torch.save + fsync
  overwriting an existing .pt    ckpt vs torch.save onto it, in pairs
  full load .safetensors         ckpt (into heap) / plain read()   peer: safetensors.load_file, touched:
                                 backend="pread" (into memory, as ckpt) and its default "mmap" (0.8.0: the
                                 page cache mapped, no copy; ckpt's like is a lazy load, mapped)
  lazy open, 10,000 tensors      ckpt open per 1,000 tensors (C++); from Python, in turns:
                                 ckpt.open and ckpt.safetensors.safe_open  peer: safetensors.safe_open

Ratios are limit-or-peer time / ckpt time (higher: ckpt faster), each time
the best of --repeats (default 12: on this VM a 1 GiB write into the page
cache takes 0.2 s or 0.6-2 s by the pages it gets, for ckpt and the plain
write alike, the slow turns all in the kernel's copy into the fresh pages;
one turn in three or four ran fast, and the best of five often compared a
slow turn with a fast one: 0.78-1.37 for the save row in four runs of
2026-12-07, 0.94-1.02 with twelve). About 9 minutes a run. Never part of
pass/fail.

    .venv/bin/python bench/bench_speed.py [--repeats N] [--gib X] [--bench build/ckpt_bench]
"""

import json
import os
import statistics
import subprocess
import time

import safetensors.torch
import torch
from safetensors import safe_open

import ckpt
import ckpt.safetensors as ckpt_safetensors

from bench_common import best, run
from bench_torch import overwrite_pairs


def ckpt_file(bench, path, directory, repeats):
    result = subprocess.run([bench, "file", str(path), "--repeats", str(repeats), "--dir", str(directory)],
                            check=True, capture_output=True, text=True)
    return json.loads(result.stdout)


def touch(state):
    return sum(int(t.reshape(-1).view(torch.uint8)[::4096].sum()) for t in state.values())


def measure(label, sd, directory, bench, repeats):
    n = len(sd)
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    st, pt = directory / f"{label}.safetensors", directory / f"{label}.pt"
    safetensors.torch.save_file(sd, st)
    torch.save(sd, pt)
    out = directory / "peer-out"
    print(f"\n== {label}: {n} float32 tensors, {nbytes / 2**20:.0f} MiB (best of {repeats}) ==")

    def fresh():
        if out.exists():
            out.unlink()
        os.sync()

    def torch_save_fsync():
        with open(out, "wb") as f:
            torch.save(sd, f)
            f.flush()
            os.fsync(f.fileno())

    c_st = ckpt_file(bench, st, directory, repeats)
    if label == "many":
        # From Python, as safe_open's users call it: interleaved in turns, each
        # open with its keys listed, the handle dropped outside the timing.
        peer, ours, drop_in = [], [], []
        for _ in range(repeats * 5):
            for times, opener in ((peer, lambda: safe_open(st, "pt")), (ours, lambda: ckpt.open(st)),
                                  (drop_in, lambda: ckpt_safetensors.safe_open(st, "pt"))):
                start = time.perf_counter()
                handle = opener().__enter__()
                keys = handle.keys()
                times.append(time.perf_counter() - start)
                assert len(keys) == n
                del handle
        t_open, t_ours, t_drop_in = min(peer), min(ours), min(drop_in)
        print(f"lazy open: ckpt::open (C++) {c_st['open_s'] * 1e3:7.2f} ms ({c_st['open_s'] / n * 1e6:5.2f} ms per 1,000)"
              f" | from Python, with keys(): safetensors.safe_open {t_open * 1e3:7.2f} ms, ckpt.open {t_ours * 1e3:7.2f} ms"
              f" (ratio {t_open / t_ours:5.2f}x), ckpt.safetensors.safe_open {t_drop_in * 1e3:7.2f} ms"
              f" (ratio {t_open / t_drop_in:5.2f}x)")
        return
    t_st_save = best(repeats, lambda: safetensors.torch.save_file(sd, out), before=fresh)
    t_st_load = best(repeats, lambda: touch(safetensors.torch.load_file(st, backend="pread")))
    t_st_mmap = best(repeats, lambda: touch(safetensors.torch.load_file(st)))
    t_lazy = best(repeats, lambda: touch(ckpt.load(st, framework="torch")))
    t_torch_fsync = best(repeats, torch_save_fsync, before=fresh)
    fresh()
    c_pt = ckpt_file(bench, pt, directory, repeats)
    t_over_torch, t_over_ckpt, t_over_py = overwrite_pairs(sd, pt, directory, bench, repeats,
                                                          in_process=lambda p, s: ckpt.save(p, s, fsync=False))
    turns = c_st["turns_s"]
    paired = statistics.median(p / s for p, s in zip(turns["plain"], turns["save"]))
    print(f"save .safetensors: ckpt / plain write() {c_st['plain_s'] / c_st['save_s']:5.2f}x"
          f" (median of the turns' pairs {paired:5.2f}x)"
          f" | safetensors.save_file / plain {c_st['plain_s'] / t_st_save:5.2f}x"
          f" | ckpt vs safetensors {t_st_save / c_st['save_s']:5.2f}x"
          f" | ckpt without checksums / plain {c_st['plain_s'] / c_st['save_no_checksum_s']:5.2f}x"
          f" | ckpt / plain pwrite() at the file's own offsets {c_st['plain_layout_s'] / c_st['save_s']:5.2f}x")
    print(f"durable save .pt: ckpt / plain write()+fsync {c_pt['plain_fsync_s'] / c_pt['save_fsync_s']:5.2f}x"
          f" | ckpt vs torch.save+fsync {t_torch_fsync / c_pt['save_fsync_s']:5.2f}x")
    print(f"overwrite .pt: ckpt vs torch.save onto it {t_over_torch / t_over_ckpt:5.2f}x"
          f" | ckpt.save from Python, same process as torch.save, vs it {t_over_torch / t_over_py:5.2f}x")
    print(f"full load .safetensors: ckpt / plain read() {c_st['read_s'] / c_st['load_s']:5.2f}x"
          f" | ckpt vs safetensors.load_file(backend=\"pread\") (touched) {t_st_load / c_st['load_s']:5.2f}x"
          f" | mapped: ckpt.load (lazy) vs safetensors.load_file (mmap), touched {t_st_mmap / t_lazy:5.2f}x")


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    run(measure, lambda d: f"torch {torch.__version__}; safetensors {safetensors.__version__}; files in {d};"
                           f" {time.strftime('%Y-%m-%d %H:%M')}", "ckpt-bench-speed-", repeats=12)


if __name__ == "__main__":
    main()
