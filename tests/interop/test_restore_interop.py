"""ckpt.restore with the real frameworks: torch modules filled in place (an
added layer, tied weights, huggingface's deduplicated files, load_state_dict
as the reference), and Flax TrainStates that gained a field since their
checkpoint was written."""

from typing import Any

import numpy as np
import pytest

import ckpt

torch = pytest.importorskip("torch")
nn = torch.nn


class OldNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.norm = nn.BatchNorm1d(8)


class NewNet(OldNet):
    """OldNet plus a head: the code changed after the checkpoint was written."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.norm(self.encoder(x)))


def trained_old(seed=0):
    torch.manual_seed(seed)
    net = OldNet()
    net.train()
    net.norm(net.encoder(torch.randn(16, 4)))  # running stats move
    return net


@pytest.mark.parametrize("suffix", [".pt", ".safetensors", ".npz"])
def test_a_model_with_an_added_layer_restores_with_the_layer_defaulted(tmp_path, suffix):
    old = trained_old()
    path = tmp_path / f"old{suffix}"
    ckpt.save(path, old.state_dict())
    torch.manual_seed(1)
    new = NewNet()
    head_before = {k: v.clone() for k, v in new.head.state_dict().items()}

    with pytest.raises(ckpt.MismatchError, match=r"missing \(2\): head.weight, head.bias"):
        ckpt.restore(new, path)
    # load_state_dict agrees on what is missing.
    assert new.load_state_dict(torch.load(path) if suffix == ".pt" else
                               {k: torch.from_numpy(np.array(v)) for k, v in ckpt.load(path).items()},
                               strict=False).missing_keys == ["head.weight", "head.bias"]

    torch.manual_seed(1)
    new = NewNet()
    report = ckpt.restore(new, path, defaults={"head": ckpt.KEEP})
    assert report.tree is new and report.ok
    assert report.defaulted == ["head.weight", "head.bias"]
    assert set(report.restored) == set(old.state_dict())
    for name, value in old.state_dict().items():
        assert torch.equal(new.state_dict()[name], value), name
    for name, value in head_before.items():
        assert torch.equal(new.head.state_dict()[name], value)
    # The restored model runs like the old one up to the new head.
    x = torch.randn(3, 4)
    old.eval(), new.eval()
    assert torch.equal(new.norm(new.encoder(x)), old.norm(old.encoder(x)))
    assert new.encoder[0].weight.requires_grad and isinstance(new.encoder[0].weight, nn.Parameter)


def test_non_strict_module_restore_matches_load_state_dict_and_skips_shape_mismatches(tmp_path):
    old = trained_old()
    path = tmp_path / "old.pt"
    ckpt.save(path, old.state_dict())

    class Wider(NewNet):
        def __init__(self):
            super().__init__()
            self.encoder[2] = nn.Linear(8, 16)
            self.norm = nn.BatchNorm1d(16)
            self.head = nn.Linear(16, 2)

    torch.manual_seed(2)
    wide = Wider()
    before = {k: v.clone() for k, v in wide.state_dict().items()}
    report = ckpt.restore(wide, path, strict=False)
    assert report.missing == ["head.weight", "head.bias"]
    assert report.shape_mismatched == ["encoder.2.weight", "encoder.2.bias", "norm.weight", "norm.bias",
                                       "norm.running_mean", "norm.running_var"]
    assert report.restored == ["encoder.0.weight", "encoder.0.bias", "norm.num_batches_tracked"]
    for name in report.shape_mismatched + report.missing:
        assert torch.equal(wide.state_dict()[name], before[name]), name  # never partly applied
    assert torch.equal(wide.encoder[0].weight, old.encoder[0].weight)
    # torch itself raises on the size mismatch even with strict=False (pytorch#40859).
    with pytest.raises(RuntimeError, match="size mismatch"):
        Wider().load_state_dict(torch.load(path), strict=False)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.body = nn.Linear(4, 4)
        self.lm_head = nn.Linear(4, 10, bias=False)
        self.lm_head.weight = self.embed.weight


def test_tied_weights_restore_from_a_deduplicated_huggingface_file(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(3)
    model = Tied()
    path = tmp_path / "hf.safetensors"
    safetensors_torch.save_model(model, str(path))  # keeps one of the tied names
    torch.manual_seed(4)
    fresh = Tied()
    report = ckpt.restore(fresh, path)
    assert report.ok and sorted(report.restored) == sorted(fresh.state_dict())
    assert fresh.lm_head.weight is fresh.embed.weight
    assert torch.equal(fresh.embed.weight, model.embed.weight)


def test_cast_on_restore_into_a_bfloat16_model(tmp_path):
    torch.manual_seed(5)
    model = nn.Linear(3, 3)
    path = tmp_path / "f32.safetensors"
    ckpt.save(path, model.state_dict())
    half = nn.Linear(3, 3).to(torch.bfloat16)
    with pytest.raises(ckpt.MismatchError, match="dtype mismatched"):
        ckpt.restore(half, path)
    report = ckpt.restore(half, path, cast={torch.float32: torch.bfloat16})
    assert report.cast == ["weight", "bias"]
    assert torch.equal(half.weight, model.weight.to(torch.bfloat16))  # torch's own rounding


def test_restore_into_a_state_dict_nest_gives_torch_tensors(tmp_path):
    torch.manual_seed(6)
    model = nn.Linear(2, 2)
    path = tmp_path / "m.pt"
    torch.save({"model": model.state_dict(), "epoch": 3}, path)
    target = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}, "epoch": 0}
    report = ckpt.restore(target, path)
    assert isinstance(report.tree["model"]["weight"], torch.Tensor)
    assert torch.equal(report.tree["model"]["weight"], model.weight.detach())
    assert report.tree["epoch"] == 3


# ------------------------------------------------------------------ Flax

def test_a_flax_train_state_with_a_new_field_restores_from_an_older_checkpoint(tmp_path):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    optax = pytest.importorskip("optax")
    flax = pytest.importorskip("flax")
    from flax import linen
    from flax.training import train_state

    class MLP(linen.Module):
        @linen.compact
        def __call__(self, x):
            return linen.Dense(2)(linen.relu(linen.Dense(8)(x)))

    model = MLP()
    x = jnp.ones((4, 3))
    params = model.init(jax.random.PRNGKey(0), x)["params"]
    old = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-2))

    def loss(p, state):
        return jnp.mean(state.apply_fn({"params": p}, x) ** 2)

    for _ in range(3):
        old = old.apply_gradients(grads=jax.grad(loss)(old.params, old))
    path = tmp_path / "checkpoint_3.safetensors"
    ckpt.save(path, old)  # written before the new field existed

    class NewTrainState(train_state.TrainState):
        ema_params: Any = ckpt.field(default=None)
        loss_scale: float = ckpt.field(default=1.0)

    class Unmarked(train_state.TrainState):
        ema_params: Any = None

    fresh_params = model.init(jax.random.PRNGKey(1), x)["params"]
    target = NewTrainState.create(apply_fn=model.apply, params=fresh_params, tx=optax.adam(1e-2),
                                  ema_params=fresh_params, loss_scale=4.0)
    report = ckpt.restore(target, path)
    assert len(report.defaulted) == 5 and report.defaulted[-1] == "loss_scale"
    assert all(name.startswith("ema_params.Dense_") for name in report.defaulted[:-1])
    restored = report.tree
    assert isinstance(restored, NewTrainState)
    assert int(restored.step) == 3
    assert restored.ema_params is None and restored.loss_scale == 1.0
    assert restored.apply_fn == model.apply and restored.tx is target.tx
    for a, b in zip(jax.tree_util.tree_leaves((restored.params, restored.opt_state)),
                    jax.tree_util.tree_leaves((old.params, old.opt_state))):
        assert isinstance(a, jax.Array)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Training goes on from the restored state exactly as from the old one.
    step_old = old.apply_gradients(grads=jax.grad(loss)(old.params, old))
    step_new = restored.apply_gradients(grads=jax.grad(loss)(restored.params, restored))
    for a, b in zip(jax.tree_util.tree_leaves(step_new.params), jax.tree_util.tree_leaves(step_old.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    with pytest.raises(ckpt.MismatchError, match=r"missing \(1\): ema_params"):
        ckpt.restore(Unmarked.create(apply_fn=model.apply, params=fresh_params, tx=optax.adam(1e-2)), path)
    # Flax's own state-dict names are ckpt's names.
    names = {t["name"] for t in ckpt.inspect(path)["tensors"]}
    expected = {".".join(k) for k in flax.traverse_util.flatten_dict(
        flax.serialization.to_state_dict(old)).keys()}
    assert names == expected - {"step"}


def test_shape_dtype_struct_targets_restore_jax_arrays(tmp_path):
    jax = pytest.importorskip("jax")
    path = tmp_path / "p.safetensors"
    ckpt.save(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)})
    spec = {"w": jax.ShapeDtypeStruct((2, 3), np.float32), "b": jax.ShapeDtypeStruct((3,), np.float32)}
    report = ckpt.restore(spec, path)
    assert isinstance(report.tree["w"], jax.Array)
    np.testing.assert_array_equal(np.asarray(report.tree["w"]), np.arange(6, dtype=np.float32).reshape(2, 3))
    bad = {"w": jax.ShapeDtypeStruct((3, 3), np.float32)}
    with pytest.raises(ckpt.MismatchError, match=r"shape mismatched \(1\): w"):
        ckpt.restore(bad, path, only="w")


def test_a_train_state_restores_from_a_checkpoint_flax_itself_wrote_before_the_new_field(tmp_path):
    jax = pytest.importorskip("jax")
    optax = pytest.importorskip("optax")
    pytest.importorskip("flax")
    from flax import linen
    from flax.serialization import to_bytes
    from flax.training import train_state

    model = linen.Dense(3)
    params = model.init(jax.random.PRNGKey(0), jax.numpy.ones((1, 2)))["params"]
    old = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.1, momentum=0.9))
    old = old.apply_gradients(grads=jax.tree_util.tree_map(jax.numpy.ones_like, old.params))
    path = tmp_path / "checkpoint_1"
    path.write_bytes(to_bytes(old))  # what flax.training.checkpoints writes: msgpack, no extension

    class NewState(train_state.TrainState):
        dropout_rng: Any = ckpt.field(default_factory=lambda: jax.random.PRNGKey(7))

    fresh = NewState.create(apply_fn=model.apply, params=model.init(jax.random.PRNGKey(1), jax.numpy.ones((1, 2)))[
        "params"], tx=optax.sgd(0.1, momentum=0.9))
    report = ckpt.restore(fresh, path)
    assert report.defaulted == ["dropout_rng"] and report.ok
    restored = report.tree
    assert int(restored.step) == 1
    np.testing.assert_array_equal(np.asarray(restored.dropout_rng), np.asarray(jax.random.PRNGKey(7)))
    for a, b in zip(jax.tree_util.tree_leaves((restored.params, restored.opt_state)),
                    jax.tree_util.tree_leaves((old.params, old.opt_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
