"""Weight norm's checkpoint converters against real torch modules: fold
equals the weight torch computes (torch.nn.utils.weight_norm and
torch.nn.utils.parametrizations.weight_norm), unfold loads into a
weight-normed module with strict=True and gives the plain module's output,
old <-> new names load into torch's modules, and the CLI flags on .pt files
written by torch.save and read back by torch.load. Every expected value is
computed by torch here.

Run: CKPT_TOOL=build/ckpt .venv/bin/python -m pytest tests/python/test_weight_norm.py -q
"""

import json
import os
import pathlib
import subprocess
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize

import ckpt

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("CKPT_TOOL", str(ROOT / "build" / "ckpt"))

# (module factory, input shape)
MODULES = {
    "linear": (lambda: nn.Linear(5, 4), (3, 5)),
    "conv1d": (lambda: nn.Conv1d(3, 6, 4), (2, 3, 9)),
}
DIMS = [0, 1, None, -1, -2]


def old_weight_norm(module, dim):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated in favour of parametrizations
        return nn.utils.weight_norm(module, dim=dim)


def new_weight_norm(module, dim):
    return parametrizations.weight_norm(module, dim=dim)


APPLY = {"old": old_weight_norm, "new": new_weight_norm}


def randomized(module):
    """g away from ||v||, so that the weight is not v."""
    torch.manual_seed(3)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            parameter.mul_(torch.rand_like(parameter) + 0.5)
    return module


@pytest.mark.parametrize("kind", sorted(MODULES))
@pytest.mark.parametrize("style", ["old", "new"])
@pytest.mark.parametrize("dim", DIMS)
def test_fold_equals_torch(kind, style, dim):
    torch.manual_seed(0)
    make, shape = MODULES[kind]
    module = randomized(APPLY[style](make(), dim))
    x = torch.randn(shape)
    expected_out = module(x).detach()  # the old style recomputes its weight here
    expected = module.weight.detach().clone()
    folded = ckpt.fold_weight_norm(module.state_dict())
    assert sorted(folded) == ["bias", "weight"]
    assert isinstance(folded["weight"], torch.Tensor)
    torch.testing.assert_close(folded["weight"], expected, rtol=1e-6, atol=1e-6)
    plain = make()
    plain.load_state_dict(folded, strict=True)
    torch.testing.assert_close(plain(x), expected_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", sorted(MODULES))
@pytest.mark.parametrize("style", ["old", "new"])
@pytest.mark.parametrize("dim", DIMS)
def test_unfold_loads_into_weight_normed_module(kind, style, dim):
    torch.manual_seed(1)
    make, shape = MODULES[kind]
    plain = make()
    x = torch.randn(shape)
    expected_out = plain(x).detach()
    unfolded = ckpt.unfold_weight_norm(plain.state_dict(), dim=dim, names=style)
    normed = APPLY[style](make(), dim)
    reference = normed.state_dict()
    assert sorted(unfolded) == sorted(reference)
    for name, value in reference.items():
        assert tuple(unfolded[name].shape) == tuple(value.shape), name
    normed.load_state_dict(unfolded, strict=True)
    out = normed(x)  # old: the forward pre-hook recomputes the weight from the loaded g, v
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-6)
    # g as torch's own right_inverse computes it from w.
    g_name = "weight_g" if style == "old" else "parametrizations.weight.original0"
    torch.testing.assert_close(unfolded[g_name],
                               torch.norm_except_dim(plain.weight.detach(), 2, -1 if dim is None else dim),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim", DIMS)
def test_old_and_new_names_load_into_the_other(dim):
    torch.manual_seed(2)
    old = randomized(old_weight_norm(nn.Conv1d(2, 3, 4), dim))
    new = randomized(new_weight_norm(nn.Conv1d(2, 3, 4), dim))
    as_new = ckpt.convert_weight_norm_names(old.state_dict(), to="new")
    target_new = new_weight_norm(nn.Conv1d(2, 3, 4), dim)
    target_new.load_state_dict(as_new, strict=True)
    for name, value in old.state_dict().items():
        converted = name.replace("weight_g", "parametrizations.weight.original0").replace(
            "weight_v", "parametrizations.weight.original1")
        torch.testing.assert_close(target_new.state_dict()[converted], value, rtol=0, atol=0)
    as_old = ckpt.convert_weight_norm_names(new.state_dict(), to="old")
    target_old = old_weight_norm(nn.Conv1d(2, 3, 4), dim)
    # torch's new weight_norm has a load hook that renames old keys itself; the
    # old one has none: strict loading needs exactly its names.
    target_old.load_state_dict(as_old, strict=True)
    x = torch.randn(1, 2, 8)
    torch.testing.assert_close(target_old(x), new(x), rtol=1e-5, atol=1e-6)


def test_returnn_common_names_round_trip():
    torch.manual_seed(4)
    module = randomized(new_weight_norm(nn.Linear(5, 4), 0))
    state = module.state_dict()
    rc = ckpt.convert_weight_norm_names(state, to="returnn_common")
    assert sorted(rc) == ["bias", "weight_normalized.g", "weight_normalized.v"]
    assert tuple(rc["weight_normalized.g"].shape) == (4,)  # returnn_common's g is 1-d
    back = ckpt.convert_weight_norm_names(rc, to="new")
    target = new_weight_norm(nn.Linear(5, 4), 0)
    target.load_state_dict(back, strict=True)
    for name, value in state.items():
        assert torch.equal(target.state_dict()[name], value), name
    # returnn_common's norm has eps = 1e-6 under the root: w differs by about eps / (2 ||v||^2).
    folded = ckpt.fold_weight_norm(rc)
    torch.testing.assert_close(folded["weight"], module.weight.detach(), rtol=1e-5, atol=1e-6)


def test_numpy_state_and_dtypes():
    torch.manual_seed(5)
    module = randomized(new_weight_norm(nn.Linear(6, 3), 0))
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    folded = ckpt.fold_weight_norm(state)
    assert isinstance(folded["weight"], np.ndarray)
    np.testing.assert_allclose(folded["weight"], module.weight.detach().numpy(), rtol=1e-6, atol=1e-6)
    for dtype in [torch.float16, torch.bfloat16, torch.float64]:
        half = {k: v.detach().to(dtype) for k, v in module.state_dict().items()}
        result = ckpt.fold_weight_norm(half)["weight"]
        assert result.dtype == dtype
        # torch computes in the low dtype (float accumulation); ckpt in float64, rounded once.
        expected = torch._weight_norm(half["parametrizations.weight.original1"],
                                      half["parametrizations.weight.original0"], 0)
        tolerance = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}[dtype]
        torch.testing.assert_close(result.double(), expected.double(), rtol=tolerance, atol=tolerance)


def test_unfold_params_and_errors():
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2))
    state = model.state_dict()
    unfolded = ckpt.unfold_weight_norm(state, dim=0)
    assert "1.weight" in unfolded  # a 1-d weight (layer norm) is left alone
    assert "0.parametrizations.weight.original0" in unfolded
    only = ckpt.unfold_weight_norm(state, dim=0, params=["2.weight"])
    assert "0.weight" in only and "2.parametrizations.weight.original1" in only
    picked = ckpt.unfold_weight_norm(state, dim=0, names="old", params=lambda name: name.startswith("0."))
    assert "0.weight_g" in picked and "2.weight" in picked
    with pytest.raises(ValueError, match="out of range"):
        ckpt.unfold_weight_norm(state, dim=2)
    with pytest.raises(ValueError, match="weight_v"):
        ckpt.fold_weight_norm({"lin.weight_g": torch.ones(3, 1)})
    with pytest.raises(ValueError, match="not floating point"):
        ckpt.fold_weight_norm({"w_g": torch.ones(3, 1, dtype=torch.int32), "w_v": torch.ones(3, 2)})
    with pytest.raises(ValueError, match="does not fit"):
        ckpt.fold_weight_norm({"w_g": torch.ones(2, 1), "w_v": torch.ones(3, 2)})
    with pytest.raises(ValueError, match="naming"):
        ckpt.convert_weight_norm_names(state, to="newest")


def test_find_weight_norms_and_formula():
    module = new_weight_norm(nn.Conv1d(2, 3, 4), 1)
    [found] = ckpt.find_weight_norms(module.state_dict())
    assert found["name"] == "weight" and found["names"] == "new" and found["dim"] == 1
    assert found["g"] == "parametrizations.weight.original0"
    assert found["formula"] == ('mul("parametrizations.weight.original1", div("parametrizations.weight.original0", '
                                'norm_except_dim("parametrizations.weight.original1", 2, 1)))')
    assert json.loads(found["formula_json"])["op"] == "mul"


def run_cli(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("style", ["old", "new"])
def test_cli_fold(tmp_path, style):
    torch.manual_seed(6)
    module = randomized(APPLY[style](nn.Conv1d(3, 4, 2), 0))
    x = torch.randn(1, 3, 5)
    expected = module(x).detach()
    torch.save(module.state_dict(), tmp_path / "normed.pt")
    result = run_cli("convert", "--fold-weight-norm", tmp_path / "normed.pt", tmp_path / "folded.pt")
    assert result.returncode == 0, result.stderr
    assert "folded weight norm of 1 parameter" in result.stdout
    folded = torch.load(tmp_path / "folded.pt", weights_only=True)
    plain = nn.Conv1d(3, 4, 2)
    plain.load_state_dict(folded, strict=True)
    torch.testing.assert_close(plain(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("style", ["old", "new"])
@pytest.mark.parametrize("dim", ["0", "1", "-1", "none"])
def test_cli_unfold(tmp_path, style, dim):
    torch.manual_seed(7)
    plain = nn.Conv1d(3, 4, 2)
    x = torch.randn(1, 3, 5)
    torch.save(plain.state_dict(), tmp_path / "plain.pt")
    result = run_cli("convert", "--unfold-weight-norm", dim, "--weight-norm-names", style,
                     tmp_path / "plain.pt", tmp_path / "unfolded.pt")
    assert result.returncode == 0, result.stderr
    torch_dim = None if dim == "none" else int(dim)
    normed = APPLY[style](nn.Conv1d(3, 4, 2), torch_dim)
    normed.load_state_dict(torch.load(tmp_path / "unfolded.pt", weights_only=True), strict=True)
    torch.testing.assert_close(normed(x), plain(x), rtol=1e-5, atol=1e-6)


def test_cli_names_alone_and_usage_errors(tmp_path):
    module = old_weight_norm(nn.Linear(3, 2), 0)
    torch.save(module.state_dict(), tmp_path / "old.pt")
    result = run_cli("convert", "--weight-norm-names", "new", tmp_path / "old.pt", tmp_path / "new.pt")
    assert result.returncode == 0, result.stderr
    target = new_weight_norm(nn.Linear(3, 2), 0)
    loaded = torch.load(tmp_path / "new.pt", weights_only=True)
    assert "parametrizations.weight.original0" in loaded
    target.load_state_dict(loaded, strict=True)
    torch.save(nn.Linear(3, 2).state_dict(), tmp_path / "plain.pt")
    for args in (["--fold-weight-norm", "--unfold-weight-norm", "0"], ["--unfold-weight-norm", "x"],
                 ["--weight-norm-names", "newest"], ["--unfold-weight-norm", "3"]):
        # a plain weight, so that the dim out of range meets one
        result = run_cli("convert", *args, tmp_path / "plain.pt", tmp_path / "out.pt")
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("ckpt: "), result.stderr
        assert not (tmp_path / "out.pt").exists()
