"""ckpt.load(path, boxes={name: (offsets, sizes)}): only those boxes of the named tensors."""

import numpy as np
import pytest
import torch

import ckpt


def test_boxes_come_back_as_the_slices_of_the_tensor(tmp_path):
    path = tmp_path / "m.safetensors"
    weight = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)
    bias = np.arange(5, dtype=np.int64)
    ckpt.save(path, {"layer": {"weight": weight}, "bias": bias})
    state = ckpt.load(path, boxes={"layer.weight": ((2, 3), (4, 6))})
    np.testing.assert_array_equal(state["layer"]["weight"], weight[2:6, 3:9])
    np.testing.assert_array_equal(state["bias"], bias)
    as_torch = ckpt.load(path, framework="torch", boxes={"bias": ([1], [3])})
    assert torch.equal(as_torch["bias"], torch.arange(1, 4))
    assert as_torch["layer"]["weight"].shape == (8, 12)


def test_a_box_outside_its_tensor_or_for_an_absent_name_is_refused(tmp_path):
    path = tmp_path / "m.safetensors"
    ckpt.save(path, {"w": np.zeros((4, 4), np.float32)})
    with pytest.raises(ValueError, match=r"box \[3:6, 0:1\]"):
        ckpt.load(path, boxes={"w": ((3, 0), (3, 1))})
    with pytest.raises(ValueError, match="rank"):
        ckpt.load(path, boxes={"w": ((0,), (1,))})
    with pytest.raises(FileNotFoundError, match="'?v'?"):
        ckpt.load(path, boxes={"v": ((0,), (1,))})
    with pytest.raises(ValueError, match="rename"):
        ckpt.load(path, boxes={"w": ((0, 0), (1, 1))}, rename={"w": "u"})
