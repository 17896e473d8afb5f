"""TensorFlow bundles, Flax msgpack files and Orbax checkpoints: ckpt beside
each framework's own reader, on the same ~1 GiB files (100 float32 tensors)
written by the framework itself, in one run. ckpt's side is timed in C++
(`ckpt_bench file`: lazy open, full load into heap memory, and a plain read()
of the same files). Printed as ratios. For Orbax, whose chunks are zstd,
also CPU time (all threads) and libzstd's own decoding of the same chunks
into reused memory: the floor under any reader on this machine.

    .venv/bin/python bench/bench_formats.py [--gib 1.0] [--repeats 3]
"""

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import tempfile
import time

import numpy as np

from bench_common import best

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def arrays(gib, count=100):
    elements = int(gib * 2**30 / count / 4)
    rng = np.random.default_rng(0)
    return {f"layer_{i}": rng.random(elements, dtype=np.float32) for i in range(count)}


def ckpt_side(bench, path, directory, repeats):
    out = subprocess.run([bench, "file", str(path), "--repeats", str(repeats), "--dir", str(directory)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def best_wall_and_cpu(repeats, body):
    """The shortest wall time and the least CPU time of `repeats` runs."""
    wall, cpu = [], []
    for _ in range(repeats):
        c, t = cpu_seconds(), time.perf_counter()
        body()
        wall.append(time.perf_counter() - t)
        cpu.append(cpu_seconds() - c)
    return min(wall), min(cpu)


def report(label, peer_name, peer_s, c):
    print(f"\n== {label}: {c['tensors']} tensors, {c['bytes'] / 2**20:.0f} MiB ==")
    print(f"  {peer_name}: {peer_s * 1e3:8.1f} ms | ckpt full load {c['load_s'] * 1e3:8.1f} ms"
          f" | ratio {peer_s / c['load_s']:6.2f}x")
    print(f"  plain read() of the same files {c['read_s'] * 1e3:8.1f} ms | ckpt load vs plain read"
          f" {c['read_s'] / c['load_s']:5.2f}x | ckpt lazy open {c['open_s'] * 1e3:7.2f} ms")


def tf_bench(data, directory, bench, repeats):
    import tensorflow as tf

    variables = {k: tf.Variable(v) for k, v in data.items()}
    prefix = tf.train.Checkpoint(**variables).write(str(directory / "tf" / "ckpt"))

    def peer():
        # Every tensor kept, as a restore keeps them (reading and dropping
        # them one by one would let malloc hand the same pages back each time).
        reader = tf.train.load_checkpoint(prefix)
        return [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()]

    report("TF bundle (tf.train.Checkpoint)", "tf.train.load_checkpoint + get_tensor of every variable",
           best(repeats, peer), ckpt_side(bench, prefix, directory, repeats))


def flax_bench(data, directory, bench, repeats):
    import flax.serialization

    path = directory / "checkpoint_1"
    path.write_bytes(flax.serialization.to_bytes({"params": data}))
    peer = lambda: flax.serialization.msgpack_restore(path.read_bytes())  # noqa: E731
    report("Flax msgpack (flax.serialization.to_bytes)", "flax.serialization.msgpack_restore(file bytes)",
           best(repeats, peer), ckpt_side(bench, path, directory, repeats))


def orbax_bench(data, directory, bench, repeats):
    import orbax.checkpoint as ocp

    path = directory / "orbax" / "1"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, {"params": data})
    with ocp.StandardCheckpointer() as checkpointer:
        peer_s, peer_cpu = best_wall_and_cpu(repeats, lambda: checkpointer.restore(path))
    c = ckpt_side(bench, path, directory, repeats)
    report("Orbax (StandardCheckpointer, OCDBT)", "StandardCheckpointer.restore", peer_s, c)
    print(f"  CPU time, all threads: Orbax {peer_cpu:6.2f} s | ckpt {c['load_cpu_s']:6.2f} s"
          f" | ratio {peer_cpu / c['load_cpu_s']:5.2f}x")
    if c["decode_s"] is not None:
        floor = c["decode_s"]
        print(f"  libzstd decoding the same chunks into reused memory {floor * 1e3:8.1f} ms: the floor."
              f" Orbax takes {peer_s / floor:5.2f}x it, ckpt {c['load_s'] / floor:5.2f}x it")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gib", type=float, default=1.0)
    root = pathlib.Path(__file__).resolve().parents[1]
    parser.add_argument("--bench", default=str(root / "build" / "ckpt_bench"))
    parser.add_argument("--only", choices=["tf", "flax", "orbax"], default=None)
    args = parser.parse_args()
    directory = pathlib.Path(tempfile.mkdtemp(prefix="ckpt-bench-formats-"))
    data = arrays(args.gib)
    print(f"ratios are the framework's time / ckpt's time (higher: ckpt faster); files in {directory}")
    try:
        for name, body in (("tf", tf_bench), ("flax", flax_bench), ("orbax", orbax_bench)):
            if args.only in (None, name):
                body(data, directory, args.bench, args.repeats)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
