"""ckpt.Run: a training run's stages over a checkpoint manager (docs/run.md).

A Run ties a :class:`ckpt.Manager`, a model, an optimizer, per-module files
(``ckpt.split_by_module`` / ``ckpt.merge_module_files``) and preloads
(``ckpt.apply_preloads``) together, and makes the stages explicit: it starts
**fresh** (init, then preloads) or **continues** from the run's newest
committed checkpoint (model, optimizer, counters, random generator states,
the data position), then runs the epoch and step loops, saving every N steps
and at epoch ends. Which way it starts is decided by
:func:`ckpt._run_state.decide_start`, a pure function of the listing; the
files are touched in :meth:`Run._save` and :meth:`Run._restore` only."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ._errors import CheckpointError, MismatchError
from ._manager import Manager
from . import _run_state as rs

PathLike = Union[str, "os.PathLike[str]"]

# Every stage a Run passes through, in order (docs/run.md, "Stages").
STAGES = ("setup", "init", "ready", "epoch_start", "train_step", "epoch_end", "done")

_PART_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
_MAIN_PART = "state"


class StageError(CheckpointError, RuntimeError):
    """A call in a stage it is not for: a function registered with
    :meth:`Run.only_in` for one stage called in another, or a Run method
    called out of order (``steps`` outside an epoch, ``init`` twice). The
    message names the function, the stages it is for and the current one;
    ``function``, ``allowed`` and ``stage`` hold them."""

    def __init__(self, function: str, allowed: Sequence[str], stage: str, hint: str = ""):
        self.function, self.allowed, self.stage = function, tuple(allowed), stage
        stages = " or ".join(repr(s) for s in allowed)
        super().__init__(f"{function} is for stage {stages}, but the run is in stage {stage!r}{hint}")


def _ckpt() -> Any:
    return sys.modules["ckpt"]


def _torch() -> Any:
    import torch
    return torch


def _is_module(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def _under(name: str, prefixes: Iterable[str]) -> bool:
    """True if ``name`` is one of ``prefixes`` or under one at a component
    boundary (the module rule of docs/modules.md)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _format_extensions(format_id: str) -> Tuple[List[str], List[str]]:
    """(the extensions of ``format_id``, every registered format's)."""
    own: List[str] = []
    every: List[str] = []
    for entry in _ckpt().formats():
        extensions = [e if e.startswith(".") else "." + e for e in entry.get("extensions", [])]
        every.extend(extensions)
        if entry.get("id") == format_id:
            own.extend(extensions)
    return own, every


def part_name_of(file: str, format_id: str) -> str:
    """The manager part name of the module file ``file``: the name without its
    extension (``encoder.safetensors`` -> ``encoder``); a name without one is
    the part name itself. Raises ValueError for an extension of another
    format than the run's, a name that is not 1-100 of ``[A-Za-z0-9_-]``
    after it, and the main file's name ``state``."""
    if not isinstance(file, str):
        raise ValueError(f"files: the file name {file!r} is not a string")
    own, every = _format_extensions(format_id)
    base = file
    for extension in sorted(set(every), key=len, reverse=True):
        if file.endswith(extension) and len(file) > len(extension):
            if extension not in own:
                raise ValueError(f"files: {file!r} has the extension {extension!r}, but the run writes "
                                 f"{format_id} files ({', '.join(own) or 'no extension'})")
            base = file[:-len(extension)]
            break
    if not _PART_NAME.fullmatch(base):
        raise ValueError(f"files: {file!r} is not a module file name: 1 to 100 of A-Z a-z 0-9 _ - "
                         f"and the format's extension")
    if base == _MAIN_PART:
        raise ValueError(f"files: {file!r} is the main file's name; modules not in `files` go there already")
    return base


class Run:
    """One training run in ``run_dir``: its stages, saves and restarts.

    ``model`` is a torch ``nn.Module``, or a dict of name to ``nn.Module``
    for several top-level models (their parameters are named ``name.param``).
    ``optimizer`` (optional) a torch optimizer, saved and restored with the
    model. ``files`` assigns modules to files of their own (``{"encoder":
    "encoder.safetensors"}``: the deepest assigned module wins; the rest goes
    to the main file); ``init_only`` names modules or parameters that are
    never saved (loaded by the init body or a preload on every start);
    ``preloads`` a list of :class:`ckpt.Preload`, applied in order at the end
    of the init stage. ``save_every_steps=N`` saves after every N-th training
    step, ``save_every_epochs=M`` at the end of every M-th epoch; the last
    epoch of :meth:`epochs` is always saved. ``keep_last``, ``keep_best``,
    ``metric``, ``mode``, ``keep_missing_metric`` (default False: step saves
    without the metric are left to ``keep_last``), ``format`` and ``fsync``
    go to the :class:`ckpt.Manager`. ``strict``: a continued run whose
    checkpoint does not fill the model exactly raises (False: only reported).

    The constructor opens the manager (taking the run's lock) and decides the
    start: ``fresh`` or ``continued``. Use::

        with ckpt.Run("runs/a", model=model, optimizer=opt, save_every_steps=100) as run:
            with run.init():
                if run.fresh:
                    init_weights(model)
            for epoch in run.epochs(10):
                for batch in run.steps(loader):
                    train_step(batch)
                run.report(dev_loss=evaluate(model))

    Raises ValueError for a bad option, StageError for calls out of order,
    what :class:`ckpt.Manager` raises when the run cannot be opened."""

    def __init__(self, run_dir: PathLike, *, model: Any, optimizer: Any = None,
                 files: Optional[Mapping[str, str]] = None, init_only: Iterable[str] = (),
                 preloads: Sequence[Any] = (), save_every_steps: Optional[int] = None,
                 save_every_epochs: Optional[int] = 1, keep_last: Optional[int] = None,
                 keep_best: Optional[int] = None, metric: Optional[str] = None, mode: str = "min",
                 keep_missing_metric: bool = False, format: str = "safetensors", fsync: bool = True,
                 strict: bool = True):
        self._models = self._check_model(model)
        torch = _torch()
        self._target = model if _is_module(model) else torch.nn.ModuleDict(self._models)
        if optimizer is not None and not (hasattr(optimizer, "state_dict") and hasattr(optimizer, "load_state_dict")):
            raise ValueError(f"optimizer must be a torch optimizer (state_dict, load_state_dict), not {type(optimizer).__name__}")
        self._optimizer = optimizer
        for name, value in (("save_every_steps", save_every_steps), ("save_every_epochs", save_every_epochs)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, not {value!r}")
        self._save_every_steps, self._save_every_epochs = save_every_steps, save_every_epochs
        self._files = {str(k): v for k, v in (files or {}).items()}
        for module in self._files:
            if not module:
                raise ValueError("files: an empty module name")
        self._file_of_part = _file_names(self._files, format)
        self._part_of_file = {file: part for part, file in self._file_of_part.items()}
        if isinstance(init_only, str):
            init_only = [init_only]
        self._user_init_only = [str(n) for n in init_only]
        self._init_only = list(self._user_init_only)  # plus what "always" preloads set
        self._preloads = list(preloads)
        self._strict = strict
        self.manager = Manager(run_dir, keep_last=keep_last, keep_best=keep_best, metric=metric, mode=mode,
                               keep_missing_metric=keep_missing_metric, format=format, fsync=fsync)
        self._start = rs.decide_start(self.manager.list())
        self._stage = "setup"
        self._epoch = 0            # the epoch in progress (or last finished); 1-based
        self._epochs_done = 0
        self._global_step = 0      # training steps finished
        self._batch_in_epoch = 0   # steps finished in the epoch in progress
        self._metrics: Dict[str, float] = {}
        self._resume: Optional[Dict[str, Any]] = None  # the continued checkpoint's RNG states, until used
        self._epoch_rng: Optional[Dict[str, Any]] = None
        self._steps_gen: Optional[Iterator[Any]] = None
        self._step_save_pending = False
        self.last_saved_step: Optional[int] = None
        self.restore_report: Any = None
        self.module_files_report: Any = None
        self.preload_report: Any = None

    # ------------------------------------------------------------ state

    @staticmethod
    def _check_model(model: Any) -> Dict[str, Any]:
        if _is_module(model):
            return {"": model}
        if isinstance(model, Mapping) and model:
            for name, module in model.items():
                if not isinstance(name, str) or not name or "." in name:
                    raise ValueError(f"model: {name!r} is not a top-level model name (non-empty, no '.')")
                if not _is_module(module):
                    raise ValueError(f"model[{name!r}] is a {type(module).__name__}, not a torch nn.Module")
            return dict(model)
        raise ValueError(f"model must be a torch nn.Module or a non-empty dict of them, not {type(model).__name__}")

    @property
    def stage(self) -> str:
        """The stage the run is in: one of :data:`STAGES`."""
        return self._stage

    @property
    def fresh(self) -> bool:
        """True if the run starts with no committed checkpoint (the init stage's preloads apply)."""
        return self._start.mode == "fresh"

    @property
    def continued(self) -> bool:
        """True if the run continues from its newest committed checkpoint."""
        return self._start.mode == "continue"

    @property
    def start_step(self) -> Optional[int]:
        """The step a continued run restores; None for a fresh one."""
        return self._start.step

    @property
    def epoch(self) -> int:
        """The epoch in progress (1-based); the last finished one between
        epochs; 0 before the first."""
        return self._epoch

    @property
    def epochs_done(self) -> int:
        """Epochs finished."""
        return self._epochs_done

    @property
    def global_step(self) -> int:
        """Training steps finished, over all epochs (the manager's step)."""
        return self._global_step

    @property
    def batch_in_epoch(self) -> int:
        """Training steps finished in the epoch in progress."""
        return self._batch_in_epoch

    @property
    def init_only(self) -> List[str]:
        """The names never saved: ``init_only`` and what "always" preloads set."""
        return list(self._init_only)

    @property
    def run_dir(self) -> str:
        return self.manager.run_dir

    def _require(self, function: str, allowed: Sequence[str], hint: str = "") -> None:
        if self._stage not in allowed:
            raise StageError(function, allowed, self._stage, hint)

    def only_in(self, *stages: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A decorator: the function may only be called while the run is in
        one of ``stages`` (``@run.only_in("init")`` for a parameter
        initializer); called in another it raises :class:`StageError` naming
        it, its stages and the current one. Raises ValueError for a stage
        name not in :data:`STAGES`."""
        if not stages:
            raise ValueError("only_in needs at least one stage")
        for stage in stages:
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r}; the stages are {', '.join(STAGES)}")

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            name = getattr(function, "__qualname__", repr(function))

            @functools.wraps(function)
            def in_stage(*args: Any, **kwargs: Any) -> Any:
                self._require(name, stages)
                return function(*args, **kwargs)
            in_stage.stages = tuple(stages)  # type: ignore[attr-defined]
            return in_stage
        return register

    # ------------------------------------------------------------ init

    @contextlib.contextmanager
    def init(self) -> Iterator["Run"]:
        """The init stage. The body (the user's initializers) always runs, in
        stage "init"; when it ends without an exception, a fresh run applies
        the preloads (``init_for_train`` True or "always"), a continued run
        restores its newest checkpoint (model through its module files,
        optimizer, counters, random generator states) and re-applies the
        "always" preloads. Then the stage is "ready". Raises StageError
        outside stage "setup"; MismatchError (``strict``) for a checkpoint
        that does not fill the model; what the preloads raise; ValueError
        for a ``files`` module or ``init_only`` name that matches no
        parameter."""
        self._require("Run.init", ("setup",))
        self._stage = "init"
        yield self
        if self.fresh:
            self._apply_preloads("fresh")
        else:
            self._restore()
        if self._files or self._init_only:  # a module or init-only name that matches nothing: now, not at the first save
            _ckpt().split_by_module(self._model_state(), files=self._files, init_only=self._init_only,
                                    main_file=_MAIN_PART)
        self._stage = "ready"

    def _model_state(self) -> Dict[str, Any]:
        return dict(self._target.state_dict())

    def _apply_preloads(self, stage: str) -> None:
        if not self._preloads:
            return
        torch = _torch()
        live = self._target.state_dict(keep_vars=True)
        report = _ckpt().apply_preloads(self._model_state(), self._preloads, stage=stage)
        with torch.no_grad():
            for result in report.preloads:
                for target, _source in result.set:
                    live[target].copy_(torch.as_tensor(_leaf(report.state, target)))
        self._init_only += [n for n in report.init_only if n not in self._init_only]
        self.preload_report = report

    # ------------------------------------------------------------ restore

    def _restore(self) -> None:
        ck = _ckpt()
        entry = next(e for e in self.manager.list() if e.step == self._start.step)
        main, parts = _read_checkpoint(entry, self._file_of_part, "torch")
        record = main[rs.RUN_KEY]
        version = int(rs.scalar(record.get("version", 0)))
        if version > rs.RUN_RECORD_VERSION:
            raise CheckpointError(f"{entry.path}: run record version {version} is newer than this ckpt reads "
                                  f"({rs.RUN_RECORD_VERSION})")
        # The init-only names the run had when it saved ("always" preloads' included): never missing.
        self._init_only += [n for n in _strings(record.get("init_only", [])) if n not in self._init_only]
        problems: List[str] = []
        if self._files or len(parts) > 1:
            merged = ck.merge_module_files(parts, files=self._files, init_only=self._init_only,
                                           main_file=_MAIN_PART)
            self.module_files_report = merged
            if not merged.ok:
                problems.append(merged.summary)
            state = merged.state
        else:
            state = parts[_MAIN_PART]
        defaults = {name: ck.KEEP for name in self._init_only}
        report = ck.restore(self._target, state, strict=False, defaults=defaults or None)
        self._apply_preloads("continue")
        # What "always" preloads set now is init-only too.
        report.missing = [n for n in report.missing if not _under(n, self._init_only)]
        self.restore_report = report
        if not report.ok:
            problems.append(report.summary)
        if self._optimizer is not None:
            if rs.OPTIMIZER_KEY not in main:
                problems.append("the checkpoint has no optimizer state")
            else:
                live = self._optimizer.state_dict()
                self._optimizer.load_state_dict(rs.torch_optimizer_state(main[rs.OPTIMIZER_KEY], like=live))
        if problems and self._strict:
            error = MismatchError(f"{entry.path}: the run's checkpoint of step {entry.step} does not restore "
                                  f"the model: " + "; ".join(problems))
            error.report = report
            raise error
        self._epochs_done = int(rs.scalar(record["epochs_done"]))
        self._global_step = int(rs.scalar(record["global_step"]))
        self._batch_in_epoch = int(rs.scalar(record["batch_in_epoch"]))
        self._epoch = int(rs.scalar(record["epoch"]))
        self._resume = {"rng": record["rng"], "epoch_rng": record["epoch_rng"]}
        rs.set_rng(record["rng"])
        self.last_saved_step = entry.step

    # ------------------------------------------------------------ loops

    def epochs(self, n: int) -> Iterator[int]:
        """Yields the epochs still to run of ``n`` (1-based): all of them on a
        fresh run, from the one in progress (or the next) on a continued one,
        none when ``n`` are done. Each epoch's body is in stage
        "epoch_start" until it iterates :meth:`steps`; after the body the
        stage is "epoch_end" and the epoch is saved (``save_every_epochs``,
        and always the last); after the loop "done". Called in stage
        "setup" it runs an empty :meth:`init` first. Raises ValueError for a
        bad ``n``, StageError outside "setup", "ready" and "done"."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"epochs(n): n must be an int >= 0, not {n!r}")
        if self._stage == "setup":
            with self.init():
                pass
        self._require("Run.epochs", ("ready", "done"))
        return self._epoch_loop(n)

    def _epoch_loop(self, n: int) -> Iterator[int]:
        for epoch in range(self._epochs_done + 1, n + 1):
            if self._resume is not None:
                # The first epoch of a continued run starts as the original
                # did: from the epoch's start states when the checkpoint was
                # taken inside it, else from the checkpoint's.
                states = self._resume["epoch_rng"] if self._batch_in_epoch else self._resume["rng"]
                rs.set_rng(states)
                self._epoch_rng = states
            else:
                self._epoch_rng = rs.capture_rng()
            self._epoch = epoch
            self._stage = "epoch_start"
            self._steps_gen = None
            yield epoch
            if self._steps_gen is None:
                raise StageError("Run.epochs", ("train_step", "epoch_end"), self._stage,
                                 f": epoch {epoch} ended without iterating run.steps(loader)")
            self._steps_gen.close()  # a body that broke out of steps() ends the epoch there
            self._steps_gen = None
            self._stage = "epoch_end"
            self._epochs_done, self._batch_in_epoch = epoch, 0
            every = self._save_every_epochs
            if self._step_save_pending or epoch == n or (every is not None and epoch % every == 0):
                self._save(rs.capture_rng())
        self._stage = "done"

    def steps(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yields the batches of ``loader`` still to train on in this epoch, in
        stage "train_step"; counts each as a finished step when the next is
        asked for, and saves after every ``save_every_steps``-th. On a
        continued run's first epoch it iterates the loader from the epoch's
        start states and skips the batches done, so a shuffling DataLoader
        gives the remaining batches of the same order. Raises StageError
        outside "epoch_start" (once per epoch), ValueError when the loader
        gives fewer batches than a continued run had done, or none."""
        self._require("Run.steps", ("epoch_start",), " (once per epoch, inside run.epochs())")
        self._steps_gen = self._step_loop(loader)
        return self._steps_gen

    def _step_loop(self, loader: Iterable[Any]) -> Iterator[Any]:
        self._step_save_pending = False
        iterator = iter(loader)
        if self._resume is not None:
            done = self._batch_in_epoch
            if done:  # the checkpoint was taken inside this epoch: skip what it had done
                for skipped in range(done):
                    try:
                        next(iterator)
                    except StopIteration:
                        raise ValueError(f"run {self.run_dir}: the checkpoint was taken after batch {done} of "
                                         f"epoch {self._epoch}, but the loader gives {skipped} batches now") from None
                rs.set_rng(self._resume["rng"])
            self._resume = None
        pending: Optional[Dict[str, Any]] = None
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if pending is not None:  # the step before was due: saved now that it is not the epoch's last
                self._save(pending)
                self._step_save_pending, pending = False, None
            self._stage = "train_step"
            yield batch
            self._global_step += 1
            self._batch_in_epoch += 1
            if self._save_every_steps and self._global_step % self._save_every_steps == 0:
                pending = rs.capture_rng()  # before the loader's next batch draws from them
                self._step_save_pending = True
        self._stage = "epoch_end"
        if self._batch_in_epoch == 0:
            raise ValueError(f"run {self.run_dir}: epoch {self._epoch}: the loader gave no batch")

    def report(self, **metrics: float) -> None:
        """Records metrics (name=number) for the next save: the manager keeps
        them in its record and ranks by them (``keep_best``, ``metric``).
        Raises ValueError for a value that is not a number, StageError
        outside an epoch."""
        self._require("Run.report", ("epoch_start", "train_step", "epoch_end"))
        for name, value in metrics.items():
            try:
                self._metrics[name] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"report: metric {name!r} is {value!r}, not a number") from None

    # ------------------------------------------------------------ save

    def _save(self, rng: Dict[str, Any]) -> None:
        """Saves the model, the optimizer and the run's record as step
        ``global_step``: the module files as parts of one commit."""
        ck = _ckpt()
        state = self._model_state()
        if self._files or self._init_only:
            split = ck.split_by_module(state, files=self._files, init_only=self._init_only, main_file=_MAIN_PART)
        else:
            split = {_MAIN_PART: state}
        main: Dict[str, Any] = {rs.MODEL_KEY: split.pop(_MAIN_PART)}
        if self._optimizer is not None:
            main[rs.OPTIMIZER_KEY] = self._optimizer.state_dict()
        main[rs.RUN_KEY] = {
            "version": rs.RUN_RECORD_VERSION, "epoch": self._epoch, "epochs_done": self._epochs_done,
            "global_step": self._global_step, "batch_in_epoch": self._batch_in_epoch,
            "rng": rng, "epoch_rng": self._epoch_rng if self._epoch_rng is not None else rng,
            "init_only": list(self._init_only),
        }
        options: Dict[str, Any] = {"metrics": self._metrics, "epoch": self._epoch}
        if split:  # module files: parts of one commit, each a subtree of the one checkpoint tree
            parts = {_MAIN_PART: main}
            parts.update({self._part_of_file[file]: {rs.MODEL_KEY: part} for file, part in split.items()})
            self.manager.save(self._global_step, parts=parts, **options)
        else:
            self.manager.save(self._global_step, main, **options)
        self._metrics = {}
        self.last_saved_step = self._global_step

    @staticmethod
    def model_state(run_dir: PathLike, *, files: Optional[Mapping[str, str]] = None, step: Optional[int] = None,
                    init_only: Iterable[str] = (), framework: str = "numpy") -> Any:
        """The model of a Run's checkpoint in ``run_dir`` (the newest, or
        ``step``) as one state dict: its main file and its module files
        merged by ``ckpt.merge_module_files`` (``files`` and ``init_only``
        as the Run had them), without the optimizer and the run's record;
        tensors in memory as ``framework`` ("numpy" or "torch") has them.
        Read-only: takes no lock, so a finished or running run can be read.
        Returns the :class:`ckpt.ModuleFilesReport` (``.state``; ``.ok`` False
        when a parameter was in two files or the wrong one, or a file is
        missing). Raises FileNotFoundError for a run without that checkpoint,
        CheckpointError for one a Run did not write, ValueError as Run does
        for ``files``."""
        files = {str(k): v for k, v in (files or {}).items()}
        ck = _ckpt()
        entries = [e for e in ck.list_run_directory(run_dir).checkpoints if step is None or e.step == step]
        if not entries:
            raise FileNotFoundError(f"{os.fspath(run_dir)}: no checkpoint" + ("" if step is None else f" of step {step}"))
        entry = entries[-1]
        _, parts = _read_checkpoint(entry, _file_names(files, ck.detect(entry.path)), framework)
        return ck.merge_module_files(parts, files=files, init_only=list(init_only), main_file=_MAIN_PART)

    # ------------------------------------------------------------ close

    def close(self) -> None:
        """Closes the manager (waits for its saves, releases the run's lock)."""
        self.manager.close()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.manager.__exit__(exc_type, *exc)

    def __repr__(self) -> str:
        return (f"<ckpt.Run {self.run_dir!r} {self._start.mode} stage={self._stage} epoch={self._epoch} "
                f"step={self._global_step}>")


def _read_checkpoint(entry: Any, file_of_part: Mapping[str, str], framework: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the main state, {file: the model leaves of each file}) of a Run's
    checkpoint ``entry``, read into memory (not views of the files, which
    retention may delete). ``file_of_part``: part name -> the run's file name
    (other parts keep their file's name). Raises CheckpointError for a
    checkpoint a Run did not write."""
    ck = _ckpt()
    main = ck.load(entry.path, framework=framework, lazy=False)
    if not isinstance(main, Mapping) or rs.RUN_KEY not in main or rs.MODEL_KEY not in main:
        raise CheckpointError(f"{entry.path}: not a ckpt.Run checkpoint (its state lacks "
                              f"'{rs.RUN_KEY}' and '{rs.MODEL_KEY}')")
    parts: Dict[str, Any] = {_MAIN_PART: main[rs.MODEL_KEY]}
    for path in getattr(entry, "parts", None) or []:
        part = os.path.basename(path).split(".", 1)[0]
        if part == _MAIN_PART:
            continue
        tree = ck.load(path, framework=framework, lazy=False)
        if not isinstance(tree, Mapping) or set(tree) != {rs.MODEL_KEY}:
            raise CheckpointError(f"{path}: not a ckpt.Run module file (a tree other than "
                                  f"{{'{rs.MODEL_KEY}': ...}})")
        parts[file_of_part.get(part, os.path.basename(path))] = tree[rs.MODEL_KEY]
    return main, parts


def _file_names(files: Mapping[str, str], format_id: str) -> Dict[str, str]:
    """{part name: file name} of a run's ``files``; ValueError as part_name_of,
    and for two files that would be one part."""
    by_part: Dict[str, str] = {}
    for file in sorted(set(files.values())):
        part = part_name_of(file, format_id)
        if part in by_part:
            raise ValueError(f"files: {by_part[part]!r} and {file!r} would be one file {part!r}")
        by_part[part] = file
    return by_part


def _strings(value: Any) -> List[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in (value or [])]


def _leaf(state: Any, name: str) -> Any:
    """Leaf ``name`` of a flat or nested state."""
    if isinstance(state, Mapping) and name in state:
        return state[name]
    node = state
    for part in name.split("."):
        node = node[part]
    return node
