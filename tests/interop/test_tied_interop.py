"""Tied weights (lm_head.weight = embed.weight) through ckpt and the real
torch, huggingface safetensors and numpy.

ckpt stores the tied bytes once where the format can (safetensors with
extras: an alias in ckpt's metadata; npz with extras: an alias in the zip
archive comment; torch: one shared storage) and loads them back tied; plain
safetensors and npz files (extras=False) hold one copy per name
(docs/formats/safetensors.md and docs/formats/numpy.md, "Tied tensors")."""

import json
import zipfile

import numpy as np
import pytest
import safetensors.torch
import torch
from torch import nn

import ckpt

from conftest import raw_safetensors

VOCAB, DIM = 512, 64
TIED_BYTES = VOCAB * DIM * 4  # float32: 128 KiB, so the file size tells how often the bytes are there
NAMES = ["embed.weight", "norm.weight", "norm.bias", "lm_head.weight"]


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight


def tied_model(seed=0):
    torch.manual_seed(seed)
    model = TiedLM()
    with torch.no_grad():
        model.norm.weight.normal_()  # not the default ones: every tensor distinct
        model.norm.bias.normal_()
    return model


def assert_same_values(loaded, model):
    expected = model.state_dict()
    assert sorted(loaded) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(torch.as_tensor(loaded[name]), tensor), name


def assert_tied(a, b):
    assert a.data_ptr() == b.data_ptr()
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    before = b[0, 0].item()
    a[0, 0] = before + 1.0  # loaded torch tensors are writable (copy on write): the write shows through both
    assert b[0, 0].item() == before + 1.0


def test_the_state_dict_is_tied():
    state = tied_model().state_dict()
    assert list(state) == NAMES
    assert state["embed.weight"].data_ptr() == state["lm_head.weight"].data_ptr()


@pytest.mark.parametrize("ext", [".safetensors", ".pt", ".npz"])
@pytest.mark.parametrize("lazy", [True, False])
def test_tied_bytes_are_stored_once_and_load_tied(tmp_path, ext, lazy):
    model = tied_model()
    path = tmp_path / f"model{ext}"
    ckpt.save(path, model.state_dict())
    assert TIED_BYTES <= path.stat().st_size < 2 * TIED_BYTES
    loaded = ckpt.load(path, framework="torch", lazy=lazy)
    assert_same_values(loaded, model)
    assert_tied(loaded["embed.weight"], loaded["lm_head.weight"])
    assert loaded["norm.weight"].data_ptr() != loaded["norm.bias"].data_ptr()


def test_numpy_sees_the_stored_arrays_of_an_npz_only(tmp_path):
    """The alias lives in the archive comment, which np.load and zipfile
    do not read as a member."""
    model = tied_model()
    state = model.state_dict()
    path = tmp_path / "model.npz"
    ckpt.save(path, state)
    with np.load(path) as arrays:
        assert sorted(arrays.files) == ["embed.weight", "norm.bias", "norm.weight"]
        for name in arrays.files:
            assert np.array_equal(arrays[name], state[name].numpy()), name
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == ["embed.weight.npy", "norm.weight.npy", "norm.bias.npy"]
        assert archive.comment == b'ckpt:{"version":1,"aliases":{"lm_head.weight":"embed.weight"}}'
    loaded = ckpt.load(path, framework="torch")
    assert list(loaded) == NAMES  # the alias comes after the stored arrays; here it is last anyway
    assert_same_values(loaded, model)
    assert_tied(loaded["embed.weight"], loaded["lm_head.weight"])


def test_plain_npz_holds_a_copy_per_name(tmp_path):
    """extras=False: no comment, every name its own member, byte-identical to
    np.savez of the copies; loaded back untied."""
    model = tied_model()
    path = tmp_path / "plain.npz"
    ckpt.save(path, model.state_dict(), extras=False)
    assert path.stat().st_size >= 2 * TIED_BYTES
    with np.load(path) as arrays:
        assert sorted(arrays.files) == sorted(NAMES)
        for name, tensor in model.state_dict().items():
            assert np.array_equal(arrays[name], tensor.numpy()), name
    with zipfile.ZipFile(path) as archive:
        assert archive.comment == b""
    reference = tmp_path / "reference.npz"
    np.savez(reference, **{name: tensor.numpy() for name, tensor in model.state_dict().items()})
    assert path.read_bytes() == reference.read_bytes()
    loaded = ckpt.load(path, framework="torch")
    assert_same_values(loaded, model)
    assert loaded["embed.weight"].data_ptr() != loaded["lm_head.weight"].data_ptr()


def test_safetensors_readers_see_the_stored_tensor_only(tmp_path):
    model = tied_model()
    path = tmp_path / "model.safetensors"
    ckpt.save(path, model.state_dict())
    tensors, metadata = raw_safetensors(path)
    assert sorted(tensors) == ["embed.weight", "norm.bias", "norm.weight"]
    extras = json.loads(metadata["ckpt"])
    assert extras["version"] == 2
    assert extras["aliases"] == {"lm_head.weight": "embed.weight"}
    assert sorted(extras["checksums"]) == sorted(tensors)
    plain = safetensors.torch.load_file(str(path))
    assert sorted(plain) == sorted(tensors)
    assert torch.equal(plain["embed.weight"], model.embed.weight.detach())


def test_huggingface_load_model_accepts_the_file(tmp_path):
    """safetensors.torch.load_model tolerates names missing from the file when
    the model ties them to names that are present (_remove_duplicate_names)."""
    model = tied_model(seed=1)
    path = tmp_path / "model.safetensors"
    ckpt.save(path, model.state_dict())
    fresh = tied_model(seed=2)
    assert not torch.equal(fresh.embed.weight, model.embed.weight)
    missing, unexpected = safetensors.torch.load_model(fresh, str(path))
    assert not missing and not unexpected
    assert fresh.lm_head.weight is fresh.embed.weight
    for name, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], tensor), name


def test_huggingface_save_model_and_ckpt_agree_on_what_is_stored(tmp_path):
    model = tied_model()
    ours, theirs = tmp_path / "ckpt.safetensors", tmp_path / "hf.safetensors"
    ckpt.save(ours, model.state_dict())
    safetensors.torch.save_model(model, str(theirs))
    our_tensors, _ = raw_safetensors(ours)
    their_tensors, _ = raw_safetensors(theirs)
    assert sorted(our_tensors) == sorted(their_tensors)
    for name, (dtype, shape, data) in their_tensors.items():
        assert our_tensors[name] == (dtype, shape, data), name


def test_plain_safetensors_holds_a_copy_per_name(tmp_path):
    """extras=False: huggingface's save_file refuses shared tensors; ckpt
    writes each name, so every plain reader sees every name."""
    model = tied_model()
    with pytest.raises(RuntimeError):
        safetensors.torch.save_file(model.state_dict(), str(tmp_path / "refused.safetensors"))
    path = tmp_path / "plain.safetensors"
    ckpt.save(path, model.state_dict(), extras=False)
    assert path.stat().st_size >= 2 * TIED_BYTES
    plain = safetensors.torch.load_file(str(path))
    assert_same_values(plain, model)
    # Byte-identical to huggingface's writer given the copies.
    reference = tmp_path / "reference.safetensors"
    safetensors.torch.save_file({k: v.clone() for k, v in model.state_dict().items()}, str(reference))
    assert path.read_bytes() == reference.read_bytes()


def test_torch_load_sees_one_storage(tmp_path):
    model = tied_model()
    path = tmp_path / "model.pt"
    ckpt.save(path, model.state_dict())
    state = torch.load(path, weights_only=True)
    assert_same_values(state, model)
    assert state["embed.weight"].untyped_storage().data_ptr() == state["lm_head.weight"].untyped_storage().data_ptr()
    fresh = tied_model(seed=3)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.lm_head.weight, model.lm_head.weight)


@pytest.mark.parametrize("ext", [".safetensors", ".pt", ".npz"])
def test_saving_what_was_loaded_gives_the_same_file(tmp_path, ext):
    model = tied_model()
    first, second = tmp_path / f"a{ext}", tmp_path / "again" / f"a{ext}"
    second.parent.mkdir()
    ckpt.save(first, model.state_dict())
    ckpt.save(second, ckpt.load(first, framework="torch"))
    assert second.read_bytes() == first.read_bytes()
