"""ckpt against real PyTorch Distributed Checkpoint (torch.distributed.checkpoint,
torch 2.13): torch writes a DCP checkpoint on 2 ranks (gloo on 127.0.0.1, a
row-sharded DTensor beside plain tensors and an optimizer-like nested dict
with ints), ckpt reads it whole in one process and as 3 "ranks" that each ask
for a box of their third; `ckpt convert` matches torch's own
dcp_to_torch_save; a DCP directory that ckpt writes loads back into real
dcp.load bit-exact; a .metadata whose pickle would run code is refused by
name."""

import inspect
import os
import pickle
import socket
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import ckpt
from conftest import raw_safetensors

WORLD = 2
SHARDED_ROWS = 9  # 2 ranks: rows 0..4 and 5..8


def global_state():
    """The state every rank builds (the same seed): what ckpt must read back."""
    g = torch.Generator().manual_seed(0)
    return {
        "model": {
            "w": torch.randn(7, 5, generator=g),
            "b": torch.arange(6, dtype=torch.int64).to(torch.bfloat16),
            "sharded": torch.randn(SHARDED_ROWS, 4, generator=g),
            "counts": torch.arange(12, dtype=torch.int32).reshape(3, 4),
            "cols": torch.randn(3, 7, generator=g).to(torch.float64),
        },
        "optim": {
            "state": {0: {"step": 3, "exp_avg": torch.randn(4, generator=g)}},
            "param_groups": [{"lr": 0.25, "params": [0, 1]}],
        },
        "epoch": 5,
    }


def _worker(rank, world, port, out):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", (world,))
        state = global_state()
        state["model"]["sharded"] = distribute_tensor(state["model"]["sharded"], mesh, [Shard(0)])
        state["model"]["cols"] = distribute_tensor(state["model"]["cols"], mesh, [Shard(1)])
        dcp.save(state, checkpoint_id=out)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dcp_dir(tmp_path_factory):
    """A DCP checkpoint written by real torch on 2 gloo ranks (a bounded subprocess)."""
    out = tmp_path_factory.mktemp("dcp") / "step"
    script = (
        "import sys, torch.multiprocessing as mp; sys.path.insert(0, sys.argv[1]); import test_dcp as t; "
        "mp.spawn(t._worker, args=(2, int(sys.argv[2]), sys.argv[3]), nprocs=2, join=True)"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    result = subprocess.run([sys.executable, "-c", script, here, str(_free_port()), str(out)], capture_output=True,
                            text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (out / ".metadata").is_file()
    assert sorted(p.name for p in out.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    return out


def flatten(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)) and any(isinstance(v, (dict, torch.Tensor)) for v in tree):
        items = enumerate(tree)
    else:
        return {prefix: tree}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def same(a, b):
    """Bit-exact equality of two tensors (dtype, shape, bytes)."""
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    assert a.contiguous().reshape(-1).view(torch.uint8).tolist() == b.contiguous().reshape(-1).view(torch.uint8).tolist()


def test_reads_two_rank_checkpoint_whole(dcp_dir):
    state = ckpt.load(dcp_dir, framework="torch")
    expected = flatten(global_state())
    got = flatten(state)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        if isinstance(value, torch.Tensor):
            same(got[name], value)
        else:
            assert got[name] == value, name
    # The nested tree DCP flattened (planner_data): the int key came back as
    # DCP's str(key), lists as lists.
    assert state["optim"]["state"]["0"]["step"] == 3
    assert state["optim"]["param_groups"][0]["params"] == [0, 1]


def test_inspect_names_the_format(dcp_dir, inspect_json):
    info = inspect_json(dcp_dir)
    assert info["format"] == "dcp"
    names = {t["name"]: t for t in info["tensors"]}
    assert names["model.sharded"]["shape"] == [SHARDED_ROWS, 4]


def test_convert_matches_dcp_to_torch_save(dcp_dir, run, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(dcp_dir, tmp_path / "torch.pt")
    reference = flatten(torch.load(tmp_path / "torch.pt", weights_only=True))
    run("convert", dcp_dir, tmp_path / "out.safetensors")
    tensors, _ = raw_safetensors(tmp_path / "out.safetensors")
    ref_tensors = {k: v for k, v in reference.items() if isinstance(v, torch.Tensor)}
    assert sorted(tensors) == sorted(ref_tensors)
    for name, value in ref_tensors.items():
        _, shape, data = tensors[name]
        assert list(shape) == list(value.shape), name
        assert data == value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes(), name
    # And the non-tensor values through ckpt's own reading of its output.
    back = flatten(ckpt.load(tmp_path / "out.safetensors", framework="torch"))
    for name, value in reference.items():
        if not isinstance(value, torch.Tensor):
            assert back[name] == value, name


def _boxes_supported():
    return "boxes" in inspect.signature(ckpt.load).parameters


@pytest.mark.skipif(not _boxes_supported(), reason="ckpt.load has no boxes= yet")
def test_three_ranks_read_their_thirds(dcp_dir):
    full = global_state()["model"]["sharded"]
    rows = [(0, 3), (3, 6), (6, 9)]
    cols = global_state()["model"]["cols"]
    col_ranges = [(0, 3), (3, 5), (5, 7)]  # each rank's third of the 7 columns saved as 4 + 3
    for (start, stop), (c0, c1) in zip(rows, col_ranges):
        state = ckpt.load(dcp_dir, framework="torch",
                          boxes={"model.sharded": ([start, 0], [stop - start, 4]),
                                 "model.cols": ([0, c0], [3, c1 - c0])})
        same(state["model"]["sharded"], full[start:stop])
        same(state["model"]["cols"], cols[:, c0:c1])
        same(state["model"]["w"], global_state()["model"]["w"])  # leaves without a box come whole


def test_ckpt_written_dcp_loads_in_torch(tmp_path):
    import torch.distributed.checkpoint as dcp

    source = global_state()
    source["model"]["f16"] = torch.linspace(-2, 2, 10, dtype=torch.float16)
    source["model"]["scalar"] = torch.tensor(7.5, dtype=torch.float64)
    source["optim"]["state"] = {"0": source["optim"]["state"][0]}  # DCP keys dicts by str(key)
    out = tmp_path / "ckpt-dcp"
    ckpt.save(out, source, format="dcp")
    assert sorted(p.name for p in out.iterdir()) == [".metadata", "__0_0.distcp"]

    target = {
        "model": {k: torch.zeros_like(v) for k, v in source["model"].items()},
        "optim": {"state": {"0": {"step": 0, "exp_avg": torch.zeros(4)}},
                  "param_groups": [{"lr": 0.0, "params": []}]},
        "epoch": 0,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, checkpoint_id=out)
    for name, value in flatten(source).items():
        got = flatten(target)[name]
        if isinstance(value, torch.Tensor):
            same(got, value)
        else:
            assert got == value, name
    # ckpt reads its own output back the same.
    back = flatten(ckpt.load(out, framework="torch"))
    for name, value in flatten(source).items():
        if isinstance(value, torch.Tensor):
            same(back[name], value)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/ckpt-dcp-pwned",))


def test_code_execution_payload_refused_by_name(dcp_dir, tmp_path):
    import shutil

    bad = tmp_path / "evil"
    shutil.copytree(dcp_dir, bad)
    with open(bad / ".metadata", "rb") as f:
        metadata = pickle.load(f)
    metadata.storage_meta.modules = [_Evil()]
    with open(bad / ".metadata", "wb") as f:
        pickle.dump(metadata, f)
    marker = "/tmp/ckpt-dcp-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    with pytest.raises(ckpt.UnsupportedError, match="posix.system|os.system"):
        ckpt.load(bad)
    assert not os.path.exists(marker)
