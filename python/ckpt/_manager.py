"""The checkpoint manager: the history of one training run in a run directory
(``ckpt::Manager``, docs/manager.md). The rules (retention, listing, the
commit, the lock, async snapshots) are the C++ core's; this module adapts
Python arguments and values to it."""

from __future__ import annotations

import atexit
import os
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from ._gc import no_gc as _no_gc
from . import _device, _distributed, _restore

PathLike = Union[str, "os.PathLike[str]"]


def _core():
    from . import _ckpt  # imported by the package first (RTLD_DEEPBIND)
    return _ckpt




def _path(path: PathLike) -> str:
    return os.fsdecode(os.fspath(path))


# Managers not closed yet. At interpreter exit they are closed before Python
# finalizes: the background thread takes the GIL (for keep= and to let go of
# lent arrays), which a finalizing interpreter no longer hands out.
_open_managers: "weakref.WeakSet[Manager]" = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    for manager in list(_open_managers):
        try:
            manager.close()
        except Exception as error:  # nobody is left to raise to: say so
            warnings.warn(f"ckpt.Manager({manager.run_dir!r}) at exit: {error}", RuntimeWarning)


def _policies(policy: Any) -> list:
    if policy is None:
        return []
    if isinstance(policy, (list, tuple)):
        return list(policy)
    return [policy]


class Manager:
    """Checkpoints of one training run in ``run_dir`` (created if missing):
    one ``step-NNNNNNNN/`` directory per committed step, retention after each
    commit, asynchronous saves, one writer per directory (docs/manager.md).

    Retention: a checkpoint is kept if ANY policy keeps it; with none, nothing
    is deleted; the newest is always kept. ``keep_last=N`` the N newest;
    ``keep_best=K`` the K best by ``metric`` (``mode`` "min" or "max";
    ``keep_missing_metric`` keeps those without it); ``keep_every_steps=S``
    steps that are multiples of S; ``keep_every_seconds=T`` one per T seconds;
    ``keep_steps`` these steps forever; ``keep`` a callable given the list of
    :class:`CheckpointEntry` (oldest first, with metrics) returning the steps
    to keep (called from the manager's background thread; an exception it
    raises fails that cleanup and is raised, as ValueError, by the next
    ``save``/``wait``/``close``); ``policy`` more policy objects
    (:class:`KeepLast`, :class:`ReturnnPolicy`, ...) or callables.

    ``format``: any writable format id (default: safetensors; torch in the
    returnn layout). ``layout``: "ckpt" (step directories) or "returnn": a
    RETURNN model directory as RETURNN's torch engine writes it
    (``epoch.NNN.pt`` = {"model": state, "epoch", "step",
    "effective_learning_rate"}, ``epoch.NNN.opt.pt`` for a part named
    "optimizer", the metrics as the epoch's scores in ``learning_rates``, a
    metric "learning_rate" as its learningRate); every save needs ``epoch=``,
    :meth:`load` returns the "model" state, and retention removes only epochs
    this manager committed (docs/manager.md, "Managing a RETURNN
    directory"). ``max_in_flight``: asynchronous saves
    pending at once (a save beyond them waits). ``dedup`` hard-links an
    unchanged state from the previous step; ``fsync`` makes commits durable;
    ``read_only`` opens without the lock (save raises).

    ``comm``: the ranks that save this run together (an mpi4py communicator
    or a torch.distributed ProcessGroup; None: one process). Every rank opens
    a Manager on the same ``run_dir`` with it (collective: rank 0 alone takes
    the lock, writes the run's records and runs retention; an error on one
    rank raises on all). Each :meth:`save` is then collective and writes the
    step's state as a Hugging Face sharded directory ``step-N/state/`` (one
    shard file per rank, committed as one step directory); leaves may be
    ``ckpt.Shard``, DTensor, ShardedTensor or jax Arrays, as ``ckpt.save(...,
    comm=)`` takes them; no dedup. ``blocking=False`` runs a save's
    collectives on the manager's thread where the engine allows it
    (``_distributed.manager_communicator``), else it blocks. :meth:`load`
    takes ``boxes=`` to read this rank's part (docs/manager.md, "Sharded
    runs").

    Raises OSError naming the holder's pid and host if another writer holds
    the run's lock; ValueError for a bad option; UnsupportedError for a format
    that cannot be written; FileNotFoundError for a missing run_dir when
    ``read_only``; CorruptCheckpointError if the run's records cannot be
    parsed. Use as a context manager, or call :meth:`close` (managers still
    open at exit are closed then). One thread calls :meth:`save` at a time;
    listing and loading may run in other threads meanwhile.
    """

    def __init__(self, run_dir: PathLike, *, keep_last: Optional[int] = None, keep_best: Optional[int] = None,
                 metric: Optional[str] = None, mode: str = "min", keep_missing_metric: bool = True,
                 keep_every_steps: Optional[int] = None, keep_every_seconds: Optional[float] = None,
                 keep_steps: Iterable[int] = (), keep: Optional[Callable[[List[Any]], Iterable[int]]] = None,
                 policy: Any = None, format: Optional[str] = None, max_in_flight: int = 1, dedup: bool = True,
                 fsync: bool = True, read_only: bool = False, layout: str = "ckpt", comm: Any = None):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        self._comm = None if comm is None or read_only else _distributed.manager_communicator(comm)
        self._core = _core().Manager(
            _path(run_dir), keep_last=keep_last, keep_best=keep_best, metric=metric or "", mode=mode,
            keep_missing_metric=keep_missing_metric, keep_every_steps=keep_every_steps,
            keep_every_seconds=keep_every_seconds, keep_steps=list(keep_steps), keep=keep,
            policy=_policies(policy), format=format or "", max_in_flight=max_in_flight, dedup=dedup,
            fsync=fsync, read_only=read_only, layout=layout, comm=self._comm)
        self._closed = False
        self._metric, self._mode = metric or "", mode
        _open_managers.add(self)

    @property
    def run_dir(self) -> str:
        return self._core.run_dir

    def save(self, step: int, state: Any = None, metrics: Optional[Mapping[str, float]] = None,
             epoch: Optional[int] = None, blocking: bool = True, *, keep_forever: bool = False,
             parts: Optional[Mapping[str, Any]] = None) -> None:
        """Saves ``state`` (what :func:`ckpt.save` takes) as checkpoint ``step``,
        which must be newer than every step committed or pending.

        ``blocking=True`` returns once committed. ``blocking=False`` returns
        once the state is snapshotted: numpy arrays and torch tensors (memory
        the caller can still change) are copied, arrays mapping a checkpoint
        file are not; the write and commit run on the background thread, in
        step order, at most ``max_in_flight`` pending. ``metrics`` are recorded
        for retention and :meth:`best`; ``keep_forever`` keeps this step
        whatever the policies.

        ``parts`` saves the state in parts instead of ``state``: ``{name:
        state}``, one file each (``<name>.<format's extension>`` in the step
        directory), committed together; names of 1 to 100 letters, digits,
        ``_`` or ``-`` (``"state"`` is an unsplit state's); the parts hold
        disjoint leaves. Each part unchanged since the previous checkpoint
        (every tensor byte for byte) is hard-linked from there (``dedup``), so
        a frozen module's file costs nothing. :meth:`load` returns the union
        of the parts; each entry's ``.parts`` lists their files.

        Raises first the error of an earlier background save or cleanup (once);
        ValueError for a step not newer than the last, or a read-only or closed
        manager; TypeError for values ckpt cannot store; what ``ckpt.save``
        raises (a blocking save)."""
        metrics = {str(k): float(v) for k, v in (metrics or {}).items()}
        if parts is None and (self._comm is not None or _distributed.has_shards(state)):
            # A sharded save (collective with comm=): this rank's tensors and their shards.
            local, shards = _distributed.split_state(state)
            local = _device.host_state(local)
            with _no_gc():
                self._core.save(step, local, metrics=metrics, epoch=epoch, blocking=blocking,
                                keep_forever=keep_forever, shards=shards)
            return
        if parts is not None:
            if state is not None:
                raise ValueError("save() takes a state or parts=, not both")
            if not isinstance(parts, Mapping) or not parts:
                raise ValueError("parts= must be a non-empty dict {part name: state}")
            parts = {name: _device.host_state(_restore.to_nest(part)) for name, part in parts.items()}
        else:
            state = _device.host_state(state)  # CUDA tensors: through the pinned ring (docs/gpu.md)
        with _no_gc():
            try:
                self._core.save(step, state, metrics=metrics, epoch=epoch, blocking=blocking,
                                keep_forever=keep_forever, parts=parts)
            except TypeError:
                if parts is not None:
                    raise
                nest = _restore.to_nest(state)  # dataclasses, NamedTuples: plain dicts, then try again
                self._core.save(step, nest, metrics=metrics, epoch=epoch, blocking=blocking,
                                keep_forever=keep_forever)

    def list(self) -> List[Any]:
        """The committed checkpoints, oldest first, as :class:`CheckpointEntry`
        (``.step``, ``.epoch``, ``.metrics``, ``.path``, ``.size``, ``.time``,
        ``.kept_by``, ``.parts``: the part files of a state saved in parts,
        else empty); pending saves are not listed until committed."""
        return self._core.list()

    def latest(self) -> Optional[Any]:
        """The newest committed checkpoint's entry; None for an empty run."""
        return self._core.latest()

    def best(self, metric: Optional[str] = None, mode: Optional[str] = None) -> Optional[Any]:
        """The best committed checkpoint by ``metric`` (default: the manager's
        ``metric`` and ``mode``; ties: the newer), among those that record it;
        None when none does."""
        name = metric if metric is not None else self._metric
        if not name:
            raise ValueError("best() needs a metric: pass metric= here or to the Manager")
        return self._core.best(name, mode or (self._mode if name == self._metric else "min"))

    def load(self, step: int, *, framework: str = "numpy", lazy: bool = True, verify: bool = False,
             threads: int = 0, boxes: Optional[Mapping[str, Any]] = None) -> Any:
        """Checkpoint ``step``'s state as :func:`ckpt.load` returns it. A writing
        manager does not delete it until it commits a newer one. ``boxes``
        (``{name: (offsets, sizes)}``) loads those leaves as that box of
        the tensor, read from the shards it overlaps only (a sharded run's
        rank its part; a local read on each rank, no collective). Raises
        FileNotFoundError for a step that is not committed."""
        wanted = {str(name): (list(offsets), list(sizes)) for name, (offsets, sizes) in (boxes or {}).items()}
        with _no_gc():
            return self._core.load(step, framework=framework, lazy=lazy, verify=verify, threads=threads,
                                   boxes=wanted)

    def restore_latest(self, target: Any, **restore_options: Any) -> Optional[_restore.RestoreReport]:
        """Restores the newest committed checkpoint into ``target`` (a torch
        ``nn.Module``, filled in place, or a nest, as :func:`ckpt.restore`
        takes; strict by default) and returns the :class:`RestoreReport`;
        None for an empty run (a fresh start). ``restore_options`` are
        :func:`ckpt.restore`'s (strict, defaults, cast, prefix, only, rename).
        The checkpoint is protected as :meth:`load`'s."""
        with _no_gc():
            tree = self._core.load_latest()
        if tree is None:
            return None
        return _restore.restore(target, tree, **restore_options)

    def load_latest(self, *, framework: str = "numpy", lazy: bool = True, verify: bool = False,
                    threads: int = 0) -> Any:
        """The newest committed checkpoint's state as :meth:`load` gives it
        (protected as :meth:`load`'s); None for an empty run. Also for an
        epoch that a RETURNN directory held before this manager (which has no
        step to :meth:`load` it by)."""
        with _no_gc():
            return self._core.load_latest(framework=framework, lazy=lazy, verify=verify, threads=threads)

    def wait(self) -> None:
        """Waits until every pending save is committed and the cleanup after it
        is done; raises the first error one of them hit. With ``comm=``:
        collective, returning once rank 0's cleanup is done too."""
        self._core.wait()

    def close(self) -> None:
        """:meth:`wait`, then releases the run's lock; the manager only reads
        afterwards. Raises as :meth:`wait`. A second close does nothing."""
        self._closed = True
        _open_managers.discard(self)
        self._core.close()

    def __enter__(self) -> "Manager":
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an exception already propagates: keep it, still release the lock
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<ckpt.Manager {self.run_dir!r}{' (closed)' if self._closed else ''}>"


def _configured(keep_last: Optional[int], keep_best: Optional[int], metric: Optional[str], mode: str,
                keep_missing_metric: bool, keep_every_steps: Optional[int], keep_every_seconds: Optional[float],
                keep_steps: Iterable[int], keep: Any, policy: Any) -> list:
    """The policies of prune()'s keywords, in the order the Manager takes them."""
    core = _core()
    policies: list = []
    if keep_last is not None:
        policies.append(core.KeepLast(keep_last))
    if keep_best is not None:
        policies.append(core.KeepBest(keep_best, metric or "", mode, keep_missing_metric))
    if keep_every_steps is not None:
        policies.append(core.KeepEverySteps(keep_every_steps))
    if keep_every_seconds is not None:
        policies.append(core.KeepEverySeconds(keep_every_seconds))
    steps = list(keep_steps)
    if steps:
        policies.append(core.KeepSteps(steps))
    if keep is not None:
        policies.append(core.CustomPolicy(keep))
    return policies + _policies(policy)


def list_run_directory(run_dir: PathLike) -> Any:
    """The checkpoints of ``run_dir`` in whichever layout it holds (ckpt's own,
    RETURNN, Flax, TensorFlow, Lightning, Orbax), as a :class:`RunListing`:
    ``.run_dir``, ``.layout`` ("ckpt", "returnn", ..., "empty") and
    ``.checkpoints`` (:class:`CheckpointEntry`, oldest first; ``kept_by`` as a
    ckpt run recorded it). Read-only: takes no lock. Raises FileNotFoundError
    if ``run_dir`` is not a directory, CorruptCheckpointError naming a record
    that cannot be parsed."""
    return _core().list_run_directory(_path(run_dir))


ls = list_run_directory


def prune(run_dir: PathLike, *, keep_last: Optional[int] = None, keep_best: Optional[int] = None,
          metric: Optional[str] = None, mode: str = "min", keep_missing_metric: bool = True,
          keep_every_steps: Optional[int] = None, keep_every_seconds: Optional[float] = None,
          keep_steps: Iterable[int] = (), keep: Any = None, policy: Any = None, dry_run: bool = False,
          foreign: bool = False) -> List[str]:
    """Applies retention to ``run_dir`` once, as ``ckpt prune`` does (the
    policies as :class:`Manager` takes them; none given: those the run
    recorded; the newest checkpoint is always kept). Returns the paths
    removed (with ``dry_run``: that would be), in listing order. A foreign
    layout (RETURNN, TF, ...) is refused with ValueError unless
    ``foreign=True``. Raises OSError naming the holder if a manager holds the
    run's lock."""
    policies = _configured(keep_last, keep_best, metric, mode, keep_missing_metric, keep_every_steps,
                           keep_every_seconds, keep_steps, keep, policy)
    _, removed = _core().prune_run_directory(_path(run_dir), policies, dry_run, foreign)
    return removed


def average(out: PathLike, sources: Union[PathLike, Sequence[PathLike]], *, last: int = 0, best: int = 0,
            metric: Optional[str] = None, mode: str = "min", to: Optional[str] = None,
            threads: int = 0) -> List[Dict[str, Any]]:
    """Writes the per-tensor mean of several checkpoints to ``out``, as ``ckpt
    average`` does: ``sources`` a list of checkpoints (oldest first), or one
    run directory with ``last=N`` (its newest N) or ``best=K, metric=M``
    (``mode`` "min"/"max"). Float tensors are averaged in float64 and cast
    back; integer and non-tensor leaves are the newest input's. ``to``:
    ``out``'s format (default by extension). Returns the inputs used, oldest
    first, as ``{"path", "step", "epoch"}`` dicts. Raises MismatchError naming
    the tensor and both files when the inputs differ in names, dtypes or
    shapes; ValueError for bad selections."""
    if isinstance(sources, (str, os.PathLike)):
        paths = [_path(sources)]
    else:
        paths = [_path(s) for s in sources]
    _, used = _core().average(_path(out), paths, last=last, best=best, metric=metric or "", mode=mode, to=to or "",
                              threads=threads)
    return [{"path": p, "step": s, "epoch": e} for p, s, e in used]


def detect(path: PathLike) -> str:
    """The format id of ``path`` ("safetensors", "torch", "npz", "npy", "tf",
    "flax", "orbax", ...): by what claims the path (a TF bundle prefix, an
    Orbax directory), else by content. Raises FileNotFoundError, or
    UnsupportedError for what no format reads."""
    return _core().detect(_path(path))
