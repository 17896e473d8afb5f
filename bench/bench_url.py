"""The figures of issue 19 in one run (make bench-url), against Debian's nginx
on 127.0.0.1 serving a 1 GiB safetensors file (64 float32 tensors of 16 MiB)
written by ckpt.save:

  full download      ckpt.fetch into an empty cache   vs `curl -o` of the same URL (the limit), and
                                                       `curl -o` + fsync (ckpt's cache is durable);
                                                       peer: torch.hub.download_url_to_file; at
                                                       loopback speed and at 150 MB/s (nginx limit_rate)
  cached load        ckpt.load(url) from the cache    vs ckpt.load(local path) of the same bytes
                     (both lazy=False: every byte read into memory; and both lazy: the open alone)
  lazy remote open   ckpt.open(url, lazy=True) + get() of one tensor: bytes the server sent
                     (its access log) against header + that tensor + 64 KiB

Download ratios are limit time / ckpt time (higher: ckpt faster), the best of
--repeats interleaved pairs, each download into a file removed (and synced
away) outside the timing. Never part of pass/fail.

    .venv/bin/python bench/bench_url.py [--repeats N] [--gib X]
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "interop"))
from url_servers import NginxServer  # noqa: E402  (the tests' nginx, one home for its config)

import ckpt  # noqa: E402


def timed(body):
    start = time.perf_counter()
    body()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gib", type=float, default=1.0)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="ckpt-bench-url-"))
    (work / "nginx").mkdir()
    server = NginxServer(work / "nginx")
    server.start()
    try:
        run(args, work, server)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(args, work, server):
    count = 64
    elements = int(args.gib * 2**30 / count / 4)
    rng = np.random.default_rng(0)
    state = {f"layers.{i}.weight": rng.random(elements, dtype=np.float32) for i in range(count)}
    local = server.root / "model.safetensors"
    ckpt.save(local, state)
    size = local.stat().st_size
    url = server.url("model.safetensors")
    cache = work / "cache"
    os.environ["CKPT_CACHE"] = str(cache)
    os.environ["CKPT_PROGRESS"] = "0"
    curl_out = work / "curl.out"
    hub_out = work / "hub.out"
    print(f"nginx on {server.base_url}, {size / 2**30:.2f} GiB safetensors ({count} tensors), "
          f"best of {args.repeats} interleaved runs")

    def clear():
        ckpt.cache_list()  # waits for this process's background commits (the deferred hash, the sync)
        shutil.rmtree(cache, ignore_errors=True)
        for path in (curl_out, hub_out):
            if path.exists():
                path.unlink()
        os.sync()

    import torch.hub

    # Full download, from nginx at loopback speed (faster than this disk) and
    # from its /limited/ location (150 MB/s: a network slower than the disk).
    # ckpt's cache is durable (the file is synced before it enters the cache);
    # curl -o and torch.hub leave the file in the page cache, so curl -o is
    # also timed with an fsync of its file: the like-for-like limit.
    def curl(target_url, sync):
        subprocess.run(["curl", "-s", "-f", "-o", str(curl_out), target_url], check=True)
        if sync:
            fd = os.open(curl_out, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

    for label, target in (("loopback", url), ("150 MB/s", server.url("limited/model.safetensors"))):
        t_ckpt, t_curl, t_curl_sync, t_hub, t_ckpt_committed = [], [], [], [], []
        for _ in range(args.repeats):
            clear()
            t_curl.append(timed(lambda: curl(target, False)))
            clear()
            t_curl_sync.append(timed(lambda: curl(target, True)))
            clear()
            t_ckpt.append(timed(lambda: ckpt.fetch(target)))
            clear()
            # The same until the entry is committed: hashed (deferred without a
            # hash to check) and synced, on the background commit.
            t_ckpt_committed.append(timed(lambda: (ckpt.fetch(target), ckpt.cache_list())))
            clear()
            t_hub.append(timed(lambda: torch.hub.download_url_to_file(target, str(hub_out), progress=False)))
        b_ckpt, b_curl, b_sync, b_hub = min(t_ckpt), min(t_curl), min(t_curl_sync), min(t_hub)
        mib = size / 2**20
        print(f"\nfull download ({label})   ckpt.fetch {mib / b_ckpt:5.0f} MiB/s   curl -o {mib / b_curl:5.0f} MiB/s   "
              f"curl -o + fsync {mib / b_sync:5.0f} MiB/s   torch.hub {mib / b_hub:5.0f} MiB/s")
        print(f"  ckpt / curl -o: {b_curl / b_ckpt:.2f} (target >= 0.8)   / curl -o + fsync: {b_sync / b_ckpt:.2f}   "
              f"/ torch.hub: {b_hub / b_ckpt:.2f}   [ckpt runs: {', '.join(f'{t:.2f}' for t in t_ckpt)} s; curl -o: "
              f"{', '.join(f'{t:.2f}' for t in t_curl)} s]")
        b_committed = min(t_ckpt_committed)
        print(f"  until committed (hashed and synced in the background): / curl -o {b_curl / b_committed:.2f}   "
              f"/ curl -o + fsync {b_sync / b_committed:.2f}")

    # Cached load (the cache is full after the last fetch above).
    clear()
    ckpt.fetch(url)
    for lazy in (False, True):
        t_url, t_local = [], []
        for _ in range(args.repeats):
            t_local.append(timed(lambda: ckpt.load(local, lazy=lazy)))
            t_url.append(timed(lambda: ckpt.load(url, lazy=lazy)))
        kind = "lazy open " if lazy else "full load "
        print(f"\ncached {kind}  from the cache {min(t_url) * 1e3:8.1f} ms   local path {min(t_local) * 1e3:8.1f} ms   "
              f"ratio {min(t_local) / min(t_url):.2f}  (target >= 0.95)")

    # Lazy remote open of one tensor.
    clear()
    before = len(server.requests())
    name = f"layers.{count // 2}.weight"
    with open(local, "rb") as f:
        header = 8 + int.from_bytes(f.read(8), "little")
    t_lazy = timed(lambda: lazy_get(url, name))
    rows = server.requests(min_count=before + 2)[before:]
    sent = sum(r.bytes for r in rows)
    budget = header + state[name].nbytes + 64 * 1024
    print(f"\nlazy remote open + get('{name}'): {len(rows)} requests, {sent} bytes sent; header {header} + tensor "
          f"{state[name].nbytes} + 64 KiB = {budget}: {'within' if sent <= budget else 'OVER'} "
          f"({sent / size * 100:.3f} % of the file, {t_lazy * 1e3:.1f} ms)")


def lazy_get(url, name):
    with ckpt.open(url, lazy=True) as f:
        f.get(name)


if __name__ == "__main__":
    main()
