"""ckpt against real TensorFlow (tf.train.Checkpoint, Keras, raw SaveV2, sharded
writes, tf.train.load_checkpoint), both directions, through the CLI."""

import json
import pathlib

import ml_dtypes
import numpy as np
import pytest

from conftest import SAMPLES, raw_safetensors

SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": ml_dtypes.bfloat16,
                      "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                      "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool", "C64": "complex64",
                      "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}
GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


@pytest.fixture(scope="module")
def tf():
    """TensorFlow (its import takes seconds: once per module)."""
    return pytest.importorskip("tensorflow")


def ckpt_name(key, object_based):
    """The dotted tree name ckpt gives a TF key (docs/formats/tf.md, "Names")."""
    parts = key.split("/")
    if object_based and len(parts) >= 3 and parts[-2] == ".ATTRIBUTES":
        return ".".join(parts[:-2] + parts[-1:])
    if object_based:
        return key
    return ".".join(parts)


def tf_truth(tf, prefix):
    """{key: numpy value} as TensorFlow reads the bundle."""
    reader = tf.train.load_checkpoint(str(prefix))
    return {key: np.asarray(reader.get_tensor(key)) for key in reader.get_variable_to_shape_map()}


def ckpt_view(run, prefix, tmp_path):
    """{dotted name: (dtype code, shape, bytes)} as ckpt reads the bundle (via
    a conversion to safetensors, read by the test's own parser)."""
    out = tmp_path / f"view-{abs(hash(str(prefix)))}.safetensors"
    run("convert", prefix, out)
    tensors, _ = raw_safetensors(out)
    return tensors


def assert_ckpt_matches_tf(tf, run, prefix, tmp_path, flat_names=False):
    truth = tf_truth(tf, prefix)
    view = ckpt_view(run, prefix, tmp_path)
    object_based = GRAPH_KEY in truth
    numeric = {key: value for key, value in truth.items() if value.dtype.kind not in "OSU"}
    assert numeric, "nothing to compare"
    for key, value in numeric.items():
        name = key if flat_names else ckpt_name(key, object_based)
        assert name in view, f"{key} -> {name} missing from {sorted(view)}"
        code, shape, data = view[name]
        assert shape == list(value.shape), key
        assert data == np.ascontiguousarray(value).tobytes(), f"{key}: bytes differ"
    return truth


def keras_training_state(tf, seed):
    """A small Keras model and Adam after one step (so that slots exist)."""
    import keras
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam(learning_rate=0.01)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.ones((2, 2), np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return model, optimizer


# ---- TensorFlow writes, ckpt reads ----

def test_keras_checkpoint_is_read_bit_exact(tf, run, inspect_json, tmp_path):
    model, optimizer = keras_training_state(tf, 1)
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "tf" / "ckpt"))
    truth = assert_ckpt_matches_tf(tf, run, prefix, tmp_path)
    assert GRAPH_KEY in truth
    info = inspect_json(prefix)
    assert info["format"] == "tf"
    names = {tensor["name"] for tensor in info["tensors"]}
    assert "optimizer._iterations.VARIABLE_VALUE" in names
    assert info["values"][GRAPH_KEY]["bytes_base64"], "the object graph is kept as bytes"
    run("verify", prefix)
    # The .index file and the directory (with TF's `checkpoint` file? only
    # CheckpointManager writes one) name the same bundle.
    assert inspect_json(prefix + ".index")["tensors"] == info["tensors"]


def test_checkpoint_manager_directory_is_read(tf, run, inspect_json, tmp_path):
    model, optimizer = keras_training_state(tf, 2)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer),
                                         str(tmp_path / "run"), max_to_keep=2)
    manager.save()
    latest = manager.save()
    assert (tmp_path / "run" / "checkpoint").exists()
    by_dir = inspect_json(tmp_path / "run")
    by_prefix = inspect_json(latest)
    assert by_dir["tensors"] == by_prefix["tensors"]
    # ckpt saving into a directory that keeps a state file updates it:
    # TensorFlow then finds ckpt's bundle as the latest and restores it.
    run("convert", latest, tmp_path / "run" / "ckpt-7", "--to", "tf")
    assert tf.train.latest_checkpoint(str(tmp_path / "run")) == str(tmp_path / "run" / "ckpt-7")
    state = tf.train.get_checkpoint_state(str(tmp_path / "run"))
    assert [pathlib.Path(path).name for path in state.all_model_checkpoint_paths] == ["ckpt-1", "ckpt-2", "ckpt-7"]
    fresh_model, fresh_optimizer = keras_training_state(tf, 97)
    tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(
        tf.train.latest_checkpoint(str(tmp_path / "run"))).assert_consumed()
    for restored, expected in zip(fresh_model.weights, model.weights):
        np.testing.assert_array_equal(restored.numpy(), expected.numpy())


def test_v1_saver_names_are_read(tf, run, tmp_path):
    # tf.compat.v1 Saver names: a variable beside its slots ("w" and "w/Adam").
    prefix = str(tmp_path / "v1" / "model.ckpt-3")
    names = ["dense/kernel", "dense/kernel/Adam", "dense/kernel/Adam_1", "global_step"]
    tensors = [tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3)), tf.ones((2, 3)) * 0.5,
               tf.ones((2, 3)) * 0.25, tf.constant(3, tf.int64)]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * 4, tensors=tensors)
    # "dense/kernel" is a leaf and a folder: ckpt keeps every key whole.
    assert_ckpt_matches_tf(tf, run, prefix, tmp_path, flat_names=True)


def test_v1_graph_mode_saver_is_read(tf, run, tmp_path):
    prefix = str(tmp_path / "graph" / "model.ckpt")
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("layer/w", initializer=np.arange(4, dtype=np.float32))
        tf.compat.v1.get_variable("layer/b", initializer=np.float64(2.5))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(session, prefix)
    assert_ckpt_matches_tf(tf, run, prefix, tmp_path)


def test_every_dtype_strings_and_bfloat16(tf, run, inspect_json, tmp_path):
    rng = np.random.default_rng(3)
    values = {
        "f16": tf.constant(rng.standard_normal(5).astype(np.float16)),
        "bf16": tf.cast(tf.constant(rng.standard_normal(5).astype(np.float32)), tf.bfloat16),
        "f64": tf.constant(rng.standard_normal((2, 2))),
        "c64": tf.constant((rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64)),
        "c128": tf.constant(rng.standard_normal(3) + 1j * rng.standard_normal(3)),
        "i8": tf.constant(np.array([-3, 4], np.int8)),
        "u16": tf.constant(np.array([1, 65535], np.uint16)),
        "u32": tf.constant(np.array([7], np.uint32)),
        "u64": tf.constant(np.array([2 ** 63 + 5], np.uint64)),
        "bool": tf.constant([True, False]),
        "f8": tf.cast(tf.constant([1.0, -2.0, 0.5]), tf.dtypes.experimental.float8_e4m3fn),
        "empty": tf.zeros((0, 3)),
        "text": tf.constant(b"hello \x00\xff"),
        "words": tf.constant([[b"a", b""], [b"ccc", b"dd"]]),
    }
    prefix = str(tmp_path / "dtypes" / "x")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(values), shape_and_slices=[""] * len(values),
                      tensors=list(values.values()))
    truth = tf_truth(tf, prefix)
    info = inspect_json(prefix)
    stored = {tensor["name"]: tensor for tensor in info["tensors"]}
    assert stored["bf16"]["dtype"] == "bfloat16"
    assert stored["c128"]["dtype"] == "complex128"
    assert stored["f8"]["dtype"] == "float8_e4m3fn"
    # Tensor bytes: via a tf -> tf conversion read back by TensorFlow.
    run("verify", prefix)
    run("convert", prefix, tmp_path / "again" / "x", "--to", "tf")
    again = tf_truth(tf, tmp_path / "again" / "x")
    for key, value in truth.items():
        assert again[key].dtype == value.dtype, key
        assert again[key].shape == value.shape, key
        assert again[key].tobytes() == value.tobytes() if value.dtype.kind != "O" else \
            again[key].tolist() == value.tolist(), key
    # Strings: a scalar is bytes, a [2, 2] tensor nested lists of bytes.
    assert info["values"]["text"]["bytes_base64"] == "aGVsbG8gAP8="
    assert "words.1.0" in info["values"]


def test_sharded_checkpoint_is_read(tf, run, tmp_path):
    model, optimizer = keras_training_state(tf, 4)
    options = tf.train.CheckpointOptions(
        experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(max_shard_size=64))
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).write(str(tmp_path / "sh" / "ckpt"),
                                                                         options=options)
    shards = sorted(path.name for path in (tmp_path / "sh").glob("ckpt.data-*"))
    assert len(shards) > 1, shards
    assert_ckpt_matches_tf(tf, run, prefix, tmp_path)
    run("verify", prefix)
    # ckpt's own shards of it (its slices assembled into whole variables)
    # restore the model too (Checkpoint.write stores no save_counter, so not
    # every object is consumed: the values are compared instead).
    run("convert", prefix, tmp_path / "again" / "ckpt", "--to", "tf", "--max-shard-size", "64")
    assert len(list((tmp_path / "again").glob("ckpt.data-*"))) > 1
    fresh_model, fresh_optimizer = keras_training_state(tf, 96)
    tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(
        str(tmp_path / "again" / "ckpt")).assert_nontrivial_match()
    for restored, expected in zip(fresh_model.weights, model.weights):
        np.testing.assert_array_equal(restored.numpy(), expected.numpy())
    for restored, expected in zip(fresh_optimizer.variables, optimizer.variables):
        np.testing.assert_array_equal(np.asarray(restored), np.asarray(expected))


# ---- ckpt writes, TensorFlow reads ----

def test_safetensors_converted_to_tf_is_read_by_tensorflow(tf, run, tmp_path):
    import safetensors.numpy
    rng = np.random.default_rng(5)
    arrays = {"encoder.weight": rng.standard_normal((3, 4)).astype(np.float32),
              "encoder.bias": rng.standard_normal(4).astype(np.float16),
              "step": np.array(7, np.int64)}
    safetensors.numpy.save_file(arrays, tmp_path / "m.safetensors")
    run("convert", tmp_path / "m.safetensors", tmp_path / "out" / "model", "--to", "tf")
    truth = tf_truth(tf, tmp_path / "out" / "model")
    assert set(truth) == set(arrays)
    for name, array in arrays.items():
        assert truth[name].dtype == array.dtype and truth[name].tobytes() == array.tobytes(), name


def test_a_save_into_a_fresh_directory_writes_no_state_file_as_checkpoint_write(tf, run, tmp_path):
    """ckpt's default state-file policy (kIfPresent): a fresh directory gets
    the bundle only, as tf.train.Checkpoint.write gives it; once
    tf.train.Checkpoint.save has created a state file, ckpt's saves update it
    (C++ tests cover kUpdate and kLeave, tf_state_file_test.cc)."""
    arrays = {"v": np.arange(3, dtype=np.float32)}
    import safetensors.numpy
    safetensors.numpy.save_file(arrays, tmp_path / "v.safetensors")
    run("convert", tmp_path / "v.safetensors", tmp_path / "ckpt" / "ckpt-5", "--to", "tf")
    tf.train.Checkpoint(v=tf.Variable(np.ones(3, np.float32))).write(str(tmp_path / "tf" / "written"))
    assert sorted(p.name for p in (tmp_path / "tf").iterdir()) == ["written.data-00000-of-00001", "written.index"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["ckpt-5.data-00000-of-00001", "ckpt-5.index"]
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) is None
    tf.train.Checkpoint(v=tf.Variable(np.ones(3, np.float32))).save(str(tmp_path / "ckpt" / "tf"))
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt" / "tf-1")
    run("convert", tmp_path / "v.safetensors", tmp_path / "ckpt" / "ckpt-6", "--to", "tf")
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) == str(tmp_path / "ckpt" / "ckpt-6")
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "ckpt")))
    np.testing.assert_array_equal(reader.get_tensor("v"), arrays["v"])


def test_tf_to_safetensors_to_tf_restores_the_same_object_graph(tf, run, tmp_path):
    model, optimizer = keras_training_state(tf, 6)
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "tf" / "ckpt"))
    run("convert", prefix, tmp_path / "state.safetensors")
    (tmp_path / "back").mkdir()
    run("convert", tmp_path / "state.safetensors", tmp_path / "back" / "ckpt-1", "--to", "tf")
    original = tf_truth(tf, prefix)
    back = tf_truth(tf, tmp_path / "back" / "ckpt-1")
    assert set(back) == set(original), "the same keys"
    assert back[GRAPH_KEY] == original[GRAPH_KEY], "the object graph verbatim"
    for key, value in original.items():
        if key != GRAPH_KEY:
            assert back[key].tobytes() == value.tobytes(), key
    # A fresh model of the same architecture restores every value.
    fresh_model, fresh_optimizer = keras_training_state(tf, 99)
    status = tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(
        str(tmp_path / "back" / "ckpt-1"))
    status.assert_consumed()
    for restored, expected in zip(fresh_model.weights, model.weights):
        np.testing.assert_array_equal(restored.numpy(), expected.numpy())
    for restored, expected in zip(fresh_optimizer.variables, optimizer.variables):
        np.testing.assert_array_equal(np.asarray(restored), np.asarray(expected))


def shard_names(prefix):
    prefix = pathlib.Path(prefix)
    return sorted(path.name for path in prefix.parent.glob(prefix.name + ".data-*"))


def test_ckpt_writes_three_shards_that_tensorflow_restores(tf, run, tmp_path):
    model, optimizer = keras_training_state(tf, 8)
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "tf" / "ckpt"))
    out = tmp_path / "sharded" / "ckpt-1"

    def shards_at(limit):
        run("convert", prefix, out, "--to", "tf", "--max-shard-size", limit)
        return shard_names(out)

    # The smallest limit that gives at most 3 shards (their count only falls
    # as the limit grows); earlier conversions' shards must not linger. Each
    # shard ends with ckpt's 16-byte trailer (docs/formats/tf.md, "Torn
    # overwrites"): the tensors' bytes are the rest.
    def data_bytes():
        return sum((out.parent / name).stat().st_size - 16 for name in shard_names(out))

    shards_at(2 ** 40)
    total = data_bytes()
    low, high = 1, total
    while low < high:
        middle = (low + high) // 2
        if len(shards_at(middle)) <= 3:
            high = middle
        else:
            low = middle + 1
    assert shards_at(low) == [f"ckpt-1.data-0000{k}-of-00003" for k in range(3)]
    assert data_bytes() == total
    run("verify", out)
    original = tf_truth(tf, prefix)
    sharded = tf_truth(tf, out)
    assert set(sharded) == set(original)
    for key, value in original.items():
        assert sharded[key].dtype == value.dtype, key
        assert sharded[key].tobytes() == value.tobytes() if value.dtype.kind != "O" else \
            sharded[key].tolist() == value.tolist(), key
    fresh_model, fresh_optimizer = keras_training_state(tf, 95)
    tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(str(out)).assert_consumed()
    for restored, expected in zip(fresh_model.weights, model.weights):
        np.testing.assert_array_equal(restored.numpy(), expected.numpy())
    for restored, expected in zip(fresh_optimizer.variables, optimizer.variables):
        np.testing.assert_array_equal(np.asarray(restored), np.asarray(expected))


def test_tf_to_tf_conversion_restores(tf, run, tmp_path):
    model, optimizer = keras_training_state(tf, 7)
    prefix = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "tf" / "ckpt"))
    run("convert", prefix, tmp_path / "copy", "--to", "tf")
    fresh_model, fresh_optimizer = keras_training_state(tf, 98)
    tf.train.Checkpoint(model=fresh_model, optimizer=fresh_optimizer).restore(
        str(tmp_path / "copy")).assert_consumed()
    for restored, expected in zip(fresh_model.weights, model.weights):
        np.testing.assert_array_equal(restored.numpy(), expected.numpy())


# ---- the shared samples, written by older TensorFlow versions ----

SAMPLE_PREFIXES = sorted(SAMPLES.glob("tf-*/variables/variables.index")) if SAMPLES.is_dir() else []


@pytest.mark.skipif(not SAMPLE_PREFIXES, reason="no shared interop samples")
@pytest.mark.parametrize("index", SAMPLE_PREFIXES, ids=lambda path: path.parts[-3])
def test_shared_samples_are_read_and_rewritten(tf, run, tmp_path, index):
    prefix = str(index)[: -len(".index")]
    assert_ckpt_matches_tf(tf, run, prefix, tmp_path)
    run("verify", prefix)
    # ckpt's rewrite: TensorFlow reads every variable equal (the .index is
    # rebuilt byte for byte in tests/formats/tf_test.cc).
    run("convert", prefix, tmp_path / "rewritten", "--to", "tf")
    original = tf_truth(tf, prefix)
    rewritten = tf_truth(tf, tmp_path / "rewritten")
    assert set(rewritten) == set(original)
    for key, value in original.items():
        assert rewritten[key].tobytes() == value.tobytes(), key


def test_python_package_writes_and_reads_bundles_beside_tensorflow_in_one_process(tmp_path):
    # TensorFlow exports a protobuf of its own into the process's global
    # symbol scope; ckpt's module must not bind to it. In a child process, so
    # that a crash fails this test instead of the whole run.
    import subprocess
    import sys

    script = f"""
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
import numpy as np
import ckpt
state = {{"dense": {{"kernel": np.arange(12, dtype=np.float32).reshape(3, 4)}}, "step": np.int64(7)}}
prefix = {str(tmp_path / "model.ckpt")!r}
ckpt.save(prefix, state, format="tf", max_shard_bytes=16)
loaded = ckpt.load(prefix)
assert np.array_equal(loaded["dense"]["kernel"], state["dense"]["kernel"])
reader = tf.train.load_checkpoint(prefix)
assert sorted(reader.get_variable_to_shape_map()) != []
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


# ---- what ckpt refuses that TensorFlow wrote or that a crash left ----

def test_a_key_that_is_not_utf8_is_refused_in_one_clean_line(tf, run, tmp_path):
    """SaveV2 takes tensor names as bytes: TensorFlow writes a key that is no
    UTF-8 (its own Python reader then fails to list it). ckpt refuses it as
    corrupt, naming the file, in one line: never invalid JSON on stdout."""
    prefix = str(tmp_path / "raw")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[b"ok", b"bad\xff\xfe"], shape_and_slices=["", ""],
                      tensors=[tf.constant([1.0]), tf.constant([2.0])])
    assert (tmp_path / "raw.index").is_file()
    for command in (["inspect", prefix, "--json"], ["verify", prefix]):
        result = run(*command, expect=None)
        assert result.returncode == 1, result
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
        assert "raw.index" in result.stderr and "not valid UTF-8" in result.stderr
        assert r"'bad\xff\xfe'" in result.stderr


def test_a_torn_overwrite_is_refused_while_tensorflow_reads_each_whole_bundle(tf, run, tmp_path):
    """A save over an existing prefix renames the data, then the .index: a
    kill between the two leaves the old .index beside the new data. ckpt
    refuses that pair at open (no verify), naming both files; each whole
    bundle ckpt wrote (its shards end with ckpt's trailer) TensorFlow reads."""
    import safetensors.numpy
    prefix = tmp_path / "model.ckpt"
    for step, value in ((1, 1.0), (2, 2.0)):
        safetensors.numpy.save_file({"w": np.full(6, value, np.float32)}, tmp_path / f"s{step}.safetensors")
    run("convert", tmp_path / "s1.safetensors", prefix, "--to", "tf")
    np.testing.assert_array_equal(tf_truth(tf, prefix)["w"], np.full(6, 1.0, np.float32))
    old_index = (tmp_path / "model.ckpt.index").read_bytes()
    run("convert", tmp_path / "s2.safetensors", prefix, "--to", "tf")
    np.testing.assert_array_equal(tf_truth(tf, prefix)["w"], np.full(6, 2.0, np.float32))
    (tmp_path / "model.ckpt.index").write_bytes(old_index)
    result = run("inspect", prefix, expect=None)
    assert result.returncode == 1, result
    assert "model.ckpt.data-00000-of-00001" in result.stderr and "model.ckpt.index" in result.stderr
    assert "different saves" in result.stderr and result.stderr.count("\n") == 1
