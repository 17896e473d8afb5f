"""The manager's returnn layout read by the real RETURNN (and torch): the
epoch files are what RETURNN's torch engine loads, its LearningRateControl
reads the scores ckpt wrote, its model search finds the epoch ckpt
committed last, and ckpt continues a directory RETURNN's files are in
without touching them. Tiny torch models throughout.

Run: .venv/bin/python -m pytest tests/interop/test_returnn_interop.py -q
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import ckpt

pytest.importorskip("returnn.learning_rate_control")
from returnn.learning_rate_control import ConstantLearningRate  # noqa: E402


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def optimizer_for(net):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.randn(5, 3, generator=torch.Generator().manual_seed(7))).sum().backward()
    opt.step()  # a state to save (exp_avg, exp_avg_sq, step)
    return opt


_MODEL_SEARCH = """
import json, sys
from returnn.config import Config
from returnn.engine.base import EngineBase
from returnn.util.basic import BackendEngine
config = Config({"model": sys.argv[1], "num_epochs": int(sys.argv[2]), "task": sys.argv[3], "backend": "torch"})
BackendEngine.select_engine(config=config)
print(json.dumps([EngineBase.get_existing_models(config), EngineBase.get_epoch_model(config)]))
"""


def returnn_models(run_dir, num_epochs, task="train"):
    """RETURNN's own model search over run_dir (EngineBase.get_existing_models
    and get_epoch_model), in a subprocess: selecting RETURNN's backend engine
    turns off TensorFlow's eager mode for the whole process, which the other
    interop tests need."""
    result = subprocess.run([sys.executable, "-c", _MODEL_SEARCH, os.path.join(str(run_dir), "epoch"),
                             str(num_epochs), task], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    existing, (epoch, filename) = json.loads(result.stdout.strip().splitlines()[-1])
    return {int(k): v for k, v in existing.items()}, (epoch, filename)


def test_returnn_reads_what_the_returnn_layout_wrote(tmp_path):
    run_dir = tmp_path / "models"
    nets = {epoch: model(epoch) for epoch in range(1, 6)}
    scores = {1: 0.9, 2: 0.3, 3: 0.7, 4: 0.5, 5: 0.6}
    lrs = {1: 1e-3, 2: 1e-3, 3: 5e-4, 4: 5e-4, 5: 2.5e-4}
    with ckpt.Manager(run_dir, layout="returnn", policy=ckpt.ReturnnPolicy(keep_last_n=1, keep_best_n=1)) as manager:
        for epoch, net in nets.items():
            manager.save(epoch * 100, parts={"model": net.state_dict(),
                                             "optimizer": optimizer_for(net).state_dict()},
                         epoch=epoch, metrics={"dev_score": scores[epoch], "learning_rate": lrs[epoch]})
        manager.wait()
        entries = manager.list()

    # RETURNN's cleanup rules with keep_last_n=1, keep_best_n=1: the best (2),
    # the last (5), and its default keep pattern for a last epoch of 5: every
    # 4th epoch and the doublings of 5 (4, 5).
    assert [e.epoch for e in entries] == [2, 4, 5]
    assert [e.step for e in entries] == [200, 400, 500]
    assert sorted(os.listdir(run_dir)) == sorted(
        ["ckpt_manager.json", "ckpt_manager.lock", "learning_rates"] +
        [f"epoch.00{e}{ext}" for e in (2, 4, 5) for ext in (".pt", ".opt.pt")])

    # RETURNN's LearningRateControl (its constant-rate kind) reads every epoch's record, pruned ones too.
    control = ConstantLearningRate(default_learning_rate=1.0, filename=str(run_dir / "learning_rates"))
    assert sorted(control.epoch_data) == [1, 2, 3, 4, 5]
    for epoch in scores:
        assert control.epoch_data[epoch].learning_rate == lrs[epoch]
        assert control.epoch_data[epoch].error == {"dev_score": scores[epoch]}

    # RETURNN's model search: the newest epoch with model and optimizer state.
    existing, (epoch, filename) = returnn_models(run_dir, num_epochs=5)
    assert sorted(existing) == [2, 4, 5]
    assert (epoch, filename) == (5, str(run_dir / "epoch.005"))

    # What RETURNN's engine loads: torch.load(...)["model"] into the module,
    # the optimizer state into a real optimizer.
    state = torch.load(run_dir / "epoch.005.pt", weights_only=True)
    assert state["epoch"] == 5 and state["step"] == 500
    assert state["effective_learning_rate"] == lrs[5]
    fresh = model(99)
    fresh.load_state_dict(state["model"], strict=True)
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, nets[5].state_dict()[name]), name
    opt = torch.optim.Adam(fresh.parameters(), lr=1e-3)
    opt.load_state_dict(torch.load(run_dir / "epoch.005.opt.pt", weights_only=True))
    expected = optimizer_for(model(5)).state_dict()
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], expected["state"][0]["exp_avg"])

    # ckpt's own reading gives the model state back.
    with ckpt.Manager(run_dir, read_only=True) as reader:
        loaded = reader.load(500, framework="torch")
    assert sorted(loaded) == sorted(nets[5].state_dict())
    assert ckpt.list_run_directory(run_dir).layout == "returnn"


def test_continuing_a_directory_returnn_wrote(tmp_path):
    run_dir = tmp_path / "models"
    run_dir.mkdir()
    # RETURNN's own epochs 1 and 2, as its _save_model writes them.
    for epoch in (1, 2):
        torch.save({"model": model(epoch).state_dict(), "epoch": epoch, "step": epoch * 10,
                    "effective_learning_rate": 0.01, "returnn_version": "1.0"}, run_dir / f"epoch.00{epoch}.pt")
    control = ConstantLearningRate(default_learning_rate=0.01, filename=str(run_dir / "learning_rates"))
    control.set_epoch_error(1, {"dev_score": 0.3})
    control.set_epoch_error(2, {"dev_score": 0.8})
    control.get_learning_rate_for_epoch(3)  # RETURNN records the coming epoch's rate in advance
    control.save()
    before = {name: os.stat(run_dir / name).st_mtime_ns for name in ("epoch.001.pt", "epoch.002.pt")}

    with ckpt.Manager(run_dir, layout="returnn", keep_last=1) as manager:
        # resumes from RETURNN's epoch 2
        report = manager.restore_latest(model(0))
        assert report.ok
        with pytest.raises(ValueError, match="not newer than epoch 2"):
            manager.save(30, model(3).state_dict(), epoch=2)
        # epoch 3's learning rate is RETURNN's record already; epoch 4 brings its own
        manager.save(30, model(3).state_dict(), epoch=3, metrics={"dev_score": 0.3})
        manager.save(40, model(4).state_dict(), epoch=4, metrics={"dev_score": 0.4, "learning_rate": 0.005})
        manager.wait()
        assert [e.epoch for e in manager.list()] == [1, 2, 4]
    # RETURNN's files are untouched, its records kept, ckpt's merged in.
    assert {name: os.stat(run_dir / name).st_mtime_ns for name in before} == before
    control = ConstantLearningRate(default_learning_rate=0.01, filename=str(run_dir / "learning_rates"))
    assert control.epoch_data[1].error == {"dev_score": 0.3}
    assert control.epoch_data[3].error == {"dev_score": pytest.approx(0.3)}
    assert control.epoch_data[4].error == {"dev_score": pytest.approx(0.4)}
    assert control.epoch_data[4].learning_rate == 0.005
    # For search (not training), RETURNN takes the newest model: ckpt's epoch 4.
    _, (epoch, _) = returnn_models(run_dir, num_epochs=4, task="search")
    assert epoch == 4
