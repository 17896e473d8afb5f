#!/usr/bin/env python3
"""The training part of `make demo` (called by scripts/demo before its CLI tour).

Usage: demo_train.py WORK_DIR CKPT_BINARY

Trains a small real model (torch, ~3,500 parameters, a synthetic 4-class
task) inside a ckpt.Run: its encoder preloaded on the fresh start from the
checkpoint of another ("pretraining") run, weight norm on the output layer,
the encoder in its own file, retention by dev loss. The run is SIGKILLed
mid-training and restarted; it continues from its latest checkpoint and its
final parameters and optimizer state must be bit-identical to those of an
uninterrupted run (exit 1 if not). Then `ckpt ls` of the run directory, the
weight norm folded for inference (`ckpt convert --fold-weight-norm`), and
the final checkpoint converted to TensorFlow and Flax files, which
TensorFlow and Flax/JAX read and run.

The training runs are subprocesses of this script (`demo_train.py
--train-child RUN_DIR PRETRAIN_DIR OUT [--handshake]`), so that one can be
killed for real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import torch
from torch import nn

import ckpt

EPOCHS, BATCH, SAVE_EVERY = 4, 32, 10
KILL_AT = 43  # steps done when the run is killed: epoch 3, three steps after the save of step 40
BOLD, DIM, OFF = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


def say(text: str) -> None:
    print(f"\n{BOLD}== {text}{OFF}", flush=True)


def note(text: str) -> None:
    print(f"{DIM}{text}{OFF}", flush=True)


# ------------------------------------------------------------ the task and the models

def data(seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(123))
    x = torch.randn(n, 16, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def encoder() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 48), nn.GELU(), nn.Dropout(0.1), nn.Linear(48, 48), nn.GELU())


class Classifier(nn.Module):
    """The model trained: the encoder and a weight-normed output layer."""

    def __init__(self, weight_norm: bool = True):
        super().__init__()
        self.encoder = encoder()
        head = nn.Linear(48, 4)
        self.head = nn.utils.parametrizations.weight_norm(head) if weight_norm else head

    def forward(self, x):
        return self.head(self.encoder(x))


class Autoencoder(nn.Module):
    """The pretraining model: the same encoder, reconstructing its input."""

    def __init__(self):
        super().__init__()
        self.encoder = encoder()
        self.decoder = nn.Linear(48, 16)

    def forward(self, x):
        return self.decoder(self.encoder(x))


def pretrain(run_dir: str) -> None:
    torch.manual_seed(1)
    model = Autoencoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x, _ = data(seed=2, n=512)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=BATCH, shuffle=True)
    with ckpt.Run(run_dir, model=model, optimizer=optimizer, keep_last=1) as run:
        for epoch in run.epochs(2):
            for (xb,) in run.steps(loader):
                loss = nn.functional.mse_loss(model(xb), xb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            run.report(loss=loss.item())
        note(f"  pretraining: {run.global_step} steps, reconstruction loss {loss.item():.3f}, "
             f"saved step {run.last_saved_step}")


def train(run_dir: str, pretrain_dir: str, out: str, handshake: bool) -> int:
    """One training process (the demo starts it as a subprocess)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = data(seed=3, n=512)
    dev_x, dev_y = data(seed=4, n=128)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    preload = ckpt.Preload(pretrain_dir, name="pretrained_encoder", checkpoint_key="model",
                           prefix={"encoder.": "encoder."}, init_for_train=True)
    with ckpt.Run(run_dir, model=model, optimizer=optimizer, files={"encoder": "encoder.safetensors"},
                  preloads=[preload], save_every_steps=SAVE_EVERY, keep_last=2, keep_best=1,
                  metric="dev_loss") as run:
        with run.init():
            pass  # the model's own initialization; the encoder comes from the preload
        if run.fresh:
            result = run.preload_report.preloads[0]
            note(f"  [{os.getpid()}] fresh start: preloaded {len(result.set)} encoder tensors from {result.source}")
        else:
            note(f"  [{os.getpid()}] continues from step {run.start_step} (epoch {run.epoch}, "
                 f"{run.batch_in_epoch} batches into it): model, Adam state, counters, RNG and data position restored")
        for epoch in run.epochs(EPOCHS):
            for xb, yb in run.steps(loader):
                if handshake:
                    print("at", run.global_step, "saved", run.last_saved_step, flush=True)
                    if not sys.stdin.readline():
                        return 3
                loss = nn.functional.cross_entropy(model(xb), yb)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                dev_loss = nn.functional.cross_entropy(model(dev_x), dev_y).item()
                accuracy = (model(dev_x).argmax(dim=1) == dev_y).float().mean().item()
            model.train()
            run.report(dev_loss=dev_loss)
            note(f"  [{os.getpid()}] epoch {epoch}: step {run.global_step}, dev loss {dev_loss:.4f}, "
                 f"dev accuracy {accuracy:.2f}")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, out)
    return 0


# ------------------------------------------------------------ the tour

def child(*args: str, stdin=None):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdin=stdin,
                            stdout=subprocess.PIPE if stdin else None, text=True)


def run_cli(binary: str, *args: str) -> str:
    note("$ ckpt " + " ".join(args))
    done = subprocess.run([binary, *args], capture_output=True, text=True)
    print(done.stdout, end="", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"demo_train: ckpt {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def run_killed(run_dir: str, pretrain_dir: str) -> None:
    process = child("--train-child", run_dir, pretrain_dir, os.devnull, "--handshake", stdin=subprocess.PIPE)
    try:
        for line in process.stdout:
            if line.startswith("at "):
                _, at, _, saved = line.split()
                if int(at) == KILL_AT:
                    note(f"  {KILL_AT} steps done, the last save was step {saved}: kill -KILL {process.pid}")
                    os.kill(process.pid, signal.SIGKILL)
                    break
                process.stdin.write("go\n")
                process.stdin.flush()
            else:
                print(line, end="", flush=True)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != -signal.SIGKILL:
        raise SystemExit(f"demo_train: the run to be killed ended with {process.returncode}")


def compare(reference: str, resumed: str) -> int:
    a, b = torch.load(reference), torch.load(resumed)
    equal = [name for name in a["model"] if torch.equal(a["model"][name], b["model"][name])]
    state_a, state_b = a["optimizer"]["state"], b["optimizer"]["state"]
    optimizer_equal = state_a.keys() == state_b.keys() and all(
        torch.equal(v, state_b[k][f]) for k, s in state_a.items() for f, v in s.items())
    print(f"  parameters bit-identical (torch.equal): {len(equal)} of {len(a['model'])}; "
          f"Adam state bit-identical: {optimizer_equal}", flush=True)
    if len(equal) != len(a["model"]) or a["model"].keys() != b["model"].keys() or not optimizer_equal:
        print("demo_train: the resumed run differs from the uninterrupted one", file=sys.stderr)
        return 1
    return 0


FRAMEWORKS = r'''
import sys, numpy as np
import tensorflow as tf, jax.numpy as jnp, flax.serialization
expected = np.load("expected.npz")
x = expected["x"]
reader = tf.train.load_checkpoint("inference_tf")
w = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
def forward_tf(p):
    h = tf.nn.gelu(tf.matmul(x, p["encoder.0.weight"], transpose_b=True) + p["encoder.0.bias"], approximate=False)
    h = tf.nn.gelu(tf.matmul(h, p["encoder.3.weight"], transpose_b=True) + p["encoder.3.bias"], approximate=False)
    return (tf.matmul(h, p["head.weight"], transpose_b=True) + p["head.bias"]).numpy()
params = flax.serialization.msgpack_restore(open("inference.msgpack", "rb").read())
flat = {}
def walk(tree, prefix=""):
    for key, value in tree.items():
        walk(value, prefix + key + ".") if isinstance(value, dict) else flat.__setitem__(prefix + key, value)
walk(params)
import jax
def forward_jax(p):
    h = jax.nn.gelu(x @ p["encoder.0.weight"].T + p["encoder.0.bias"], approximate=False)
    h = jax.nn.gelu(h @ p["encoder.3.weight"].T + p["encoder.3.bias"], approximate=False)
    return np.asarray(h @ p["head.weight"].T + p["head.bias"])
ok = True
for label, tensors, out in (("TensorFlow (tf.train.load_checkpoint)", w, forward_tf(w)),
                            ("Flax (flax.serialization.msgpack_restore), run with JAX", flat, forward_jax(flat))):
    same = sorted(tensors) == sorted(expected["names"]) and all(
        np.array_equal(np.asarray(tensors[n]), expected["t_" + n]) for n in expected["names"])
    diff = float(np.abs(out - expected["y"]).max())
    print(f"  {label}: {len(tensors)} tensors, bit-exact: {same}; logits vs torch: max |diff| {diff:.2e}")
    ok = ok and same and diff < 1e-4
sys.exit(0 if ok else 1)
'''


def fold_and_convert(work: str, run_dir: str, binary: str) -> int:
    say("The final checkpoint as one model file: its main file and the encoder's file, merged")
    entry = ckpt.ls(run_dir).checkpoints[-1]
    merged = ckpt.Run.model_state(run_dir, files={"encoder": "encoder.safetensors"})
    sizes = ", ".join(f"{os.path.basename(p)} ({os.path.getsize(p)} bytes)" for p in entry.parts)
    print(f"  step {entry.step}: {sizes}; "
          f"{merged.summary if not merged.ok else 'every parameter from exactly one file'}: "
          f"{len(merged.state)} tensors", flush=True)
    if not merged.ok:
        return 1
    ckpt.save(os.path.join(work, "model.safetensors"), merged.state)

    say("Fold the weight norm for inference: head.weight = g * v / ||v||")
    run_cli(binary, "convert", "model.safetensors", "inference.safetensors", "--fold-weight-norm")
    trained = Classifier()
    ckpt.restore(trained, "model.safetensors")
    plain = Classifier(weight_norm=False)
    report = ckpt.restore(plain, "inference.safetensors")  # strict: a plain nn.Linear head takes it
    trained.eval(), plain.eval()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        y, y_plain = trained(x), plain(x)
    diff = (y - y_plain).abs().max().item()
    print(f"  a model without weight norm restores it ({len(report.restored)} tensors); logits vs the "
          f"weight-normed model: max |diff| {diff:.2e}", flush=True)
    if diff > 1e-5:
        print("demo_train: the folded model computes something else", file=sys.stderr)
        return 1

    say("Convert it to TensorFlow and Flax files, and read and run them with the real frameworks")
    run_cli(binary, "convert", "inference.safetensors", "inference_tf", "--to", "tf")
    run_cli(binary, "convert", "inference.safetensors", "inference.msgpack", "--to", "flax")
    folded = ckpt.load(os.path.join(work, "inference.safetensors"))
    names = sorted(folded)
    np.savez(os.path.join(work, "expected.npz"), x=x.numpy(), y=y_plain.numpy(), names=np.array(names),
             **{"t_" + n: np.asarray(folded[n]) for n in names})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", FRAMEWORKS], cwd=work, env=env)
    if done.returncode != 0:
        print("demo_train: TensorFlow or Flax did not read back the model", file=sys.stderr)
    return done.returncode


def tour(work: str, binary: str) -> int:
    os.chdir(work)
    started = time.monotonic()
    say("A pretraining run: an autoencoder whose encoder the classifier will start from (runs/pretrain)")
    pretrain("runs/pretrain")

    say(f"Train a classifier in a ckpt.Run, uninterrupted, for reference (runs/reference): {EPOCHS} epochs of "
        f"16 batches, encoder preloaded, weight-normed head, save every {SAVE_EVERY} steps and each epoch")
    reference = child("--train-child", "runs/reference", "runs/pretrain", "reference.pt")
    if reference.wait(timeout=120) != 0:
        return 1

    say(f"The same run in runs/train, killed with SIGKILL after {KILL_AT} steps")
    run_killed("runs/train", "runs/pretrain")
    note(f"  committed: steps {[e.step for e in ckpt.ls('runs/train').checkpoints]}")

    say("Restart it: the same command")
    if child("--train-child", "runs/train", "runs/pretrain", "resumed.pt").wait(timeout=120) != 0:
        return 1

    say("The resumed run against the uninterrupted one")
    failed = compare("reference.pt", "resumed.pt")
    note(f"  training, interruption and restart took {time.monotonic() - started:.1f} s")

    say("The run directory: retention keeps the last 2 and the best by dev_loss; the encoder in its own file")
    run_cli(binary, "ls", "runs/train")
    return failed or fold_and_convert(work, "runs/train", binary)


def main(argv) -> int:
    if argv[:1] == ["--train-child"]:
        return train(argv[1], argv[2], argv[3], "--handshake" in argv[4:])
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    return tour(os.path.abspath(argv[0]), os.path.abspath(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
