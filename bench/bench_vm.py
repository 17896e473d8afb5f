"""This machine is a VM that hands memory left free for about two seconds
back to its host (free page reporting); touching such memory again costs
about a CPU-second per GiB, more than most of what the benchmarks time. The
benchmarks touch and free memory untimed just before a timed run, so that it
gets pages the host still backs, as on an ordinary machine (bench_file.cc
does the same on the C++ side)."""

import numpy as np


def touch_and_free(nbytes):
    """Writes every page of `nbytes` of fresh memory, then frees it (numpy's
    large blocks are mapped and unmapped)."""
    block = np.ones(nbytes, dtype=np.uint8)
    del block
