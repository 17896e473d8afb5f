"""The Python package beside torch and safetensors, in one run (make bench-python).

For a 1 GiB state (100 float32 tensors) and a 10,000-tensor state, written by
torch.save (.pt) and safetensors.torch.save_file (.safetensors), times, best
of N, on the same warm files:
  load, every tensor touched (one byte per 4 KiB page read through torch):
    torch.load(.pt)                       vs ckpt.load(.pt, framework="torch")
    safetensors.torch.load_file           vs ckpt.load(.safetensors, framework="torch")
    torch.load(.pt)                       vs ckpt.load(.safetensors, framework="torch")
  save from torch tensors (no fsync on either side; ckpt with fsync too):
    torch.save(.pt)                       vs ckpt.save(.safetensors) and ckpt.save(.pt)
    safetensors.torch.save_file           vs ckpt.save(.safetensors)
  the drop-in (ckpt.safetensors.torch) beside the package it replaces:
    safetensors.torch.load_file           vs ckpt.safetensors.torch.load_file (touched)
    safetensors.torch.save_file           vs ckpt.safetensors.torch.save_file (neither fsyncs)
  per-tensor Python overhead: ckpt.load (lazy, untouched) of the 10,000-tensor
    file, minus the C++ open of the same file (ckpt_bench file), per tensor.
Prints ratios (peer time / ckpt time). Never part of pass/fail.

    .venv/bin/python bench/bench_python.py [--repeats N] [--gib X] [--bench build/ckpt_bench]
"""

import json
import os
import subprocess

import safetensors.torch
import torch

import ckpt
import ckpt.safetensors.torch as dropin
from bench_common import best, run


def touch(state):
    """Reads one byte of every 4 KiB page of every tensor, through torch."""
    total = 0
    for t in state.values():
        flat = t.reshape(-1).view(torch.uint8)
        total += int(flat[::4096].sum())
    return total


def removing(*paths):
    """Before a save: the previous output removed and every dirty page written
    back (os.sync), outside the timing, so that no contender pays for
    another's deletion or writeback."""
    def remove():
        for p in paths:
            if p.exists():
                p.unlink()
        os.sync()
    return remove


def measure(label, sd, directory, bench, repeats):
    n = len(sd)
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    pt = directory / f"{label}.pt"
    st = directory / f"{label}.safetensors"
    torch.save(sd, pt)
    safetensors.torch.save_file(sd, st)
    out_pt, out_st = directory / "out.pt", directory / "out.safetensors"
    print(f"\n== {label}: {n} float32 tensors, {nbytes / 2**20:.0f} MiB (best of {repeats}) ==")

    t_torch_load = best(repeats, lambda: touch(torch.load(pt)))
    t_st_load = best(repeats, lambda: touch(safetensors.torch.load_file(st)))
    t_ckpt_pt = best(repeats, lambda: touch(ckpt.load(pt, framework="torch")))
    t_ckpt_st = best(repeats, lambda: touch(ckpt.load(st, framework="torch")))
    assert touch(ckpt.load(pt, framework="torch")) == touch(torch.load(pt))
    print(f"load .pt, touched:          torch.load {t_torch_load * 1e3:8.1f} ms | ckpt.load {t_ckpt_pt * 1e3:8.1f} ms"
          f" | ratio {t_torch_load / t_ckpt_pt:6.2f}x")
    print(f"load .safetensors, touched: safetensors {t_st_load * 1e3:8.1f} ms | ckpt.load {t_ckpt_st * 1e3:8.1f} ms"
          f" | ratio {t_st_load / t_ckpt_st:6.2f}x | vs torch.load(.pt) {t_torch_load / t_ckpt_st:6.2f}x")

    t_torch_save = best(repeats, lambda: torch.save(sd, out_pt), before=removing(out_pt))
    t_st_save = best(repeats, lambda: safetensors.torch.save_file(sd, out_st), before=removing(out_st))
    t_ckpt_save_st = best(repeats, lambda: ckpt.save(out_st, sd, fsync=False), before=removing(out_st))
    t_ckpt_save_pt = best(repeats, lambda: ckpt.save(out_pt, sd, fsync=False), before=removing(out_pt))
    t_ckpt_save_sync = best(repeats, lambda: ckpt.save(out_st, sd), before=removing(out_st))
    removing(out_pt, out_st)()
    print(f"save from torch: torch.save {t_torch_save * 1e3:8.1f} ms | ckpt.save .safetensors {t_ckpt_save_st * 1e3:8.1f} ms"
          f" ratio {t_torch_save / t_ckpt_save_st:6.2f}x | ckpt.save .pt {t_ckpt_save_pt * 1e3:8.1f} ms"
          f" ratio {t_torch_save / t_ckpt_save_pt:6.2f}x")
    print(f"save from torch: safetensors.save_file {t_st_save * 1e3:8.1f} ms | ckpt.save {t_ckpt_save_st * 1e3:8.1f} ms"
          f" ratio {t_st_save / t_ckpt_save_st:6.2f}x | ckpt.save with fsync {t_ckpt_save_sync * 1e3:8.1f} ms")

    t_dropin_load = best(repeats, lambda: touch(dropin.load_file(st)))
    t_dropin_save = best(repeats, lambda: dropin.save_file(sd, out_st), before=removing(out_st))
    removing(out_st)()
    print(f"drop-in load_file, touched: safetensors {t_st_load * 1e3:8.1f} ms | ckpt.safetensors"
          f" {t_dropin_load * 1e3:8.1f} ms | ratio {t_st_load / t_dropin_load:6.2f}x")
    print(f"drop-in save_file: safetensors {t_st_save * 1e3:8.1f} ms | ckpt.safetensors"
          f" {t_dropin_save * 1e3:8.1f} ms | ratio {t_st_save / t_dropin_save:6.2f}x")

    if n >= 1000:
        t_lazy = best(repeats, lambda: ckpt.load(st, framework="torch"))
        t_lazy_np = best(repeats, lambda: ckpt.load(st))
        c = json.loads(subprocess.run([bench, "file", str(st), "--repeats", str(repeats), "--dir", str(directory)],
                                      check=True, capture_output=True, text=True).stdout)
        print(f"per tensor: ckpt.load lazy torch {t_lazy / n * 1e6:6.2f} us, numpy {t_lazy_np / n * 1e6:6.2f} us;"
              f" C++ open {c['open_s'] / n * 1e6:6.2f} us -> Python overhead torch"
              f" {(t_lazy - c['open_s']) / n * 1e6:6.2f} us, numpy {(t_lazy_np - c['open_s']) / n * 1e6:6.2f} us")


def main():
    run(measure, lambda d: f"ckpt {ckpt.__version__} from {ckpt.__file__}; torch {torch.__version__}; safetensors"
                           f" {safetensors.__version__}; ratios are peer time / ckpt time (higher: ckpt faster)",
        "ckpt-bench-python-")


if __name__ == "__main__":
    main()
