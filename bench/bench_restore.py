"""Restoring a torch module from a checkpoint: ckpt.restore beside
module.load_state_dict(torch.load(...)) and huggingface's
safetensors.torch.load_model, on the same files in one run. Printed as ratios
(peer time / ckpt time). Two models: a ModuleList of 5,000 small Linear
layers (10,000 tensors), and nn.Transformer (a few hundred larger tensors).

    .venv/bin/python bench/bench_restore.py [--repeats 3]
"""

import argparse
import pathlib
import shutil
import tempfile

import safetensors.torch
import torch

import ckpt
from bench_common import best


def models():
    torch.manual_seed(0)
    yield "5,000 Linear(16, 16) (10,000 tensors)", torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(5000))
    yield "nn.Transformer (d_model 512)", torch.nn.Transformer(d_model=512, dim_feedforward=2048, batch_first=True)


def measure(label, module, directory, repeats):
    state = module.state_dict()
    pt, st = directory / "model.pt", directory / "model.safetensors"
    torch.save(state, pt)
    ckpt.save(st, state)
    tensors = len(state)
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    ours_pt = best(repeats, lambda: ckpt.restore(module, pt))
    ours_st = best(repeats, lambda: ckpt.restore(module, st))
    torch_pt = best(repeats, lambda: module.load_state_dict(torch.load(pt, weights_only=True)))
    torch_mmap = best(repeats, lambda: module.load_state_dict(torch.load(pt, weights_only=True, mmap=True)))
    hf_st = best(repeats, lambda: safetensors.torch.load_model(module, str(st)))
    print(f"{label}: {tensors} tensors, {nbytes / 2**20:.1f} MiB")
    print(f"  .pt:          load_state_dict(torch.load) / ckpt.restore = {torch_pt / ours_pt:6.2f}x"
          f"   (mmap=True: {torch_mmap / ours_pt:.2f}x)")
    print(f"  .safetensors: safetensors.torch.load_model / ckpt.restore = {hf_st / ours_st:6.2f}x")
    print(f"  ckpt.restore per tensor: .pt {ours_pt / tensors * 1e6:.1f} us, "
          f".safetensors {ours_st / tensors * 1e6:.1f} us")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    directory = pathlib.Path(tempfile.mkdtemp(prefix="ckpt-bench-restore-"))
    print(f"ckpt {ckpt.__version__}, torch {torch.__version__}, safetensors {safetensors.__version__}")
    try:
        for label, module in models():
            measure(label, module, directory, args.repeats)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
