"""ckpt.save(..., max_shard_bytes=N): a TF bundle split into shards."""

import numpy as np

import ckpt


def test_tf_bundle_in_shards_round_trips(tmp_path):
    rng = np.random.default_rng(3)
    state = {f"layer{i}": {"kernel": rng.standard_normal((64, 64)).astype(np.float32)} for i in range(5)}
    prefix = tmp_path / "model.ckpt"
    # 16 KiB per tensor: at most two tensors per 40,000-byte shard.
    ckpt.save(prefix, state, format="tf", max_shard_bytes=40_000)
    shards = sorted(p.name for p in tmp_path.glob("model.ckpt.data-*"))
    assert shards == [f"model.ckpt.data-{k:05d}-of-00003" for k in range(3)]
    assert all((tmp_path / name).stat().st_size <= 40_000 for name in shards)
    loaded = ckpt.load(prefix)
    for name, layer in state.items():
        np.testing.assert_array_equal(loaded[name]["kernel"], layer["kernel"])
    # One shard again: the old shards of another count are removed.
    ckpt.save(prefix, state, format="tf")
    assert sorted(p.name for p in tmp_path.glob("model.ckpt.data-*")) == ["model.ckpt.data-00000-of-00001"]
