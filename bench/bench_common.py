"""What bench_torch.py and bench_python.py share: best-of-N timing and the
torch states they measure."""

import argparse
import pathlib
import shutil
import tempfile
import time

import torch


def best(repeats, body, before=None):
    """The shortest of `repeats` timed runs of body(), each after before()
    (untimed)."""
    times = []
    for _ in range(repeats):
        if before:
            before()
        start = time.perf_counter()
        body()
        times.append(time.perf_counter() - start)
    return min(times)


def state(count, elements):
    """A state dict of `count` float32 tensors of `elements` each, seeded."""
    generator = torch.Generator().manual_seed(0)
    return {f"layers.{i}.weight": torch.rand(elements, generator=generator) for i in range(count)}


def run(measure, banner, prefix, repeats=3):
    """Parses the common options (--repeats, default `repeats`; --gib,
    --bench, --dir) and runs
    measure(label, state, directory, bench, repeats) on the 1 GiB state (100
    tensors) and on the 10,000-tensor state, in a temporary folder unless
    --dir names one. `banner(directory)` is printed first."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--gib", type=float, default=1.0)
    root = pathlib.Path(__file__).resolve().parents[1]
    parser.add_argument("--bench", default=str(root / "build" / "ckpt_bench"))
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    directory = pathlib.Path(args.dir or tempfile.mkdtemp(prefix=prefix))
    directory.mkdir(parents=True, exist_ok=True)
    print(banner(directory))
    try:
        measure("large", state(100, int(args.gib * 2**30 / 100 / 4)), directory, args.bench, args.repeats)
        measure("many", state(10000, 2560), directory, args.bench, args.repeats)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
