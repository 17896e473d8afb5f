"""TensorFlow bundles, Flax msgpack files and Orbax checkpoints: ckpt beside
each framework's own reader, on the same ~1 GiB files (100 float32 tensors)
written by the framework itself, in one run. ckpt's side is timed in C++
(`ckpt_bench file`: lazy open, full load into heap memory, and a plain read()
of the same files). Printed as ratios, with CPU time (all threads) beside
wall time. For Orbax, whose chunks are zstd, also libzstd's own decoding of
the same chunks into reused memory: the floor under any reader on this
machine.

Every timed load runs in a fresh process (imports done, files in the page
cache), one load per process, the framework's turn and ckpt's alternating:
a restore at the start of a job, into memory fresh from the kernel. Several
loads in one process would let the allocator hand the previous load's pages
back, which flatters whichever reader gets them (it made the Orbax restore
a third cheaper when it ran after the TF and Flax rows, and ckpt's TF load
six times cheaper). Just before its timed load, each process touches and
frees 1.25x the checkpoint's size: this machine is a VM that hands memory
left free for two seconds back to its host, and touching such memory again
costs about a CPU-second per GiB, more than either reader's own work.

    .venv/bin/python bench/bench_formats.py [--gib 1.0] [--repeats 3] [--only orbax]
"""

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_vm import touch_and_free

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def arrays(gib, count=100):
    elements = int(gib * 2**30 / count / 4)
    rng = np.random.default_rng(0)
    return {f"layer_{i}": rng.random(elements, dtype=np.float32) for i in range(count)}


def write_tf(data, directory):
    import tensorflow as tf

    variables = {k: tf.Variable(v) for k, v in data.items()}
    return tf.train.Checkpoint(**variables).write(str(directory / "tf" / "ckpt"))


def restore_tf(path):
    """A function that reads every variable (and keeps them all, as a
    restore does), set up untimed."""
    import tensorflow as tf

    def restore():
        reader = tf.train.load_checkpoint(path)
        return [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()]

    return restore, None


def write_flax(data, directory):
    import flax.serialization

    path = directory / "checkpoint_1"
    path.write_bytes(flax.serialization.to_bytes({"params": data}))
    return path


def restore_flax(path):
    import flax.serialization

    return lambda: flax.serialization.msgpack_restore(pathlib.Path(path).read_bytes()), None


def write_orbax(data, directory):
    import orbax.checkpoint as ocp

    path = directory / "orbax" / "1"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, {"params": data})
    return path


def restore_orbax(path):
    import jax
    import orbax.checkpoint as ocp

    jax.devices()  # the backend started, as in a job that restores after building its model
    checkpointer = ocp.StandardCheckpointer()
    return lambda: checkpointer.restore(path), checkpointer.close


# name: (title, what the framework's side does, writer, restore set-up)
FORMATS = {
    "tf": ("TF bundle (tf.train.Checkpoint)", "tf.train.load_checkpoint + get_tensor of every variable",
           write_tf, restore_tf),
    "flax": ("Flax msgpack (flax.serialization.to_bytes)", "flax.serialization.msgpack_restore(file bytes)",
             write_flax, restore_flax),
    "orbax": ("Orbax (StandardCheckpointer, OCDBT)", "StandardCheckpointer.restore", write_orbax, restore_orbax),
}


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def checkpoint_bytes(path):
    """The size of every file of the checkpoint: a file, a TF prefix's
    files, or a directory."""
    path = pathlib.Path(path)
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.parent.glob(path.name + ".*"))


def peer_child(name, path):
    """In a fresh process: one timed restore; prints {"wall", "cpu"}."""
    restore, close = FORMATS[name][3](path)
    touch_and_free(checkpoint_bytes(path) * 5 // 4 + (64 << 20))
    c, t = cpu_seconds(), time.perf_counter()
    restored = restore()
    wall, cpu = time.perf_counter() - t, cpu_seconds() - c
    del restored
    if close:
        close()
    print(json.dumps({"wall": wall, "cpu": cpu}))


def peer_once(name, path):
    out = subprocess.run([sys.executable, __file__, "--peer-child", name, str(path)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ckpt_once(bench, path, directory):
    out = subprocess.run([bench, "file", str(path), "--repeats", "1", "--dir", str(directory)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def best_of(runs):
    """Each field's least value over the runs (None stays None)."""
    return {key: (None if runs[0][key] is None else min(run[key] for run in runs)) for key in runs[0]}


def measure(name, data, directory, bench, repeats):
    title, peer_name = FORMATS[name][:2]
    path = FORMATS[name][2](data, directory)
    peer_runs, ckpt_runs = [], []
    for _ in range(repeats):
        peer_runs.append(peer_once(name, path))
        ckpt_runs.append(ckpt_once(bench, path, directory))
    peer, c = best_of(peer_runs), best_of(ckpt_runs)
    print(f"\n== {title}: {c['tensors']} tensors, {c['bytes'] / 2**20:.0f} MiB ==")
    print(f"  {peer_name}: {peer['wall'] * 1e3:8.1f} ms | ckpt full load {c['load_s'] * 1e3:8.1f} ms"
          f" | ratio {peer['wall'] / c['load_s']:6.2f}x")
    print(f"  CPU time, all threads: {peer['cpu']:6.2f} s | ckpt {c['load_cpu_s']:6.2f} s"
          f" | ratio {peer['cpu'] / c['load_cpu_s']:5.2f}x")
    print(f"  plain read() of the same files {c['read_s'] * 1e3:8.1f} ms | ckpt load vs plain read"
          f" {c['read_s'] / c['load_s']:5.2f}x | ckpt lazy open {c['open_s'] * 1e3:7.2f} ms")
    if c["decode_s"] is not None:
        floor = c["decode_s"]
        print(f"  libzstd decoding the same chunks into reused memory {floor * 1e3:8.1f} ms: the floor."
              f" The framework takes {peer['wall'] / floor:5.2f}x it, ckpt {c['load_s'] / floor:5.2f}x it")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--peer-child":
        peer_child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gib", type=float, default=1.0)
    root = pathlib.Path(__file__).resolve().parents[1]
    parser.add_argument("--bench", default=str(root / "build" / "ckpt_bench"))
    parser.add_argument("--only", choices=list(FORMATS), default=None)
    args = parser.parse_args()
    directory = pathlib.Path(tempfile.mkdtemp(prefix="ckpt-bench-formats-"))
    data = arrays(args.gib)
    print(f"ratios are the framework's time / ckpt's time (higher: ckpt faster), each the best of {args.repeats}"
          f" fresh processes; files in {directory}")
    try:
        for name in FORMATS:
            if args.only in (None, name):
                measure(name, data, directory, args.bench, args.repeats)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
