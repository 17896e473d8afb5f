"""ckpt.restore with numpy targets and Python structures (dicts, lists,
dataclasses, NamedTuples), renames on load and convert, and saving
dataclass state. Torch modules and Flax TrainStates: tests/interop."""

import dataclasses
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
import pytest

import ckpt


def arange(*shape, dtype=np.float32, start=0):
    return (np.arange(int(np.prod(shape)), dtype=np.float64) + start).astype(dtype).reshape(shape)


def leaf_names(nest, name=""):
    if isinstance(nest, dict):
        return sorted(n for k, v in nest.items() for n in leaf_names(v, f"{name}.{k}" if name else str(k)))
    return [name]


@pytest.fixture
def saved(tmp_path):
    """An older checkpoint: encoder and head, a step."""
    state = {"model": {"encoder": {"w": arange(2, 3, start=1), "b": arange(3, start=10)},
                       "head": {"w": arange(3, 4, start=100)}},
             "step": 1200}
    path = tmp_path / "old.safetensors"
    ckpt.save(path, state)
    return path, state


def target_state():
    return {"model": {"encoder": {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)},
                      "head": {"w": np.zeros((3, 4), np.float32)}},
            "step": 0}


def test_strict_restore_fills_a_new_nest_and_leaves_the_target_alone(saved):
    path, state = saved
    target = target_state()
    report = ckpt.restore(target, path)
    assert report.ok and not report.missing and not report.unexpected
    assert report.restored == ["model.encoder.w", "model.encoder.b", "model.head.w", "step"]
    np.testing.assert_array_equal(report.tree["model"]["encoder"]["w"], state["model"]["encoder"]["w"])
    assert report.tree["step"] == 1200 and isinstance(report.tree["step"], int)
    assert isinstance(report.tree["model"]["head"]["w"], np.ndarray)
    assert not target["model"]["encoder"]["w"].any() and target["step"] == 0


def test_strict_mismatch_lists_every_problem_and_carries_the_report(saved):
    path, _ = saved
    target = target_state()
    target["model"]["encoder"]["w"] = np.zeros((3, 3), np.float32)  # shape
    target["model"]["encoder"]["b"] = np.zeros(3, np.float64)        # dtype
    del target["model"]["head"]                                      # unexpected head.w
    target["model"]["extra"] = np.zeros(1, np.float32)                # missing
    with pytest.raises(ckpt.MismatchError) as caught:
        ckpt.restore(target, path)
    text = str(caught.value)
    assert "4 problems" in text
    assert "missing (1): model.extra" in text
    assert "unexpected (1): model.head.w" in text
    assert "shape mismatched (1): model.encoder.w (checkpoint [2, 3] float32, target [3, 3] float32)" in text
    assert "dtype mismatched (1): model.encoder.b (checkpoint [3] float32, target [3] float64)" in text
    report = caught.value.report
    assert isinstance(report, ckpt.RestoreReport)
    assert report.shape_mismatched == ["model.encoder.w"] and report.dtype_mismatched == ["model.encoder.b"]


def test_non_strict_reports_and_never_applies_a_shape_mismatch(saved):
    path, state = saved
    target = target_state()
    target["model"]["encoder"]["w"] = np.full((3, 3), 7, np.float32)
    target["model"]["extra"] = np.ones(2, np.float32)
    del target["step"]
    report = ckpt.restore(target, path, strict=False)
    assert report.shape_mismatched == ["model.encoder.w"]
    assert report.missing == ["model.extra"]
    assert report.unexpected == ["step"]
    assert report.restored == ["model.encoder.b", "model.head.w"]
    assert not report.ok
    np.testing.assert_array_equal(report.tree["model"]["encoder"]["w"], np.full((3, 3), 7, np.float32))
    np.testing.assert_array_equal(report.tree["model"]["extra"], np.ones(2, np.float32))
    missing, unexpected = report  # unpacks like load_state_dict's result
    assert missing == ["model.extra"] and unexpected == ["step"]


def test_defaults_value_callable_and_keep_in_strict_mode(saved):
    path, _ = saved
    target = target_state()
    target["ema"] = {"w": np.full(2, 5, np.float32), "count": -1}
    target["loss_scale"] = 1.0
    target["rng"] = np.full(2, 9, np.uint32)
    calls = []
    report = ckpt.restore(target, path, defaults={
        "ema": {"w": np.full(2, 0.5, np.float32), "count": 0},
        "loss_scale": lambda: calls.append(1) or 128.0,
        "r?g": ckpt.KEEP})
    assert report.ok
    assert report.defaulted == ["ema.w", "ema.count", "loss_scale", "rng"]
    np.testing.assert_array_equal(report.tree["ema"]["w"], np.full(2, 0.5, np.float32))
    assert report.tree["ema"]["count"] == 0 and report.tree["loss_scale"] == 128.0 and calls == [1]
    np.testing.assert_array_equal(report.tree["rng"], np.full(2, 9, np.uint32))
    # A list of names keeps the target's values.
    report = ckpt.restore(target, path, defaults=["ema", "loss_scale", "rng"])
    assert report.tree["loss_scale"] == 1.0 and report.tree["ema"]["count"] == -1
    with pytest.raises(ckpt.MismatchError, match=r"missing \(4\)"):
        ckpt.restore(target, path)


def test_cast_matches_ml_dtypes_and_is_reported(tmp_path):
    values = np.array([1.0, -2.5, 3.14159, 65504.0, 1e-8, np.inf, np.nan], np.float32)
    path = tmp_path / "f32.safetensors"
    ckpt.save(path, {"w": values, "v": values.astype(np.float64)})
    target = {"w": np.zeros(7, ml_dtypes.bfloat16), "v": np.zeros(7, np.float16)}
    with pytest.raises(ckpt.MismatchError, match="dtype mismatched"):
        ckpt.restore(target, path)
    report = ckpt.restore(target, path, cast=True)
    assert report.cast == ["w", "v"] and report.restored == ["w", "v"]
    assert report.tree["w"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(report.tree["w"].view(np.uint16), values.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(report.tree["v"].view(np.uint16),
                                  values.astype(np.float64).astype(np.float16).view(np.uint16))
    report = ckpt.restore(target, path, cast={"float32": "bfloat16"}, strict=False)
    assert report.cast == ["w"] and report.dtype_mismatched == ["v"]


def test_rename_forms_and_ambiguity(saved, tmp_path):
    path, state = saved
    renamed = ckpt.load(path, rename={"model.encoder": "enc", "model.head": "lm"})
    assert set(renamed) == {"enc", "lm", "step"}
    np.testing.assert_array_equal(renamed["enc"]["w"], state["model"]["encoder"]["w"])
    steps = [("regex", r"^model\.(\w+)\.w$", r"\1_weight"), ("drop", "*.b"), ("add_prefix", "x")]
    assert leaf_names(ckpt.load(path, rename=steps)) == ["x.encoder_weight", "x.head_weight", "x.step"]
    # Order matters: a drop before the regex sees the old names, after it the new ones.
    assert leaf_names(ckpt.load(path, rename=[("drop", "*.w"), steps[0]])) == [
        "model.encoder.b", "step"]
    assert leaf_names(ckpt.load(path, rename=[steps[0], ("drop", "*.w")])) == [
        "encoder_weight", "head_weight", "model.encoder.b", "step"]
    assert leaf_names(ckpt.load(path, rename=[("table", {"step": "it", "model.head.w": "w"})])) == [
        "it", "model.encoder.b", "model.encoder.w", "w"]
    with pytest.raises(ValueError, match="model.encoder.w"):
        ckpt.load(path, rename={"model.encoder": "model.head"})
    with pytest.raises(ValueError, match="unknown rename step"):
        ckpt.load(path, rename=[("rot13", "a", "b")])
    out = tmp_path / "renamed.npz"
    assert ckpt.convert(path, out, rename=[("drop", "step"), ("strip_prefix", "model")]) == "npz"
    assert sorted(np.load(out).files) == ["encoder.b", "encoder.w", "head.w"]


def test_restore_renames_the_source_before_matching(saved):
    path, state = saved
    target = {"enc": {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}}
    report = ckpt.restore(target, path, rename={"model.encoder": "enc"}, strict=False)
    assert report.restored == ["enc.w", "enc.b"]
    assert report.unexpected == ["model.head.w", "step"]
    np.testing.assert_array_equal(report.tree["enc"]["b"], state["model"]["encoder"]["b"])


def test_prefix_and_only_restore_part_of_the_target(saved):
    path, _ = saved
    report = ckpt.restore(target_state(), path, prefix="model.encoder")
    assert report.restored == ["model.encoder.w", "model.encoder.b"] and report.ok
    assert not report.tree["model"]["head"]["w"].any() and report.tree["step"] == 0
    report = ckpt.restore(target_state(), path, only=["*.w"])
    assert report.restored == ["model.encoder.w", "model.head.w"]
    assert not report.tree["model"]["encoder"]["b"].any()


@dataclasses.dataclass(frozen=True)
class Optimizer:
    count: int
    mu: Any


class Moments(NamedTuple):
    mu: Any
    nu: Any


@dataclasses.dataclass
class State:
    step: int
    params: Any
    opt: Any


@dataclasses.dataclass
class Unmarked(State):
    ema: Any = None


@dataclasses.dataclass
class NewState(State):
    ema: Any = ckpt.field(default=None)
    scale: float = ckpt.field(default_factory=lambda: 2.0)


def test_dataclasses_and_namedtuples_save_and_restore_by_field_name(tmp_path):
    old = State(step=7, params={"w": arange(2, 2)},
                opt=(Optimizer(count=3, mu={"w": arange(2, 2, start=5)}), Moments(mu=arange(2), nu=arange(2, start=9))))
    path = tmp_path / "state.safetensors"
    ckpt.save(path, old)
    names = ckpt.inspect(path)["tensors"]
    assert {t["name"] for t in names} == {"params.w", "opt.0.mu.w", "opt.1.mu", "opt.1.nu"}

    blank = NewState(step=0, params={"w": np.zeros((2, 2), np.float32)},
                     opt=(Optimizer(count=0, mu={"w": np.zeros((2, 2), np.float32)}),
                          Moments(mu=np.zeros(2, np.float32), nu=np.zeros(2, np.float32))),
                     ema=np.ones(3, np.float32), scale=5.0)
    report = ckpt.restore(blank, path)
    assert report.defaulted == ["ema", "scale"]
    restored = report.tree
    assert type(restored) is NewState and type(restored.opt[0]) is Optimizer and type(restored.opt[1]) is Moments
    assert restored.step == 7 and restored.opt[0].count == 3
    assert restored.ema is None and restored.scale == 2.0
    np.testing.assert_array_equal(restored.opt[1].nu, old.opt[1].nu)
    assert blank.step == 0  # the target itself is not changed
    # Without the marker the new field is missing.
    with pytest.raises(ckpt.MismatchError, match=r"missing \(1\): ema"):
        ckpt.restore(Unmarked(step=0, params=blank.params, opt=blank.opt), path)


def test_spec_targets_and_raw_restore(saved):
    path, state = saved
    spec = {"model": {"head": {"w": ckpt.TensorSpec((3, 4), "float32")}}}
    report = ckpt.restore(spec, path, prefix="model.head")
    np.testing.assert_array_equal(report.tree["model"]["head"]["w"], state["model"]["head"]["w"])
    bad = {"model": {"head": {"w": ckpt.TensorSpec((4, 4), "float32")}}}
    report = ckpt.restore(bad, path, prefix="model.head", strict=False)
    assert report.shape_mismatched == ["model.head.w"]
    assert isinstance(report.tree["model"]["head"]["w"], ckpt.TensorSpec)

    raw = ckpt.restore(None, path)
    assert raw.restored == ["model.encoder.w", "model.encoder.b", "model.head.w", "step"]
    assert raw.tree["step"] == 1200
    raw = ckpt.restore(None, path, prefix="model.head")
    assert list(raw.tree) == ["model"] and list(raw.tree["model"]) == ["head"]


def test_sources_can_be_nests_and_open_checkpoints(saved):
    path, state = saved
    assert ckpt.restore(target_state(), state).ok
    with ckpt.open(path) as handle:
        assert ckpt.restore(target_state(), handle).ok


def test_scalar_leaves_convert_where_exact(tmp_path):
    path = tmp_path / "s.safetensors"
    ckpt.save(path, {"step": np.array(77, np.int32), "lr": 1, "count": 5, "flag": True})
    target = {"step": 0, "lr": 0.5, "count": np.int16(0), "flag": 1.0}
    report = ckpt.restore(target, path, strict=False)
    assert report.tree["step"] == 77 and type(report.tree["step"]) is int
    assert report.tree["lr"] == 1.0 and type(report.tree["lr"]) is float
    assert report.tree["count"] == 5 and report.tree["count"].dtype == np.int16
    assert report.dtype_mismatched == ["flag"]


def test_tied_arrays_are_stored_once_and_come_back_as_one_array(tmp_path):
    shared = arange(256, 256)  # 256 KiB
    path = tmp_path / "tied.safetensors"
    ckpt.save(path, {"embed": shared, "lm_head": shared, "other": arange(2)})
    assert path.stat().st_size < shared.nbytes * 3 // 2
    loaded = ckpt.load(path)
    assert loaded["embed"] is loaded["lm_head"]
    np.testing.assert_array_equal(loaded["lm_head"], shared)
    with ckpt.open(path) as handle:
        assert handle.keys() == ["embed", "other", "lm_head"] and len(handle) == 3 and "lm_head" in handle
        assert handle.info("lm_head")["shape"] == (256, 256)
        np.testing.assert_array_equal(handle.get("lm_head"), shared)
    # Restoring into tied targets keeps them filled from the one stored copy.
    target = {"embed": np.zeros((256, 256), np.float32), "lm_head": np.zeros((256, 256), np.float32),
              "other": np.zeros(2, np.float32)}
    report = ckpt.restore(target, path)
    assert report.ok and report.tree["embed"] is report.tree["lm_head"]


# ------------------------------------------------------------------ dotted keys

def dotted_state():
    """Two leaves whose dotted names collide: tree.h names the second one
    with an escape ("a.b" and "a.b\\#1"); each must land in its own place."""
    return {"a.b": arange(2, start=1), "a": {"b": arange(3, start=10), "c": arange(1, start=20)}}


def zeros_like_nest(nest):
    return {k: zeros_like_nest(v) if isinstance(v, dict) else np.zeros_like(v) for k, v in nest.items()}


def test_dotted_keys_restore_each_leaf_into_its_own_place(tmp_path):
    state = dotted_state()
    path = tmp_path / "dotted.safetensors"
    ckpt.save(path, state)
    target = zeros_like_nest(state)
    for source in (path, state):
        report = ckpt.restore(target, source)
        assert report.ok and len(report.restored) == 3
        np.testing.assert_array_equal(report.tree["a.b"], state["a.b"])
        np.testing.assert_array_equal(report.tree["a"]["b"], state["a"]["b"])
        np.testing.assert_array_equal(report.tree["a"]["c"], state["a"]["c"])
    assert not target["a"]["b"].any()


def test_defaults_under_dotted_keys_are_found_by_key(tmp_path):
    path = tmp_path / "old.safetensors"
    ckpt.save(path, {"a.b": arange(2, start=1), "a": {"c": arange(1, start=20)}})  # a.b (the nested one) is new
    target = zeros_like_nest(dotted_state())
    report = ckpt.restore(target, path, defaults={"a": {"b": np.full(3, 7, np.float32)}})
    assert len(report.defaulted) == 1 and report.ok
    np.testing.assert_array_equal(report.tree["a.b"], arange(2, start=1))
    np.testing.assert_array_equal(report.tree["a"]["b"], np.full(3, 7, np.float32))
    np.testing.assert_array_equal(report.tree["a"]["c"], arange(1, start=20))
    # Everything under "a" new: None takes the field's place whole.
    ckpt.save(path, {"a.b": arange(2, start=1)})
    report = ckpt.restore(target, path, defaults={"a": None})
    assert len(report.defaulted) == 2 and report.tree["a"] is None
    np.testing.assert_array_equal(report.tree["a.b"], arange(2, start=1))


@dataclasses.dataclass
class Run:
    w: Any
    ema: Any = ckpt.field(default=None)


def test_field_markers_under_dotted_keys_cover_their_own_field(tmp_path):
    # "r.ema" is both a key and the path to Run.ema: the marker covers the field.
    path = tmp_path / "run.safetensors"
    ckpt.save(path, {"r.ema": arange(2, start=1), "r": {"w": arange(2, start=5)}})
    target = {"r.ema": np.zeros(2, np.float32), "r": Run(w=np.zeros(2, np.float32), ema=np.ones(3, np.float32))}
    report = ckpt.restore(target, path)
    assert report.ok and len(report.defaulted) == 1
    np.testing.assert_array_equal(report.tree["r.ema"], arange(2, start=1))
    assert type(report.tree["r"]) is Run and report.tree["r"].ema is None
    np.testing.assert_array_equal(report.tree["r"].w, arange(2, start=5))


def test_defaults_are_taken_only_when_needed_and_come_back_as_given(saved):
    path, _ = saved
    target = target_state()
    target["extra"] = np.zeros(2, np.float32)
    given = np.full(2, 3, np.float32)
    report = ckpt.restore(target, path, defaults={
        "step": object(),        # never needed: never converted
        "model": lambda: 1 / 0,  # never needed: never called
        "extra": given})
    assert report.defaulted == ["extra"] and report.tree["extra"] is given
    with pytest.raises(ZeroDivisionError):
        ckpt.restore(target, path, defaults={"extra": lambda: 1 / 0})
