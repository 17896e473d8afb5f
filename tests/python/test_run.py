"""ckpt.Run (docs/run.md): the start decision (fresh, continue, continue after a
crash between two saves), calls in the wrong stage, module files on disk and a
frozen encoder's file deduplicated, init-only parts never saved, preloads on
the fresh start only or always, and a training run SIGKILLed mid-epoch and
resumed, bit-identical to an uninterrupted one. Real torch, real
subprocesses; expected values come from torch, never from ckpt.

Run: .venv/bin/python -m pytest tests/python/test_run.py -q
"""

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import ckpt
from ckpt._run_state import decide_start, torch_optimizer_state

HERE = os.path.dirname(os.path.abspath(__file__))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def batches(n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g)) for _ in range(n)]


def train(run, model, optimizer, loader, epochs, metric=None):
    for epoch in run.epochs(epochs):
        for x, y in run.steps(loader):
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if metric is not None:
            run.report(dev_loss=metric(epoch))


def leaf_names(tree, prefix=""):
    """Dotted names of a flat or nested dict's leaves."""
    names = []
    for key, value in tree.items():
        if isinstance(value, dict):
            names += leaf_names(value, prefix + str(key) + ".")
        else:
            names.append(prefix + str(key))
    return sorted(names)


def same_state(a, b):
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ------------------------------------------------------------ the start decision

@pytest.mark.parametrize("steps, expected", [
    ([], ("fresh", None)),
    ([5], ("continue", 5)),
    ([5, 10, 15], ("continue", 15)),
    ([15, 10], ("continue", 15)),  # by step, not by listing position
])
def test_decide_start_table(steps, expected):
    assert tuple(decide_start([SimpleNamespace(step=s) for s in steps])) == expected


def test_fresh_then_continue(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ckpt.Run(tmp_path / "run", model=model, optimizer=opt) as run:
        assert run.fresh and not run.continued and run.start_step is None and run.stage == "setup"
        with run.init():
            assert run.stage == "init"
        assert run.stage == "ready"
        train(run, model, opt, batches(), 2)
        assert run.stage == "done" and run.global_step == 8 and run.epochs_done == 2
    assert [e.step for e in ckpt.ls(tmp_path / "run").checkpoints] == [4, 8]
    trained = {k: v.clone() for k, v in model.state_dict().items()}

    torch.manual_seed(1)
    again = Net()
    opt2 = torch.optim.SGD(again.parameters(), lr=0.1)
    with ckpt.Run(tmp_path / "run", model=again, optimizer=opt2) as run:
        assert run.continued and not run.fresh and run.start_step == 8
        with run.init():
            pass
        same_state(again.state_dict(), trained)
        assert (run.epochs_done, run.global_step, run.batch_in_epoch) == (2, 8, 0)
        assert run.restore_report.ok
        assert list(run.epochs(2)) == []  # the run is complete: nothing to do
        assert run.stage == "done"
        # More epochs continue from the third.
        seen = []
        for epoch in run.epochs(3):
            seen.append(epoch)
            for _ in run.steps(batches()):
                pass
        assert seen == [3] and run.global_step == 12


def test_continue_after_a_crash_between_two_saves(tmp_path):
    """A save cut short (never committed) is not what a restart continues
    from: the newest committed one is. (The SIGKILL test below kills a real
    run between two saves.)"""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ckpt.Run(tmp_path / "run", model=model, optimizer=opt, save_every_steps=3) as run:
        train(run, model, opt, batches(5), 1)
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    assert [e.step for e in ckpt.ls(tmp_path / "run").checkpoints] == [3, 5]
    # What a save of step 6 killed midway leaves: its temporary; a step directory without its record.
    os.mkdir(tmp_path / "run" / ".step-00000006.ckpt-tmp-0123456789abcdef")
    os.mkdir(tmp_path / "run" / "step-00000006")
    (tmp_path / "run" / "step-00000006" / "state.safetensors").write_bytes(b"half a file")
    torch.manual_seed(1)
    again = Net()
    with ckpt.Run(tmp_path / "run", model=again, optimizer=torch.optim.SGD(again.parameters(), lr=0.1)) as run:
        assert run.continued and run.start_step == 5
        with run.init():
            pass
        assert (run.global_step, run.epochs_done) == (5, 1)
    same_state(again.state_dict(), trained)


def test_continue_restores_the_optimizer(tmp_path):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with ckpt.Run(tmp_path / "run", model=model, optimizer=opt, save_every_steps=2, save_every_epochs=None) as run:
        train(run, model, opt, batches(7), 1)
    # Every second step, and the last epoch's end.
    assert [e.step for e in ckpt.ls(tmp_path / "run").checkpoints] == [2, 4, 6, 7]
    torch.manual_seed(3)
    other = Net()
    opt2 = torch.optim.Adam(other.parameters(), lr=0.01)
    with ckpt.Run(tmp_path / "run", model=other, optimizer=opt2) as run:
        with run.init():
            pass
        assert run.start_step == 7
    a, b = opt.state_dict(), opt2.state_dict()
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys() and len(a["state"]) == 4
    for key, value in a["state"].items():
        for field, tensor in value.items():
            assert torch.equal(b["state"][key][field], tensor), (key, field)
    stored = {"state": {"0": {"step": torch.tensor(1.0)}}, "param_groups": [{"lr": 0.1, "params": ["0"]}]}
    assert torch_optimizer_state(stored)["state"].keys() == {0}
    assert torch_optimizer_state(stored)["param_groups"][0]["params"] == [0]
    with pytest.raises(ValueError, match="param_groups"):
        torch_optimizer_state({"state": {}})


# ------------------------------------------------------------ stages

def test_wrong_stage_calls(tmp_path):
    model = Net()
    run = ckpt.Run(tmp_path / "run", model=model)
    try:
        @run.only_in("init")
        def init_head():
            nn.init.zeros_(model.head.bias)
            return "done"

        with pytest.raises(ckpt.StageError) as error:
            init_head()
        message = str(error.value)
        assert "init_head" in message and "'init'" in message and "'setup'" in message
        assert error.value.stage == "setup" and error.value.allowed == ("init",)
        assert isinstance(error.value, ckpt.CheckpointError)
        with pytest.raises(ckpt.StageError, match="Run.steps"):
            run.steps(batches())
        with pytest.raises(ckpt.StageError, match="Run.report"):
            run.report(dev_loss=1.0)
        with run.init():
            assert init_head() == "done"
            with pytest.raises(ckpt.StageError, match="Run.init"):
                with run.init():
                    pass
        with pytest.raises(ckpt.StageError, match="'ready'"):
            init_head()

        @run.only_in("epoch_end")
        def evaluate():
            return run.stage

        stages = []
        for epoch in run.epochs(1):
            stages.append(run.stage)
            with pytest.raises(ckpt.StageError, match="evaluate.*'epoch_start'"):
                evaluate()
            for _ in run.steps(batches(2)):
                stages.append(run.stage)
                with pytest.raises(ckpt.StageError, match="Run.steps"):
                    run.steps(batches())
            stages.append(evaluate())
        assert stages == ["epoch_start", "train_step", "train_step", "epoch_end"]
        assert run.stage == "done"
        with pytest.raises(ValueError, match="unknown stage 'training'"):
            run.only_in("training")
    finally:
        run.close()


def test_an_epoch_must_iterate_steps(tmp_path):
    with ckpt.Run(tmp_path / "run", model=Net()) as run:
        with pytest.raises(ckpt.StageError, match="without iterating run.steps"):
            for _ in run.epochs(1):
                pass


def test_bad_options(tmp_path):
    with pytest.raises(ValueError, match="nn.Module"):
        ckpt.Run(tmp_path / "a", model={"w": torch.zeros(2)})
    with pytest.raises(ValueError, match="save_every_steps"):
        ckpt.Run(tmp_path / "a", model=Net(), save_every_steps=0)
    with pytest.raises(ValueError, match="encoder.pt"):
        ckpt.Run(tmp_path / "a", model=Net(), files={"encoder": "encoder.pt"})
    with pytest.raises(ValueError, match="main file"):
        ckpt.Run(tmp_path / "a", model=Net(), files={"encoder": "state.safetensors"})
    with pytest.raises(ValueError, match="not a module file name"):
        ckpt.Run(tmp_path / "a", model=Net(), files={"encoder": "sub/enc.safetensors"})
    with pytest.raises(ValueError, match="epochs"):
        with ckpt.Run(tmp_path / "b", model=Net()) as run:
            run.epochs(-1)
    with ckpt.Run(tmp_path / "c", model=Net(), files={"decoder": "decoder.safetensors"}) as run:
        with pytest.raises(ValueError, match="decoder"):  # no such module: at the init's end, not at a save
            with run.init():
                pass


# ------------------------------------------------------------ files, init-only, preloads

class Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(4, 6)
        self.decoder = nn.Module()
        self.decoder.lm = nn.Linear(6, 6)
        self.decoder.out = nn.Linear(6, 2)
        self.pretrained_lm = nn.Linear(6, 6)

    def forward(self, x):
        return self.decoder.out(self.decoder.lm(self.encoder(x)) + self.pretrained_lm(self.encoder(x)))


def test_module_files_dedup_and_init_only(tmp_path):
    torch.manual_seed(0)
    model = Frozen()
    model.encoder.requires_grad_(False)
    model.pretrained_lm.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    files = {"encoder": "encoder.safetensors", "decoder.lm": "lm.safetensors"}
    with ckpt.Run(tmp_path / "run", model=model, optimizer=opt, files=files, init_only=["pretrained_lm"],
                  save_every_steps=2, save_every_epochs=None) as run:
        train(run, model, opt, batches(4), 1)
        entries = run.manager.list()
    assert [e.step for e in entries] == [2, 4]
    names = {e.step: sorted(os.path.basename(p) for p in e.parts) for e in entries}
    assert names == {step: ["encoder.safetensors", "lm.safetensors", "state.safetensors"] for step in (2, 4)}
    paths = {e.step: {os.path.basename(p): p for p in e.parts} for e in entries}
    enc2, enc4 = os.stat(paths[2]["encoder.safetensors"]), os.stat(paths[4]["encoder.safetensors"])
    assert enc2.st_ino == enc4.st_ino and enc4.st_nlink >= 2  # the frozen encoder: one file, linked
    lm2, lm4 = os.stat(paths[2]["lm.safetensors"]), os.stat(paths[4]["lm.safetensors"])
    assert lm2.st_ino != lm4.st_ino  # trained: written again
    encoder = ckpt.load(paths[4]["encoder.safetensors"], framework="torch")
    lm = ckpt.load(paths[4]["lm.safetensors"], framework="torch")
    main = ckpt.load(entries[-1].path, framework="torch")
    # Each file a subtree of the one checkpoint tree: {"model": its parameters}.
    assert leaf_names(encoder) == ["model.encoder.bias", "model.encoder.weight"]
    assert leaf_names(lm) == ["model.decoder.lm.bias", "model.decoder.lm.weight"]
    assert leaf_names(main["model"]) == ["decoder.out.bias", "decoder.out.weight"]
    with ckpt.open(paths[4]["lm.safetensors"], framework="torch") as f:
        assert torch.equal(f.get("model.decoder.lm.weight"), model.decoder.lm.weight)
    everything = " ".join(leaf_names(encoder) + leaf_names(lm) + leaf_names(main))
    assert "pretrained_lm" not in everything  # init-only: never saved

    torch.manual_seed(5)
    again = Frozen()
    lm_init = again.pretrained_lm.weight.detach().clone()
    with ckpt.Run(tmp_path / "run", model=again, files=files, init_only=["pretrained_lm"]) as run:
        with run.init():
            pass
        assert run.restore_report.ok and run.restore_report.missing == []
        assert run.module_files_report.ok
    for name, value in model.state_dict().items():
        if not name.startswith("pretrained_lm"):
            assert torch.equal(again.state_dict()[name], value), name
    assert torch.equal(again.pretrained_lm.weight, lm_init)  # what the init gave it
    # The model of the newest checkpoint as one state dict, read without the lock.
    merged = ckpt.Run.model_state(tmp_path / "run", files=files, init_only=["pretrained_lm"], framework="torch")
    assert merged.ok
    expected = {k: v for k, v in model.state_dict().items() if not k.startswith("pretrained_lm")}
    assert sorted(merged.state) == sorted(expected)
    for name, value in expected.items():
        assert torch.equal(merged.state[name], value), name
    with pytest.raises(FileNotFoundError, match="step 3"):
        ckpt.Run.model_state(tmp_path / "run", files=files, step=3)


def test_several_top_level_models_and_a_shared_file(tmp_path):
    torch.manual_seed(0)
    models = {"asr": Net(), "lm": Net()}
    params = [p for m in models.values() for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    files = {"lm": "lm.safetensors", "asr.encoder": "lm.safetensors"}  # two modules, one file
    with ckpt.Run(tmp_path / "run", model=models, optimizer=opt, files=files) as run:
        for epoch in run.epochs(1):
            for x, y in run.steps(batches(2)):
                loss = sum(nn.functional.mse_loss(m(x), y) for m in models.values())
                opt.zero_grad()
                loss.backward()
                opt.step()
        entry = run.manager.latest()
    assert sorted(os.path.basename(p) for p in entry.parts) == ["lm.safetensors", "state.safetensors"]
    lm_file = ckpt.load([p for p in entry.parts if p.endswith("lm.safetensors")][0])
    assert leaf_names(lm_file) == sorted("model." + n for n in ["asr.encoder.0.bias", "asr.encoder.0.weight"] +
                                         ["lm." + k for k in models["lm"].state_dict()])
    torch.manual_seed(1)
    again = {"asr": Net(), "lm": Net()}
    with ckpt.Run(tmp_path / "run", model=again, files=files) as run:
        with run.init():
            pass
    for name in models:
        same_state(again[name].state_dict(), models[name].state_dict())
    with pytest.raises(ValueError, match="top-level model name"):
        ckpt.Run(tmp_path / "other", model={"a.b": Net()})


def test_a_crash_inside_an_epoch_continues_there(tmp_path):
    """An exception in a step (a crash) after a mid-epoch save: the next Run
    continues inside that epoch, and a loader that is shorter now is an error."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="crash"):
        with ckpt.Run(tmp_path / "run", model=model, optimizer=opt, save_every_steps=2) as run:
            for epoch in run.epochs(2):
                for x, y in run.steps(batches(4)):
                    if run.global_step == 3:
                        raise RuntimeError("crash")
                    nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
                    opt.zero_grad()
    assert [e.step for e in ckpt.ls(tmp_path / "run").checkpoints] == [2]
    again = Net()
    with ckpt.Run(tmp_path / "run", model=again, optimizer=torch.optim.SGD(again.parameters(), lr=0.1)) as run:
        with run.init():
            pass
        assert (run.epoch, run.epochs_done, run.global_step, run.batch_in_epoch) == (1, 0, 2, 2)
        for epoch in run.epochs(2):
            assert epoch == 1
            with pytest.raises(ValueError, match="after batch 2 of epoch 1, but the loader gives 1 batches"):
                for _ in run.steps(batches(1)):
                    pass
            break


def test_not_a_runs_checkpoint_and_bad_reports(tmp_path):
    with ckpt.Manager(tmp_path / "plain") as manager:
        manager.save(1, Net().state_dict())
    with ckpt.Run(tmp_path / "plain", model=Net()) as run:
        assert run.continued
        with pytest.raises(ckpt.CheckpointError, match="not a ckpt.Run checkpoint"):
            with run.init():
                pass
    with ckpt.Run(tmp_path / "run", model=Net()) as run:
        for epoch in run.epochs(1):
            with pytest.raises(ValueError, match="the loader gave no batch"):
                for _ in run.steps([]):
                    pass
            break
    with ckpt.Run(tmp_path / "run2", model=Net()) as run:
        for epoch in run.epochs(1):
            for _ in run.steps(batches(1)):
                with pytest.raises(ValueError, match="'dev_loss' is 'low', not a number"):
                    run.report(dev_loss="low")


def test_a_file_missing_from_a_step_is_reported(tmp_path):
    torch.manual_seed(0)
    model = Net()
    with ckpt.Run(tmp_path / "run", model=model, files={"encoder": "encoder.safetensors"}) as run:
        train(run, model, torch.optim.SGD(model.parameters(), lr=0.1), batches(2), 1)
    # The same run without the file assignment: the encoder's file is one the run does not assign.
    with ckpt.Run(tmp_path / "run", model=Net()) as run:
        with pytest.raises(ckpt.MismatchError, match="encoder"):
            with run.init():
                pass


def write_pretrained(path, seed):
    torch.manual_seed(seed)
    pre = Net()
    ckpt.save(path, pre.state_dict())
    return {k: v.clone() for k, v in pre.state_dict().items() if k.startswith("encoder.")}


@pytest.mark.parametrize("when", [True, "always"])
def test_preloads_fresh_only_or_always(tmp_path, when):
    pretrained = write_pretrained(tmp_path / "pre.safetensors", seed=7)
    preload = ckpt.Preload(str(tmp_path / "pre.safetensors"), name="encoder", prefix={"encoder.": "encoder."},
                           init_for_train=when)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with ckpt.Run(tmp_path / "run", model=model, optimizer=opt, preloads=[preload]) as run:
        with run.init():
            pass
        for name, value in pretrained.items():
            assert torch.equal(model.state_dict()[name], value), name
        assert [r.applied for r in run.preload_report.preloads] == [True]
        train(run, model, opt, batches(2), 1)
        trained_encoder = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("encoder.")}
        assert not torch.equal(trained_encoder["encoder.0.weight"], pretrained["encoder.0.weight"])
        saved = leaf_names(ckpt.load(run.manager.latest().path, framework="torch")["model"])
    torch.manual_seed(1)
    again = Net()
    with ckpt.Run(tmp_path / "run", model=again, optimizer=torch.optim.SGD(again.parameters(), lr=0.5),
                  preloads=[preload]) as run:
        with run.init():
            pass
        assert run.continued and run.restore_report.ok
        if when is True:  # a resumed model is never overwritten
            assert run.preload_report.preloads[0].applied is False
            assert saved == leaf_names(model.state_dict())
            for name, value in trained_encoder.items():
                assert torch.equal(again.state_dict()[name], value), name
        else:  # every run, and never saved
            assert run.preload_report.preloads[0].applied
            for name, value in pretrained.items():
                assert torch.equal(again.state_dict()[name], value), name
            assert sorted(run.init_only) == sorted(pretrained)
            assert saved == ["head.bias", "head.weight"]


# ------------------------------------------------------------ interrupted and resumed

def child(run_dir, out, handshake=False):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    args = [sys.executable, os.path.join(HERE, "run_child.py"), str(run_dir), str(out)]
    if handshake:
        args.append("--handshake")
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def finish(process, timeout=60):
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr
    return stdout.split("\n")


def test_sigkilled_and_resumed_run_is_bit_identical(tmp_path):
    whole = child(tmp_path / "whole", tmp_path / "whole.pt")
    killed = child(tmp_path / "killed", tmp_path / "never.pt", handshake=True)
    try:
        # Kill after step 12 is trained, two steps past the save of step 10 (epoch 2, batch 4 of 8).
        while True:
            line = killed.stdout.readline()
            assert line, killed.stderr.read()
            if line.startswith("at "):
                _, at, _, saved = line.split()
                if int(at) == 12:
                    assert saved == "10"
                    break
            killed.stdin.write("go\n")
            killed.stdin.flush()
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert killed.returncode == -signal.SIGKILL
    assert not os.path.exists(tmp_path / "never.pt")
    assert ckpt.ls(tmp_path / "killed").checkpoints[-1].step == 10
    whole_lines = finish(whole)
    assert "start fresh None" in whole_lines and "first 1" in whole_lines
    resumed_lines = finish(child(tmp_path / "killed", tmp_path / "resumed.pt"))
    assert "start continue 10" in resumed_lines and "first 11" in resumed_lines

    a = torch.load(tmp_path / "whole.pt")
    b = torch.load(tmp_path / "resumed.pt")
    same_state(a["model"], b["model"])
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for key in a["optimizer"]["state"]:
        for field, value in a["optimizer"]["state"][key].items():
            assert torch.equal(value, b["optimizer"]["state"][key][field]), (key, field)
    # Both runs committed the same last checkpoint: the same model and record.
    last_a, last_b = ckpt.ls(tmp_path / "whole").checkpoints[-1], ckpt.ls(tmp_path / "killed").checkpoints[-1]
    assert last_a.step == last_b.step == 24
    assert last_a.metrics == last_b.metrics and "dev_loss" in last_a.metrics
