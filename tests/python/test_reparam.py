"""Eager re-parameterization (ckpt.weight_norm, ckpt.reparametrize) against
real torch: state_dict keys and values equal torch's weight-normed modules'
(torch.nn.utils.weight_norm, torch.nn.utils.parametrizations.weight_norm),
which load each other's state dicts; the derived weight is recomputed
exactly when g or v changed, on any read; gradients and SGD training equal
torch's bit for bit (gradient accumulation included); formula functions
(numpy, jax, torch) equal the eager weight and ckpt.fold_weight_norm's.
Expected values come from torch's own modules and functions.

Run: PYTHONPATH=python .venv/bin/python -m pytest tests/python/test_reparam.py -q
"""

import copy
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

import ckpt
from test_weight_norm import MODULES, new_weight_norm, old_weight_norm, randomized

TORCH_WEIGHT_NORM = {"new": new_weight_norm, "old": old_weight_norm}
DIMS = [0, 1, None]
RAW = {"new": ("parametrizations.weight.original0", "parametrizations.weight.original1"),
       "old": ("weight_g", "weight_v")}


def pair(kind, names, dim, seed=0):
    """(ckpt's weight-normed module, torch's), from one plain module."""
    torch.manual_seed(seed)
    make, shape = MODULES[kind]
    plain = make()
    ours = ckpt.weight_norm(copy.deepcopy(plain), dim=dim, names=names)
    theirs = TORCH_WEIGHT_NORM[names](copy.deepcopy(plain), dim)
    return ours, theirs, torch.randn(shape)


def recomputes(module, name="weight"):
    return ckpt.reparametrizations(module)[name].recomputes


def raw_of(module, names):
    g, v = RAW[names]
    return module.get_parameter(g), module.get_parameter(v)


@pytest.mark.parametrize("kind", sorted(MODULES))
@pytest.mark.parametrize("names", ["new", "old"])
@pytest.mark.parametrize("dim", DIMS)
def test_state_dict_and_weight_equal_torch(kind, names, dim):
    ours, theirs, x = pair(kind, names, dim)
    expected = theirs.state_dict()
    state = ours.state_dict()
    assert list(state) == list(expected)  # the same keys in the same order; no plain "weight"
    for key, value in expected.items():
        assert torch.equal(state[key], value), key
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    out = theirs(x)  # the old style computes its weight in forward
    assert torch.equal(ours(x), out)
    assert torch.equal(ours.weight, theirs.weight)


@pytest.mark.parametrize("names", ["new", "old"])
@pytest.mark.parametrize("dim", DIMS)
def test_loads_torch_state_dict_strict_and_back(names, dim):
    ours, theirs, x = pair("conv1d", names, dim, seed=1)
    randomized(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert torch.equal(ours(x), theirs(x))
    randomized(ours)
    target = TORCH_WEIGHT_NORM[names](MODULES["conv1d"][0](), dim)
    target.load_state_dict(ours.state_dict(), strict=True)
    assert torch.equal(target(x), ours(x))


@pytest.mark.parametrize("dim", DIMS)
def test_other_naming_loads(dim):
    """Old names into a module of new names and back, as torch's own modules write and read them."""
    torch.manual_seed(2)
    make, shape = MODULES["linear"]
    x = torch.randn(shape)
    torch_old = randomized(old_weight_norm(make(), dim))
    ours_new = ckpt.weight_norm(make(), dim=dim, names="new")
    ours_new.load_state_dict(torch_old.state_dict(), strict=True)
    assert torch.equal(ours_new(x), torch_old(x))
    torch_new = randomized(new_weight_norm(make(), dim))
    ours_old = ckpt.weight_norm(make(), dim=dim, names="old")
    ours_old.load_state_dict(torch_new.state_dict(), strict=True)
    assert torch.equal(ours_old(x), torch_new(x))
    # torch's old module has no hook for new names: ckpt's converter renames them.
    target_old = old_weight_norm(make(), dim)
    target_old.load_state_dict(ckpt.convert_weight_norm_names(ours_new.state_dict(), to="old"), strict=True)
    assert torch.equal(target_old(x), torch_old(x))
    # returnn_common's names (1-d g) too; its w differs by its epsilon only.
    rc = ckpt.convert_weight_norm_names(torch_new.state_dict(), to="returnn_common")
    ours_rc = ckpt.weight_norm(make(), dim=dim)
    ours_rc.load_state_dict(rc, strict=True)
    torch.testing.assert_close(ours_rc(x), torch_new(x), rtol=1e-5, atol=1e-6)


class LinearWithSum(nn.Linear):
    def weight_sum(self):
        return self.weight.sum()


@pytest.mark.parametrize("names", ["new", "old"])
def test_recomputes_exactly_when_g_or_v_changed(names):
    torch.manual_seed(3)
    module = ckpt.weight_norm(LinearWithSum(5, 4), dim=0, names=names)
    g, v = raw_of(module, names)

    def expected():  # w = g v / ||v||, the norm per row, by torch's own norm
        return g.detach() * v.detach() / v.detach().norm(dim=1, keepdim=True)

    first = module.weight
    assert recomputes(module) == 1
    assert module.weight is first and module.weight is first  # cached
    assert recomputes(module) == 1
    with torch.no_grad():
        g.mul_(2)
    changed = module.weight
    assert recomputes(module) == 2
    torch.testing.assert_close(changed, expected(), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(changed, first)
    with torch.no_grad():
        v[0].add_(1)
    torch.testing.assert_close(module.weight, expected(), rtol=1e-6, atol=1e-6)
    assert recomputes(module) == 3
    # Read in a method other than forward: the property, not a forward hook.
    with torch.no_grad():
        v.mul_(3)  # the direction's scale does not change w
        g.add_(1)
    torch.testing.assert_close(module.weight_sum(), expected().sum(), rtol=1e-6, atol=1e-5)
    assert recomputes(module) == 4
    x = torch.randn(3, 5)
    with torch.no_grad():
        outputs = [module(x) for _ in range(5)]
    assert recomputes(module) == 4  # the cached tensor serves (its graph is not used here)
    assert all(torch.equal(out, outputs[0]) for out in outputs)
    # load_state_dict copies into g and v in place.
    state = {k: t * 2 for k, t in module.state_dict().items()}
    module.load_state_dict(state)
    torch.testing.assert_close(module.weight, expected(), rtol=1e-6, atol=1e-6)
    assert recomputes(module) == 5
    # A replaced parameter: another object.
    owner, _, attribute = RAW[names][0].rpartition(".")
    setattr(module.get_submodule(owner), attribute, nn.Parameter(torch.ones(4, 1)))
    g, v = raw_of(module, names)
    torch.testing.assert_close(module.weight, expected(), rtol=1e-6, atol=1e-6)
    assert recomputes(module) == 6
    # The cached tensor changed in place by its reader is not handed out again.
    with torch.no_grad():
        module.weight.zero_()
    torch.testing.assert_close(module.weight, expected(), rtol=1e-6, atol=1e-6)
    assert recomputes(module) == 7
    # Another dtype: module.double() gives new data.
    module.double()
    assert module.weight.dtype == torch.float64
    assert recomputes(module) == 8
    with torch.no_grad():
        module(x.double())
        module(x.double())
    assert recomputes(module) == 8


@pytest.mark.parametrize("dim", DIMS)
def test_gradient_accumulation_equals_torch(dim):
    """Two forward/backward passes without a step: the second needs a new
    graph (the first backward freed the cached one)."""
    ours, theirs, x = pair("conv1d", "new", dim, seed=4)
    for module in (ours, theirs):
        for _ in range(2):
            module(x).square().sum().backward()
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.equal(a.grad, b.grad), name
    # Several reads in one forward share one graph: one backward through both.
    before = recomputes(ours)
    (ours.weight.sum() + ours.weight.square().sum()).backward()
    assert recomputes(ours) == before + 1


@pytest.mark.parametrize("kind", sorted(MODULES))
@pytest.mark.parametrize("names", ["new", "old"])
@pytest.mark.parametrize("dim", DIMS)
def test_sgd_training_is_bit_identical_to_torch(kind, names, dim):
    ours, theirs, _ = pair(kind, names, dim, seed=5)
    shape = MODULES[kind][1]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ours, theirs)]
    torch.manual_seed(6)
    batches = [torch.randn(shape) for _ in range(4)]
    for x in batches:
        for module, optimizer in zip((ours, theirs), optimizers):
            optimizer.zero_grad()
            module(x).sin().sum().backward()
            optimizer.step()
    expected = theirs.state_dict()
    for key, value in ours.state_dict().items():
        assert torch.equal(value, expected[key]), key
    assert not torch.equal(expected[RAW[names][0]], pair(kind, names, dim, seed=5)[1].state_dict()[RAW[names][0]])
    assert recomputes(ours) == len(batches)


def test_functional_call_and_func_grad_equal_torch():
    """torch.func swaps the raw parameters for its own tensors (other objects): recomputed, then back."""
    ours, theirs, x = pair("linear", "new", 0, seed=8)
    own = ours(x).detach()
    params = {k: 2 * p.detach() for k, p in ours.named_parameters()}
    assert torch.equal(torch.func.functional_call(ours, params, (x,)), torch.func.functional_call(theirs, params, (x,)))
    assert torch.equal(ours(x), own)

    def grads(module):
        return torch.func.grad(lambda p: torch.func.functional_call(module, p, (x,)).square().sum())(params)
    ours_grads, torch_grads = grads(ours), grads(theirs)
    assert all(torch.equal(ours_grads[k], torch_grads[k]) for k in params)
    assert torch.equal(ours(x), own)


def test_assigning_the_weight_sets_g_and_v():
    module = ckpt.weight_norm(nn.Linear(3, 2), dim=0)
    w = torch.tensor([[3.0, 4.0, 0.0], [0.0, -1.0, 0.0]])
    module.weight = w
    g, v = raw_of(module, "new")
    assert torch.equal(g.detach(), torch.tensor([[5.0], [1.0]]))
    assert torch.equal(v.detach(), w)
    torch.testing.assert_close(module.weight, w, rtol=1e-6, atol=1e-6)


def test_deepcopy_has_its_own_cache():
    module = ckpt.weight_norm(nn.Linear(3, 2))
    module(torch.randn(1, 3))  # a cached weight with a graph (which deepcopy could not copy)
    twin = copy.deepcopy(module)
    with torch.no_grad():
        twin.parametrizations.weight.original0.mul_(2)
    torch.testing.assert_close(twin.weight, 2 * module.weight, rtol=1e-6, atol=1e-6)
    assert type(twin).__name__ == "ReparametrizedLinear" and isinstance(twin, nn.Linear)


def test_reparametrize_user_function():
    calls = []

    def masked(weight, mask):
        calls.append(1)
        return weight * mask

    module = nn.Linear(4, 3)
    weight = nn.Parameter(torch.randn(3, 4))
    mask = (torch.arange(12).reshape(3, 4) % 2).float()
    ckpt.reparametrize(module, "weight", masked, {"weight": weight, "mask": mask})
    assert list(module.state_dict()) == ["bias", "parametrizations.weight.weight", "parametrizations.weight.mask"]
    assert [n for n, _ in module.named_parameters()] == ["bias", "parametrizations.weight.weight"]  # mask: a buffer
    x = torch.randn(2, 4)
    out = module(x)
    torch.testing.assert_close(out, x @ (weight * mask).T + module.bias)
    module(x)
    assert len(calls) == 1 and ckpt.reparametrizations(module)["weight"].recomputes == 1
    out.sum().backward()
    torch.testing.assert_close(weight.grad, mask * x.sum(0))  # no gradient through the masked entries
    module(x)
    assert len(calls) == 2  # the graph went to backward: a new one
    with torch.no_grad():
        module.parametrizations.weight.mask.fill_(1)
    torch.testing.assert_close(module.weight, weight.detach())
    assert len(calls) == 3
    with pytest.raises(AttributeError, match="no inverse"):
        module.weight = torch.zeros(3, 4)
    # Raw parameters on the module itself, under their argument names.
    other = ckpt.reparametrize(nn.Linear(2, 2), "weight", lambda a, b: a @ b,
                               {"a": nn.Parameter(torch.eye(2)), "b": nn.Parameter(2 * torch.eye(2))}, prefix="")
    assert list(other.state_dict()) == ["bias", "a", "b"]
    assert torch.equal(other.weight, 2 * torch.eye(2))


def test_reparametrize_refusals():
    module = ckpt.weight_norm(nn.Linear(3, 2))
    with pytest.raises(ValueError, match="derived already"):
        ckpt.weight_norm(module)
    with pytest.raises(ValueError, match="derived already"):
        ckpt.reparametrize(module, "weight", lambda a: a, {"a": torch.ones(1)})
    with pytest.raises(ValueError, match="taken already"):
        ckpt.reparametrize(nn.Linear(3, 2), "weight", lambda bias: bias, {"bias": torch.ones(2)}, prefix="")
    with pytest.raises(ValueError, match="taken already"):
        ckpt.reparametrize(nn.Linear(3, 2), "weight", lambda weight: weight, {"weight": torch.ones(2)}, prefix="")
    with pytest.raises(TypeError, match="not a tensor"):
        ckpt.reparametrize(nn.Linear(3, 2), "weight", lambda a: a, {"a": [1.0]})
    with pytest.raises(ValueError, match="no argument name"):
        ckpt.reparametrize(nn.Linear(3, 2), "weight", lambda **raw: raw["a.b"], {"a.b": torch.ones(1)})
    with pytest.raises(ValueError, match="no raw tensors"):
        ckpt.reparametrize(nn.Linear(3, 2), "weight", lambda: None, {})
    with pytest.raises(ValueError, match="out of range"):
        ckpt.weight_norm(nn.Linear(3, 2), dim=2)
    with pytest.raises(ValueError, match="naming"):
        ckpt.weight_norm(nn.Linear(3, 2), names="returnn_common")
    with pytest.raises(ValueError, match="no parameter"):
        ckpt.weight_norm(nn.Linear(3, 2), name="scale")
    with pytest.raises(ValueError, match="parametrize"):
        ckpt.weight_norm(new_weight_norm(nn.Linear(3, 2), 0), name="bias")
    gone = ckpt.weight_norm(nn.Linear(3, 2))
    del gone.parametrizations.weight.original0
    with pytest.raises(RuntimeError, match="reading 'weight'.*original0"):
        gone.weight
    bad = ckpt.reparametrize(nn.Linear(3, 2), "weight", lambda a: "no tensor", {"a": torch.ones(1)})
    with pytest.raises(TypeError, match="not a tensor"):
        bad.weight


def as_numpy(state):
    return {k: v.detach().numpy() for k, v in state.items()}


@pytest.mark.parametrize("kind", sorted(MODULES))
@pytest.mark.parametrize("names", ["new", "old"])
@pytest.mark.parametrize("dim", DIMS)
def test_formula_functions_equal_eager_and_fold(kind, names, dim):
    ours, _, _ = pair(kind, names, dim, seed=7)
    randomized(ours)
    state = ours.state_dict()
    [found] = ckpt.find_weight_norms(state)
    formula = ckpt.reparametrizations(ours)["weight"].formula
    assert json.loads(formula) == json.loads(found["formula_json"])
    eager = ours.weight.detach()
    folded = ckpt.fold_weight_norm(state)["weight"]
    raw = {k: state[k] for k in RAW[names]}
    numpy_value = ckpt.formula_function(formula, "numpy")(as_numpy(raw))
    jax_function = jax.jit(ckpt.formula_function(json.loads(formula), backend="jax"))
    jax_value = np.asarray(jax_function({k: jnp.asarray(v) for k, v in as_numpy(raw).items()}))
    torch_value = ckpt.formula_function(formula, "torch")(raw)
    for value in (numpy_value, jax_value, torch_value.detach().numpy()):
        assert value.shape == tuple(eager.shape) and value.dtype == np.float32
        np.testing.assert_allclose(value, eager.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(value, folded.numpy(), rtol=1e-6, atol=1e-6)


def test_formula_refusals():
    good = {"op": "mul", "args": [{"op": "param", "name": "a"}, {"op": "const", "value": 2}]}
    assert ckpt.formula_function(good)({"a": np.float32(1.5)}) == 3.0
    cases = [
        ({"op": "mul", "args": [{"op": "param", "name": "a"}, {"op": "pow", "args": []}]}, r"'pow' at args\[1\]"),
        ({"op": "div", "args": [{"op": "param", "name": "a"}]}, "div at the root takes 2 operands in \"args\", got 1"),
        ({"op": "sqrt"}, "sqrt at the root takes 1 operand in \"args\", got 0"),
        ({"op": "add", "args": [good, {"op": "norm_except_dim", "dim": 0, "args": [good]}]},
         r"norm_except_dim at args\[1\] lacks \"p\""),
        ({"op": "param"}, "param at the root lacks \"name\""),
        ({"op": "const", "value": "one"}, "no number"),
        ({"op": "reshape", "shape": [2, -1], "args": [good]}, "shape"),
        ({"op": "norm_except_dim", "p": 1, "dim": 0, "args": [good]}, "p = 2"),
        ({"args": []}, "no \"op\""),
        ([1, 2], "no op"),
        ("{not json", "no JSON"),
    ]
    for formula, message in cases:
        with pytest.raises(ValueError, match=message):
            ckpt.formula_function(formula)
    with pytest.raises(ValueError, match="backend"):
        ckpt.formula_function(good, "tensorflow")
    with pytest.raises(ValueError, match="no raw parameter 'a'"):
        ckpt.formula_function(good)({"b": np.ones(2)})
    norm = {"op": "norm_except_dim", "p": 2, "dim": 3, "args": [{"op": "param", "name": "a"}]}
    with pytest.raises(ValueError, match="out of range"):
        ckpt.formula_function(norm)({"a": np.ones((2, 2))})
