"""Module files and preloads from Python, on real torch modules: which
parameter goes to which file (checked against the rule written out here,
the deepest assigned module), the files saved as one manager commit and
loaded back into a fresh model, a frozen module's file hard-linked, init-only
parameters in no file, and every preload option with torch.save'd and
ckpt-managed sources. Expected values come from torch here.

Run: .venv/bin/python -m pytest tests/python/test_modules.py -q
"""

import os

import numpy as np
import pytest
import torch
from torch import nn

import ckpt


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.norm = nn.LayerNorm(4)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.lm = nn.Linear(3, 3)


class Model(nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.out = nn.Linear(3, 2)
        self.register_buffer("steps", torch.tensor(7))


FILES = {"encoder": "encoder.safetensors", "encoder.layers.1": "layer1.safetensors",
         "decoder.lm": "lm.safetensors"}


def expected_file(name, files, init_only=(), main="state"):
    """The rule, written out: init-only wins; else the deepest module that
    owns the name at a dot boundary; else the main file."""
    owns = lambda module: name == module or name.startswith(module + ".")
    if any(owns(entry) for entry in init_only):
        return None
    owners = [module for module in files if owns(module)]
    return files[max(owners, key=len)] if owners else main


def test_split_follows_the_deepest_module():
    state = Model().state_dict()
    parts = ckpt.split_by_module(state, files=FILES)
    assert list(parts) == ["state", "encoder.safetensors", "layer1.safetensors", "lm.safetensors"]
    for name, tensor in state.items():
        file = expected_file(name, FILES)
        assert name in parts[file], (name, file)
        assert torch.equal(parts[file][name], tensor)
        assert isinstance(parts[file][name], torch.Tensor)
        assert ckpt.module_file_of(name, FILES) == file
    assert sum(len(p) for p in parts.values()) == len(state)
    assert "encoder.layers.1.weight" in parts["layer1.safetensors"]
    assert "encoder.layers.1.weight" not in parts["encoder.safetensors"]  # excluded from the parent


def test_init_only_goes_nowhere_and_several_roots():
    lm = nn.Linear(3, 3)
    state = {**{f"model.{k}": v for k, v in Model().state_dict().items()},
             **{f"pretrained_lm.{k}": v for k, v in lm.state_dict().items()}}
    files = {"model.encoder": "encoder", "model.decoder": "decoder"}
    parts = ckpt.split_by_module(state, files=files, init_only=["pretrained_lm", "model.out.bias"])
    saved = {name for part in parts.values() for name in part}
    assert not any(name.startswith("pretrained_lm.") for name in saved)
    assert "model.out.bias" not in saved and "model.out.weight" in parts["state"]
    for name in saved:
        assert expected_file(name, files, ["pretrained_lm", "model.out.bias"]) in parts
    assert ckpt.module_file_of("pretrained_lm.weight", files, init_only=["pretrained_lm"]) is None


def test_split_refusals_name_the_culprit():
    state = Model().state_dict()
    with pytest.raises(ValueError, match="encodr"):
        ckpt.split_by_module(state, files={"encodr": "e.safetensors"})
    with pytest.raises(ValueError, match="a/b"):
        ckpt.split_by_module(state, files={"encoder": "a/b"})
    with pytest.raises(ValueError, match="nothing_here"):
        ckpt.split_by_module(state, init_only=["nothing_here"])
    with pytest.raises(ValueError):
        ckpt.split_by_module({"xs": [np.zeros(2), np.ones(2)]}, files={"xs.1": "one"})  # a list divided


def test_merge_reports_files_problems():
    state = Model().state_dict()
    parts = ckpt.split_by_module(state, files=FILES)
    report = ckpt.merge_module_files(parts, files=FILES, order_like=state)
    assert report.ok and report.summary == "" and report.details == []
    assert list(report.state) == list(state)
    for name, tensor in state.items():
        assert torch.equal(report.state[name], tensor)

    bad = dict(parts)
    bad["state"] = dict(parts["state"], **{"encoder.norm.weight": state["encoder.norm.weight"]})  # also in encoder
    del bad["lm.safetensors"]
    moved = dict(bad["encoder.safetensors"])
    moved["decoder.proj.bias"] = bad["state"].pop("decoder.proj.bias")  # in the wrong file
    bad["encoder.safetensors"] = moved
    report = ckpt.merge_module_files(bad, files=FILES)
    assert not report.ok
    assert report.in_two_files == ["encoder.norm.weight"]
    # the copy in the main file is also in a file its module is not assigned to
    assert sorted(report.wrong_file) == ["decoder.proj.bias", "encoder.norm.weight"]
    assert report.missing_files == ["lm.safetensors"]
    assert len(report.details) == 4 and "lm.safetensors" in report.summary
    with pytest.raises(ValueError, match="lm.safetensors"):
        report.raise_if_problems()


def part_name(file):
    return file.split(".")[0]


def test_files_saved_as_one_commit_and_a_frozen_module_linked(tmp_path):
    model = Model()
    with ckpt.Manager(tmp_path / "run") as manager:
        for step in (1, 2):
            parts = ckpt.split_by_module(model.state_dict(), files=FILES, main_file="state.safetensors")
            manager.save(step, parts={part_name(f): p for f, p in parts.items()}, metrics={"loss": 1.0 / step})
            expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
            with torch.no_grad():
                model.decoder.proj.weight.add_(1.0)  # the encoder stays frozen
        entries = manager.list()
    assert [e.step for e in entries] == [1, 2]
    first, second = ({os.path.basename(p): p for p in e.parts} for e in entries)
    assert sorted(second) == ["encoder.safetensors", "layer1.safetensors", "lm.safetensors", "state.safetensors"]
    for name in ("encoder.safetensors", "layer1.safetensors", "lm.safetensors"):  # unchanged: linked
        assert os.stat(first[name]).st_ino == os.stat(second[name]).st_ino
    assert os.stat(first["state.safetensors"]).st_ino != os.stat(second["state.safetensors"]).st_ino

    # Back, file by file, into a fresh model (torch's own load_state_dict, strict).
    loaded = {os.path.basename(p): ckpt.load(p, framework="torch") for p in entries[1].parts}
    report = ckpt.merge_module_files(loaded, files=FILES, main_file="state.safetensors")
    assert report.ok, report.summary
    fresh = Model(seed=1)
    fresh.load_state_dict(report.state, strict=True)
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    # The manager's own load is the union of the parts.
    union = ckpt.Manager(tmp_path / "run", read_only=True).load(2, framework="torch")
    assert sorted(union) == sorted(expected)


def test_manager_parts_arguments(tmp_path):
    with ckpt.Manager(tmp_path / "run") as manager:
        with pytest.raises(ValueError, match="not both"):
            manager.save(1, {"a": np.zeros(2)}, parts={"state": {"b": np.zeros(2)}})
        with pytest.raises(ValueError):
            manager.save(1, parts={})
        with pytest.raises(ValueError, match="a.b"):
            manager.save(1, parts={"a.b": {"w": np.zeros(2)}})
        manager.save(1, {"w": np.zeros(2)})
        assert manager.latest().parts == []


# ------------------------------------------------------------------ preloads

@pytest.fixture
def pretrained(tmp_path):
    """A "pretraining" run's checkpoint as RETURNN's torch engine writes it:
    torch.save({"model": state_dict, "epoch": ...})."""
    source = Model(seed=5)
    path = tmp_path / "pretrain.pt"
    torch.save({"model": source.state_dict(), "epoch": 3}, path)
    return path, source.state_dict()


def encoder_names(state):
    return [name for name in state if name.startswith("encoder.")]


def test_preload_fresh_sets_the_encoder_only(pretrained):
    path, source = pretrained
    model = Model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    preload = ckpt.Preload(path, name="enc", prefix={"encoder.": "encoder."}, checkpoint_key="model")
    report = ckpt.apply_preloads(model.state_dict(), [preload], stage="fresh")
    model.load_state_dict(report.state)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, source[name] if name.startswith("encoder.") else before[name]), name
    (result,) = report.preloads
    assert result.applied and result.name == "enc" and result.source == str(path)
    assert sorted(t for t, _ in result.set) == sorted(encoder_names(source))
    assert all(t == s for t, s in result.set)
    assert report.init_only == []
    # A resumed run: a fresh-only preload never overwrites it; nothing read.
    again = ckpt.apply_preloads(model.state_dict(), [preload], stage="continue")
    assert not again.preloads[0].applied and again.preloads[0].source is None


def test_preload_always_is_init_only_and_not_training(pretrained):
    path, source = pretrained
    always = ckpt.Preload(filename=path, prefix={"decoder.lm.": "decoder.lm."}, checkpoint_key="model",
                          init_for_train="always")
    search = ckpt.Preload(path, prefix={"out.": "out."}, checkpoint_key="model", init_for_train=False)
    for stage, applied in (("fresh", [True, False]), ("continue", [True, False]), ("not_training", [True, True])):
        report = ckpt.apply_preloads(Model().state_dict(), [always, search], stage=stage)
        assert [r.applied for r in report.preloads] == applied, stage
        assert sorted(report.init_only) == ["decoder.lm.bias", "decoder.lm.weight"]
        assert torch.equal(report.state["decoder.lm.weight"], source["decoder.lm.weight"])


def test_returnn_options(pretrained, tmp_path):
    path, source = pretrained
    # RETURNN's single prefix: target "lm_copy." + source name; here with a flat source of the lm only.
    flat = tmp_path / "lm.safetensors"
    ckpt.save(flat, {"weight": source["decoder.lm.weight"], "bias": source["decoder.lm.bias"]})
    target = {"lm_copy.weight": torch.zeros(3, 3), "lm_copy.bias": torch.zeros(3), "other": torch.ones(2)}
    preloads = ckpt.Preload.from_returnn({"lm": {"filename": str(flat), "prefix": "lm_copy.",
                                                 "init_for_train": True}})
    report = ckpt.apply_preloads(target, preloads)
    assert torch.equal(report.state["lm_copy.weight"], source["decoder.lm.weight"])
    assert torch.equal(report.state["other"], torch.ones(2))
    # var_name_mapping, ignore_params, ignore_missing
    mapped = ckpt.Preload(path, checkpoint_key="model", prefix={"encoder.layers.0.": "encoder.layers.0."},
                          var_name_mapping={"out.weight": "decoder.lm.weight"}, ignore_params=["encoder.layers.0.bias"])
    state = {"encoder.layers.0.weight": torch.zeros(4, 4), "encoder.layers.0.bias": torch.zeros(4),
             "out.weight": torch.zeros(3, 3)}
    report = ckpt.apply_preloads(state, [mapped])
    assert torch.equal(report.state["out.weight"], source["decoder.lm.weight"])
    assert torch.equal(report.state["encoder.layers.0.weight"], source["encoder.layers.0.weight"])
    assert torch.equal(report.state["encoder.layers.0.bias"], torch.zeros(4))
    assert report.preloads[0].ignored == ["encoder.layers.0.bias"]
    missing = dict(state, **{"encoder.layers.0.extra": torch.zeros(1)})
    with pytest.raises(FileNotFoundError, match="encoder.layers.0.extra"):
        ckpt.apply_preloads(missing, [mapped])
    lenient = ckpt.Preload(path, checkpoint_key="model", prefix={"encoder.layers.0.": "encoder.layers.0."},
                           ignore_missing=True)
    report = ckpt.apply_preloads(missing, [lenient])
    assert report.preloads[0].missing == ["encoder.layers.0.extra"]


def test_preload_errors(pretrained, tmp_path):
    path, source = pretrained
    state = Model().state_dict()
    with pytest.raises(FileNotFoundError, match="nothing_like_this"):
        ckpt.apply_preloads(state, [ckpt.Preload(path, checkpoint_key="model", prefix={"nothing_like_this.": "x."})])
    with pytest.raises(FileNotFoundError, match="optimizer"):
        ckpt.apply_preloads(state, [ckpt.Preload(path, checkpoint_key="optimizer")])
    enc = ckpt.Preload(path, checkpoint_key="model", prefix={"encoder.": "encoder."})
    with pytest.raises(ValueError, match="encoder"):
        ckpt.apply_preloads(state, [enc, enc])
    report = ckpt.apply_preloads(state, [enc, ckpt.Preload(path, checkpoint_key="model", overrides=True,
                                                           prefix={"encoder.norm.": "encoder.norm."})])
    assert sorted(report.preloads[1].overridden) == ["encoder.norm.bias", "encoder.norm.weight"]
    wide = tmp_path / "wide.safetensors"
    ckpt.save(wide, {"encoder.norm.weight": np.zeros(5, np.float32)})
    with pytest.raises(ckpt.MismatchError, match="encoder.norm.weight"):
        ckpt.apply_preloads(state, [ckpt.Preload(wide, ignore_missing=True)])
    with pytest.raises(FileNotFoundError):
        ckpt.apply_preloads(state, [ckpt.Preload(tmp_path / "absent.pt")])
    with pytest.raises(ValueError, match="init_for_train"):
        ckpt.Preload(path, init_for_train="sometimes")
    with pytest.raises(ValueError, match="not both"):
        ckpt.Preload(path, filename=path)
    with pytest.raises(ValueError, match="stage"):
        ckpt.apply_preloads(state, [enc], stage="continued_somehow")
    # All or nothing: the state given is untouched by a failed call.
    assert torch.equal(state["encoder.norm.weight"], Model().state_dict()["encoder.norm.weight"])


def test_preload_from_a_run_directory_takes_its_latest(tmp_path):
    with ckpt.Manager(tmp_path / "pre") as manager:
        for step in (1, 2):
            manager.save(step, {"encoder.norm.weight": torch.full((4,), float(step)),
                                "encoder.norm.bias": torch.zeros(4)})
    state = Model().state_dict()
    report = ckpt.apply_preloads(state, [ckpt.Preload(tmp_path / "pre", prefix={"encoder.norm.": "encoder.norm."})])
    assert torch.equal(report.state["encoder.norm.weight"], torch.full((4,), 2.0))
    latest = ckpt.Manager(tmp_path / "pre", read_only=True).latest()
    assert latest.step == 2 and report.preloads[0].source == latest.path


def test_flax_params_tree_by_module(tmp_path):
    """A real Flax model's nested params tree: a module is a prefix of it
    ("params.encoder"), its subtree goes to its file, and the files come back
    to the same tree (jax arrays become numpy arrays)."""
    jax = pytest.importorskip("jax")
    nn_flax = pytest.importorskip("flax.linen")

    class Encoder(nn_flax.Module):
        @nn_flax.compact
        def __call__(self, x):
            return nn_flax.Dense(4)(nn_flax.Dense(4)(x))

    class Net(nn_flax.Module):
        @nn_flax.compact
        def __call__(self, x):
            return nn_flax.Dense(2, name="head")(Encoder(name="encoder")(x))

    variables = Net().init(jax.random.PRNGKey(0), np.zeros((1, 3), np.float32))
    tree = jax.tree_util.tree_map(np.asarray, jax.device_get(dict(variables)))
    tree = {"params": {k: dict(v) for k, v in tree["params"].items()}}
    parts = ckpt.split_by_module(tree, files={"params.encoder": "encoder"})
    assert list(parts) == ["state", "encoder"]
    assert list(parts["encoder"]["params"]) == ["encoder"]
    assert list(parts["state"]["params"]) == ["head"]
    with ckpt.Manager(tmp_path / "run") as manager:
        manager.save(1, parts=parts)
        entry = manager.latest()
    loaded = {os.path.basename(p).split(".")[0]: ckpt.load(p) for p in entry.parts}
    report = ckpt.merge_module_files(loaded, files={"params.encoder": "encoder"}, order_like=tree)
    assert report.ok, report.summary
    flat_in = jax.tree_util.tree_leaves_with_path(tree)
    flat_out = dict(jax.tree_util.tree_leaves_with_path(report.state))
    assert len(flat_in) == len(flat_out)
    for path, value in flat_in:
        np.testing.assert_array_equal(flat_out[path], value)
