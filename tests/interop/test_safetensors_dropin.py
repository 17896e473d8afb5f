"""ckpt.safetensors beside huggingface's safetensors package (the real one,
in .venv): the same bytes, the same values, the same exception types and
messages, for the same calls. Expected outputs come from the reference
package, run in the same test."""

import io
import os
import pickle
import threading

import numpy as np
import pytest
import torch

import safetensors as hf
import safetensors.numpy as hf_np
import safetensors.torch as hf_pt

import ckpt
import ckpt.safetensors as st
import ckpt.safetensors.numpy as st_np
import ckpt.safetensors.torch as st_pt

RNG = np.random.default_rng(7)


def numpy_tensors():
    return {
        "weight": RNG.standard_normal((3, 5)).astype(np.float32),
        "bias": RNG.standard_normal(5),
        "ids": RNG.integers(-100, 100, (7,), dtype=np.int64),
        "mask": RNG.integers(0, 2, (2, 2)).astype(bool),
        "half": RNG.standard_normal((4, 1)).astype(np.float16),
        "bytes": RNG.integers(0, 255, (9,), dtype=np.uint8),
        "small": RNG.integers(-5, 5, (3,), dtype=np.int8),
        "u16": RNG.integers(0, 60000, (2,), dtype=np.uint16),
        "c": (RNG.standard_normal(3) + 1j * RNG.standard_normal(3)).astype(np.complex64),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def torch_tensors():
    return {
        "w": torch.randn(4, 3),
        "bf": torch.randn(2, 3, dtype=torch.bfloat16),
        "h": torch.randn(5, dtype=torch.float16),
        "i": torch.randint(-9, 9, (2, 2), dtype=torch.int32),
        "b": torch.tensor([True, False, True]),
        "f8": torch.randn(6).to(torch.float8_e4m3fn),
        "f8b": torch.randn(6).to(torch.float8_e5m2),
        "u32": torch.tensor([1, 2, 4000000000], dtype=torch.uint32),
        "c": torch.randn(2, dtype=torch.complex64),
        "zero": torch.zeros(3, 0),
        "s": torch.tensor(1.25),
    }


def same_bits(a, b):
    """Same dtype, shape and bytes (NaN and float8 included)."""
    return a.dtype == b.dtype and a.shape == b.shape and \
        torch.equal(a.reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


# ---------------------------------------------------------------- writing


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_numpy_save_gives_the_reference_bytes(tmp_path, metadata):
    tensors = numpy_tensors()
    assert st_np.save(tensors, metadata=metadata) == hf_np.save(tensors, metadata=metadata)
    st_np.save_file(tensors, tmp_path / "a.safetensors", metadata=metadata)
    hf_np.save_file(tensors, tmp_path / "b.safetensors", metadata=metadata)
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_torch_save_gives_the_reference_bytes(tmp_path):
    tensors = torch_tensors()
    assert st_pt.save(tensors) == hf_pt.save(tensors)
    st_pt.save_file(tensors, str(tmp_path / "a.safetensors"), metadata={"k": "v"})
    hf_pt.save_file(tensors, str(tmp_path / "b.safetensors"), metadata={"k": "v"})
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_order_byte_order_and_layout_follow_the_reference():
    first = {"b": np.zeros(3, ">i4"), "a": np.arange(4, dtype=np.float16), "c": np.ones((2, 2), ">f8")}
    second = dict(reversed(list(first.items())))
    assert st_np.save(first) == st_np.save(second) == hf_np.save(first)
    # A strided array is stored as its elements, not its memory.
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    loaded = st_np.load(st_np.save({"s": strided}))
    np.testing.assert_array_equal(loaded["s"], strided)


def test_serialize_from_tensor_specs_matches_the_reference(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(4, dtype=np.int16)
    ours = {"a": st.TensorSpec(dtype="float32", shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes),
            "b": st.TensorSpec(dtype="int16", shape=b.shape, data_ptr=b.ctypes.data, data_len=b.nbytes)}
    theirs = {"a": hf.TensorSpec(dtype="float32", shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes),
              "b": hf.TensorSpec(dtype="int16", shape=b.shape, data_ptr=b.ctypes.data, data_len=b.nbytes)}
    assert st.serialize(ours, metadata={"x": "y"}) == hf.serialize(theirs, metadata={"x": "y"})
    st.serialize_file(ours, tmp_path / "o.safetensors")
    hf.serialize_file(theirs, tmp_path / "t.safetensors")
    assert (tmp_path / "o.safetensors").read_bytes() == (tmp_path / "t.safetensors").read_bytes()


def test_tensor_spec_reads_back_as_the_reference_does():
    for dtype in ("float32", "bfloat16", "bool", "float8_e4m3fn", "uint64", "complex64"):
        ours = st.TensorSpec(dtype=dtype, shape=(2, 3), data_ptr=0, data_len=0)
        theirs = hf.TensorSpec(dtype=dtype, shape=(2, 3), data_ptr=0, data_len=0)
        assert (ours.dtype, ours.shape, ours.data_ptr, ours.data_len) == \
            (theirs.dtype, theirs.shape, theirs.data_ptr, theirs.data_len)
    with pytest.raises(st.SafetensorError, match="nonsense"):
        st.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
    spec = st.TensorSpec(dtype="int8", shape=[1], data_ptr=0, data_len=1)
    with pytest.raises(AttributeError):
        spec.data_len = 5


def test_serialize_refuses_what_the_reference_refuses():
    with pytest.raises(TypeError):
        st.serialize({"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}})
    a = np.zeros(3, np.float32)
    short = st.TensorSpec(dtype="float32", shape=[4], data_ptr=a.ctypes.data, data_len=a.nbytes)
    with pytest.raises(st.SafetensorError, match="Error while serializing"):
        st.serialize({"t": short})
    with pytest.raises(hf.SafetensorError):
        hf.serialize({"t": hf.TensorSpec(dtype="float32", shape=[4], data_ptr=a.ctypes.data, data_len=12)})


def error_of(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the test compares whatever is raised
        return type(error), str(error)
    return None


@pytest.mark.parametrize("case", ["not a dict", "not a tensor", "sparse", "shared", "overlapping", "strided",
                                  "meta"])
def test_torch_save_errors_match_the_reference(tmp_path, case):
    base = torch.arange(6.0).reshape(2, 3)
    tensors = {
        "not a dict": "notadict",
        "not a tensor": {"t": {"some": "thing"}},
        "sparse": {"t": torch.sparse_coo_tensor(size=(2, 3))},
        "shared": {"A": base, "B": base[:1]},
        "overlapping": {"A": base, "B": base[1:]},
        "strided": {"t": base[:, 1]},
        "meta": {"t": torch.zeros(2, device="meta")},
    }[case]
    ours = error_of(lambda: st_pt.save_file(tensors, tmp_path / "o.safetensors"))
    theirs = error_of(lambda: hf_pt.save_file(tensors, tmp_path / "t.safetensors"))
    assert theirs is not None
    assert ours[0] is theirs[0] or issubclass(ours[0], theirs[0])
    if case != "meta":
        assert ours[1] == theirs[1]
    else:
        assert "Cannot copy out of meta tensor" in ours[1]


def test_disjoint_views_of_one_storage_are_saved(tmp_path):
    base = torch.arange(100.0).reshape(10, 10)
    tensors = {"head": base[:1], "rest": base[1:]}
    st_pt.save_file(tensors, tmp_path / "o.safetensors")
    loaded = hf_pt.load_file(tmp_path / "o.safetensors")
    assert torch.equal(loaded["head"], base[:1]) and torch.equal(loaded["rest"], base[1:])


# ---------------------------------------------------------------- reading


def test_files_written_by_the_reference_read_equal_and_back(tmp_path):
    tensors = torch_tensors()
    hf_pt.save_file(tensors, tmp_path / "t.safetensors", metadata={"origin": "hf"})
    loaded = st_pt.load_file(tmp_path / "t.safetensors")
    assert list(loaded) == list(hf_pt.load_file(tmp_path / "t.safetensors"))
    for name, tensor in tensors.items():
        assert same_bits(loaded[name], tensor)
    st_pt.save_file(tensors, tmp_path / "o.safetensors")
    for name, tensor in hf_pt.load_file(tmp_path / "o.safetensors").items():
        assert same_bits(tensor, tensors[name])


def test_safe_open_answers_as_the_reference(tmp_path):
    path = tmp_path / "t.safetensors"
    hf_np.save_file(numpy_tensors(), path, metadata={"a": "1"})
    with st.safe_open(path, framework="np") as ours, hf.safe_open(path, framework="np") as theirs:
        assert ours.keys() == theirs.keys()
        assert ours.offset_keys() == theirs.offset_keys()
        assert ours.metadata() == theirs.metadata()
        for name in theirs.keys():
            np.testing.assert_array_equal(ours.get_tensor(name), theirs.get_tensor(name))
            assert ours.get_slice(name).get_shape() == theirs.get_slice(name).get_shape()
            assert ours.get_slice(name).get_dtype() == theirs.get_slice(name).get_dtype()
        assert list(ours.get_tensors()) == list(theirs.get_tensors())
        assert error_of(lambda: ours.get_tensor("nope"))[1] == error_of(lambda: theirs.get_tensor("nope"))[1]
    hf_np.save_file({"x": np.zeros(1)}, tmp_path / "plain.safetensors")
    with st.safe_open(tmp_path / "plain.safetensors", "np") as f:
        assert f.metadata() is None
    # Closed by the with block, as the reference closes it.
    assert error_of(ours.keys) == (st.SafetensorError, "File is closed")


def test_loaded_arrays_are_writable_and_never_write_the_file(tmp_path):
    path = tmp_path / "t.safetensors"
    st_np.save_file({"a": np.zeros(4, np.float32)}, path)
    before = path.read_bytes()
    arrays = st_np.load_file(path)
    arrays["a"] += 1
    assert path.read_bytes() == before
    tensors = st_pt.load_file(path)
    tensors["a"].add_(2)
    assert path.read_bytes() == before
    assert st_np.load_file(path)["a"].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("framework", ["np", "pt"])
@pytest.mark.parametrize("opening", ["mmap", "pread", "file object"])
def test_results_share_memory_exactly_where_the_reference_s_do(tmp_path, framework, opening):
    # Write into every result, then ask again: numpy results (and torch's
    # with "pread") are each the caller's own, torch tensors over a mapping
    # share it, as with the reference.
    path = tmp_path / "t.safetensors"
    hf_np.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3)}, path)

    def written_then_read(module):
        if opening == "file object":
            with open(path, "rb") as f:
                return run(module._safe_open_handle(f, framework))
        return run(module.safe_open(path, framework, backend=opening))

    def run(opened):
        seen = []
        with opened as f:
            for _ in range(3):
                tensor = f.get_tensor("a")
                part = f.get_slice("a")[:, 1:]
                seen.append((np.asarray(tensor).tolist(), np.asarray(part).tolist()))
                tensor[0, 0] = 100
                part[0, 0] = -1
        return seen

    ours = written_then_read(st)
    assert ours == written_then_read(hf)
    if framework == "pt" and opening != "pread":
        # torch tensors over the mapping share it, the reference's too.
        assert ours[2][0][0] == [100, -1, 2]
    else:
        assert ours[2] == ([[0, 1, 2], [3, 4, 5]], [[1, 2], [4, 5]])


def test_synced_writes_give_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(st, "SYNC_WRITES", True)
    tensors = torch_tensors()
    st_pt.save_file(tensors, tmp_path / "o.safetensors")
    assert (tmp_path / "o.safetensors").read_bytes() == hf_pt.save(tensors)
    assert [p.name for p in tmp_path.iterdir()] == ["o.safetensors"]  # no temporary left behind


def test_saving_over_a_file_still_mapped_keeps_the_old_tensors(tmp_path):
    path = tmp_path / "t.safetensors"
    st_pt.save_file({"a": torch.zeros(1000)}, path)
    old = st_pt.load_file(path)["a"]
    st_pt.save_file({"a": torch.ones(1000)}, path)
    assert torch.equal(old, torch.zeros(1000))
    assert torch.equal(st_pt.load_file(path)["a"], torch.ones(1000))


SLICES = [
    np.s_[:], (), np.s_[:2], np.s_[:, :2], np.s_[0, :2], np.s_[2:, 0], np.s_[2:, -1], np.s_[2:, -5], [],
    np.s_[1:3, 1:4], np.s_[9], np.s_[-10], np.s_[3:3],
]
BAD_SLICES = [np.s_[2:, -6], [0, 1], np.s_[2:, 20], np.s_[:20], np.s_[:, :20], np.s_[0, 0, 0], np.s_[10]]


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_get_slice_matches_the_reference(tmp_path, framework):
    A = np.random.default_rng(0).standard_normal((10, 5))
    path = tmp_path / "s.safetensors"
    hf_np.save_file({"a": A}, path)
    with st.safe_open(path, framework) as ours, hf.safe_open(path, framework) as theirs:
        for index in SLICES:
            mine, reference = ours.get_slice("a")[index], theirs.get_slice("a")[index]
            assert type(mine) is type(reference)
            assert list(mine.shape) == list(reference.shape), index
            np.testing.assert_array_equal(np.asarray(mine), np.asarray(reference))
        for index in BAD_SLICES:
            # The reference indexes torch tensors as torch does (clipping,
            # IndexError) and the others by its own strict rules.
            reference = error_of(lambda: theirs.get_slice("a")[index])
            if reference is None:
                np.testing.assert_array_equal(np.asarray(ours.get_slice("a")[index]),
                                              np.asarray(theirs.get_slice("a")[index]))
                continue
            mine = error_of(lambda: ours.get_slice("a")[index])
            assert mine[1] == reference[1], index
            assert mine[0] is (st.SafetensorError if reference[0] is hf.SafetensorError else reference[0])


def test_get_slice_also_takes_steps_negative_bounds_and_ellipsis(tmp_path):
    A = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    path = tmp_path / "s.safetensors"
    st_np.save_file({"a": A}, path)
    with st.safe_open(path, "np") as f:
        part = f.get_slice("a")
        for index in (np.s_[::2], np.s_[-2:], np.s_[..., 1:4], np.s_[1, ..., ::3], np.s_[:, -3:-1]):
            np.testing.assert_array_equal(part[index], A[index])
            assert part[index].flags.c_contiguous
        with pytest.raises(st.SafetensorError, match="step"):
            part[::-1]


def test_deserialize_and_load_from_bytes_match_the_reference():
    data = hf_np.save(numpy_tensors(), metadata={"m": "n"})
    ours, theirs = st.deserialize(data), hf.deserialize(data)
    assert sorted(ours, key=lambda item: item[0]) == sorted(theirs, key=lambda item: item[0])
    for name, array in st_np.load(data).items():
        np.testing.assert_array_equal(array, hf_np.load(data)[name])
    torch_data = hf_pt.save(torch_tensors())
    for name, tensor in hf_pt.load(torch_data).items():
        assert same_bits(st_pt.load(torch_data)[name], tensor)


def test_safe_open_handle_takes_file_objects_with_and_without_a_descriptor(tmp_path):
    path = tmp_path / "h.safetensors"
    tensors = numpy_tensors()
    st_np.save_file(tensors, path)
    with open(path, "r") as text_file:
        with st._safe_open_handle(text_file, framework="np", device="cpu") as f:
            loaded = {k: f.get_tensor(k) for k in f.keys()}
    with st._safe_open_handle(io.BytesIO(path.read_bytes()), framework="pt") as f:
        as_torch = f.get_tensors()
    for name, array in tensors.items():
        np.testing.assert_array_equal(loaded[name], array)
        np.testing.assert_array_equal(as_torch[name].numpy(), array)


def test_pread_backend_gives_the_same_tensors(tmp_path):
    path = tmp_path / "p.safetensors"
    tensors = torch_tensors()
    st_pt.save_file(tensors, path)
    for name, tensor in st_pt.load_file(path, backend="pread").items():
        assert same_bits(tensor, tensors[name])
    with pytest.raises(st.SafetensorError):
        st.safe_open(path, "pt", backend="not_a_backend")


def test_missing_and_corrupt_files(tmp_path):
    error = error_of(lambda: st.safe_open("notafile", framework="pt"))
    assert error == (FileNotFoundError, "No such file or directory: notafile")
    assert error == error_of(lambda: hf.safe_open("notafile", framework="pt"))
    good = hf_np.save({"liar": np.zeros(4, np.float32)})
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(good[:-3])
    with pytest.raises(st.SafetensorError) as caught:
        st.safe_open(bad, "np")
    assert "bad.safetensors" in str(caught.value)
    assert isinstance(caught.value, ckpt.CheckpointError)
    with pytest.raises(hf.SafetensorError):
        hf.safe_open(bad, "np")
    with pytest.raises(st.SafetensorError):
        st_np.load(good[:20])


def test_safe_open_reads_other_formats_too(tmp_path):
    state = {"layer.weight": torch.randn(3, 3), "layer.bias": torch.randn(3)}
    torch.save(state, tmp_path / "m.pt")
    np.savez(tmp_path / "m.npz", **{k: v.numpy() for k, v in state.items()})
    for path in (tmp_path / "m.pt", tmp_path / "m.npz"):
        with st.safe_open(path, framework="pt") as f:
            assert f.keys() == sorted(state)
            for name, tensor in state.items():
                assert torch.equal(f.get_tensor(name), tensor)
                assert f.get_slice(name).get_dtype() == "F32"


def test_safetensor_error_pickles_and_names_its_module():
    error = pickle.loads(pickle.dumps(st.SafetensorError("boom")))
    assert isinstance(error, st.SafetensorError) and str(error) == "boom"
    assert st.SafetensorError.__module__ == "ckpt.safetensors"


# ---------------------------------------------------------------- models


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = self.a


class Untied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)


def shared_cases():
    A = torch.zeros((4,))
    B = torch.zeros((3, 3))
    return [
        {"A": B, "B": B[:1, :]}, {"A": B}, {"B": B[:1]}, {"B": A[:2], "C": A[2:]}, {"B": A[:2], "C": A[1:]},
        {"B": A[:2], "C": A[2:], "D": A[:1]}, {"C": torch.zeros(2, 2, device="meta")},
        Untied().state_dict(), Tied().state_dict(),
    ]


def test_shared_tensor_helpers_match_the_reference():
    for state in shared_cases():
        assert st_pt._find_shared_tensors(state) == hf_pt._find_shared_tensors(state)
        ours = error_of(lambda: st_pt._remove_duplicate_names(state))
        assert ours is None or ours[0] is RuntimeError
        if ours is None:
            assert st_pt._remove_duplicate_names(state) == hf_pt._remove_duplicate_names(state)
        else:
            assert error_of(lambda: hf_pt._remove_duplicate_names(state))[0] is RuntimeError
        for tensor in state.values():
            assert st_pt._is_complete(tensor) == hf_pt._is_complete(tensor)
            if tensor.device.type != "meta":
                assert st_pt._end_ptr(tensor) == hf_pt._end_ptr(tensor)
                assert st_pt.storage_ptr(tensor) == hf_pt.storage_ptr(tensor)
                assert st_pt.storage_size(tensor) == hf_pt.storage_size(tensor)
    strided = torch.zeros(16, dtype=torch.float16)[::4]
    assert st_pt._end_ptr(strided) == hf_pt._end_ptr(strided)


def test_save_model_and_load_model_interoperate_with_the_reference(tmp_path):
    model = Tied()
    st_pt.save_model(model, tmp_path / "o.safetensors")
    hf_pt.save_model(model, tmp_path / "t.safetensors")
    with st.safe_open(tmp_path / "o.safetensors", "pt") as f, hf.safe_open(tmp_path / "t.safetensors", "pt") as g:
        assert f.metadata() == g.metadata() == {"b.weight": "a.weight", "b.bias": "a.bias"}
        assert f.keys() == g.keys()
    for loader, path in ((st_pt.load_model, "t"), (hf_pt.load_model, "o"), (st_pt.load_model, "o")):
        fresh = Tied()
        assert loader(fresh, tmp_path / f"{path}.safetensors") == (set(), [])
        assert torch.equal(fresh.a.weight, model.a.weight) and fresh.b.weight is fresh.a.weight


def test_load_model_reports_and_raises_as_the_reference(tmp_path):
    st_pt.save_model(Tied(), tmp_path / "tied.safetensors")
    st_pt.save_model(Untied(), tmp_path / "untied.safetensors")
    for model, path in ((Untied, "tied"), (Tied, "untied")):
        ours = error_of(lambda: st_pt.load_model(model(), tmp_path / f"{path}.safetensors"))
        theirs = error_of(lambda: hf_pt.load_model(model(), tmp_path / f"{path}.safetensors"))
        assert ours == theirs and ours[0] is RuntimeError
        missing, unexpected = st_pt.load_model(model(), tmp_path / f"{path}.safetensors", strict=False)
        ref_missing, ref_unexpected = hf_pt.load_model(model(), tmp_path / f"{path}.safetensors", strict=False)
        assert (set(missing), sorted(unexpected)) == (set(ref_missing), sorted(ref_unexpected))


def test_save_model_packs_non_contiguous_parameters(tmp_path):
    model = Untied()
    model.a.weight = torch.nn.Parameter(torch.randn(8, 8).t())
    ours = error_of(lambda: st_pt.save_model(model, tmp_path / "o.safetensors", force_contiguous=False))
    theirs = error_of(lambda: hf_pt.save_model(model, tmp_path / "t.safetensors", force_contiguous=False))
    assert ours == theirs and ours[0] is ValueError
    st_pt.save_model(model, tmp_path / "o.safetensors")
    fresh = Untied()
    st_pt.load_model(fresh, tmp_path / "o.safetensors")
    assert torch.equal(fresh.a.weight, model.a.weight)


def test_concurrent_saves_and_loads_in_threads(tmp_path):
    tensors = {"x": torch.randn(300, 300), "y": torch.arange(1000)}
    failures = []

    def worker(index):
        try:
            for round_ in range(5):
                path = tmp_path / f"{index}-{round_}.safetensors"
                st_pt.save_file(tensors, path)
                loaded = st_pt.load_file(path)
                assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
        except Exception as error:  # noqa: BLE001
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(os.listdir(tmp_path)) == 20


def test_flax_and_tensorflow_modules_interoperate_with_the_reference(tmp_path):
    import jax.numpy as jnp
    import safetensors.flax as hf_flax
    import safetensors.tensorflow as hf_tf
    import tensorflow as tf

    import ckpt.safetensors.flax as st_flax
    import ckpt.safetensors.tensorflow as st_tf

    arrays = {"w": jnp.arange(12, dtype=jnp.bfloat16).reshape(3, 4), "b": jnp.ones(3, jnp.float32)}
    assert st_flax.save(arrays) == hf_flax.save(arrays)
    st_flax.save_file(arrays, tmp_path / "f.safetensors")
    for name, array in hf_flax.load_file(str(tmp_path / "f.safetensors")).items():
        assert array.dtype == arrays[name].dtype and bool(jnp.all(array == arrays[name]))
    loaded = st_flax.load(hf_flax.save(arrays))
    assert all(bool(jnp.all(loaded[k] == v)) for k, v in arrays.items())

    tensors = {"k": tf.constant([[1.0, 2.0]]), "i": tf.constant([3, 4], dtype=tf.int64)}
    assert st_tf.save(tensors) == hf_tf.save(tensors)
    st_tf.save_file(tensors, tmp_path / "t.safetensors")
    for name, tensor in hf_tf.load_file(str(tmp_path / "t.safetensors")).items():
        assert tensor.dtype == tensors[name].dtype and bool(tf.reduce_all(tensor == tensors[name]))
    assert all(bool(tf.reduce_all(v == tensors[k])) for k, v in st_tf.load_file(tmp_path / "t.safetensors").items())
