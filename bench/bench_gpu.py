"""Loading onto a CUDA device (docs/gpu.md): ckpt beside safetensors and
torch, against the hardware limit, in one run.

Writes one state (--gib of float32 tensors, --tensors of them) as a
.safetensors and a .pt file, then times, best of N, each load onto the GPU
until the tensors are there (torch.cuda.synchronize):

  ckpt.load(st, framework="torch", device="cuda")   vs  safetensors.torch.load_file(st, device="cuda")
  ckpt.load(pt, framework="torch", device="cuda")   vs  torch.load(pt, map_location="cuda", weights_only=True)

and the limit, min(disk read, host-to-device), from plain copies in the same
run: the .safetensors file read into pinned memory with readinto (the disk
read), and one pinned buffer of the state's size copied to the device (the
PCIe copy). With --cold (the default) each timed run starts with the file's
pages dropped from the page cache (posix_fadvise DONTNEED; pages of other
processes may stay), so reads come from the disk; --warm keeps them cached.
Also times ckpt.save of the state on the GPU beside
safetensors.torch.save_file. Prints times, GB/s and ratios (ckpt's share of
the limit; peer time / ckpt time: higher is better for ckpt). Target:
ckpt >= 0.8 x the limit and ahead of both peers.

Without CUDA it says it cannot measure and exits 0. Never part of pass/fail.

    .venv/bin/python bench/bench_gpu.py [--gib 4] [--tensors 200] [--repeats 3] [--dir D] [--warm]
"""

import argparse
import os
import pathlib
import shutil
import sys
import tempfile
import time

import torch


def drop_cache(path):
    """Drop ``path``'s clean pages from the page cache (advice; no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(repeats, body, before=None):
    """The shortest of ``repeats`` runs of body() (before() untimed), the GPU
    synchronized at both ends."""
    times = []
    for _ in range(repeats):
        if before:
            before()
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = body()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        del result
        torch.cuda.empty_cache()
    return min(times)


def read_into_pinned(path, pinned):
    """The whole file into ``pinned`` with plain reads (the disk read)."""
    view = memoryview(pinned.numpy())
    with open(path, "rb", buffering=0) as f:
        done = 0
        while done < len(view):
            n = f.readinto(view[done:done + (64 << 20)])
            if not n:
                break
            done += n
    return done


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--warm", action="store_true", help="keep the files in the page cache")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"bench_gpu: CUDA is not available (torch {torch.__version__}); cannot measure.")
        return 0

    import ckpt
    import safetensors.torch

    directory = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="ckpt-bench-gpu-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        elements = int(args.gib * 2**30 / args.tensors / 4)
        generator = torch.Generator().manual_seed(0)
        state = {f"layers.{i}.weight": torch.rand(elements, generator=generator) for i in range(args.tensors)}
        nbytes = sum(t.numel() * t.element_size() for t in state.values())
        st, pt = directory / "state.safetensors", directory / "state.pt"
        safetensors.torch.save_file(state, str(st))
        torch.save(state, pt)
        del state

        def cold(path):
            return None if args.warm else (lambda: drop_cache(path))

        device = torch.device("cuda", torch.cuda.current_device())
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}; {args.tensors} float32 tensors, "
              f"{nbytes / 2**30:.2f} GiB in {directory} (a tmpfs holds files in memory: point --dir at a disk); "
              f"{'warm' if args.warm else 'cold'} page cache; best of {args.repeats}")

        pinned = torch.empty(os.path.getsize(st), dtype=torch.uint8, pin_memory=True)
        t_read = timed(args.repeats, lambda: read_into_pinned(st, pinned), before=cold(st))
        target = torch.empty(pinned.numel(), dtype=torch.uint8, device=device)
        t_h2d = timed(args.repeats, lambda: target.copy_(pinned, non_blocking=True))
        del target, pinned
        file_bytes = os.path.getsize(st)
        read_bw, h2d_bw = file_bytes / t_read, file_bytes / t_h2d
        limit_bw = min(read_bw, h2d_bw)

        def gbs(seconds):
            return nbytes / seconds / 1e9

        t_ckpt_st = timed(args.repeats, lambda: ckpt.load(st, framework="torch", device="cuda"), before=cold(st))
        t_safe = timed(args.repeats, lambda: safetensors.torch.load_file(str(st), device="cuda"), before=cold(st))
        t_ckpt_pt = timed(args.repeats, lambda: ckpt.load(pt, framework="torch", device="cuda"), before=cold(pt))
        t_torch = timed(args.repeats, lambda: torch.load(pt, map_location="cuda", weights_only=True),
                        before=cold(pt))

        print(f"limit: disk read into pinned {read_bw / 1e9:6.2f} GB/s, pinned host-to-device {h2d_bw / 1e9:6.2f} GB/s"
              f" -> min {limit_bw / 1e9:6.2f} GB/s")
        print(f"safetensors file: ckpt {t_ckpt_st * 1e3:8.1f} ms ({gbs(t_ckpt_st):6.2f} GB/s, "
              f"{gbs(t_ckpt_st) * 1e9 / limit_bw:4.2f}x limit) | safetensors.load_file {t_safe * 1e3:8.1f} ms "
              f"({gbs(t_safe):6.2f} GB/s) | ratio {t_safe / t_ckpt_st:5.2f}x")
        print(f".pt file:         ckpt {t_ckpt_pt * 1e3:8.1f} ms ({gbs(t_ckpt_pt):6.2f} GB/s, "
              f"{gbs(t_ckpt_pt) * 1e9 / limit_bw:4.2f}x limit) | torch.load        {t_torch * 1e3:8.1f} ms "
              f"({gbs(t_torch):6.2f} GB/s) | ratio {t_torch / t_ckpt_pt:5.2f}x")

        on_gpu = ckpt.load(st, framework="torch", device="cuda")
        out_ckpt, out_safe = directory / "saved-ckpt.safetensors", directory / "saved-safe.safetensors"
        t_save = timed(args.repeats, lambda: ckpt.save(out_ckpt, on_gpu, fsync=False))
        t_save_safe = timed(args.repeats, lambda: safetensors.torch.save_file(on_gpu, str(out_safe)))
        print(f"save from the GPU: ckpt {t_save * 1e3:8.1f} ms ({gbs(t_save):6.2f} GB/s) | "
              f"safetensors.save_file {t_save_safe * 1e3:8.1f} ms ({gbs(t_save_safe):6.2f} GB/s) | "
              f"ratio {t_save_safe / t_save:5.2f}x")
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
