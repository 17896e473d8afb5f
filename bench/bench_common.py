"""What bench_torch.py and bench_python.py share: best-of-N timing and the
torch states they measure."""

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
