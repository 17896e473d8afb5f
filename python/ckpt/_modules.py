"""Module files and preloads over state dicts (C++: ckpt/modules.h,
ckpt/preload.h; docs/modules.md). The rules are the C++ core's: which leaf
goes to which file, the checks on the way back, what a preload sets and when;
this module adapts Python arguments and values to them.

Names are dotted (a torch ``state_dict()``'s keys as they are, a nested
Flax tree's keys joined with ``.``). A module name owns the leaves under it
at component boundaries (``decoder.lm`` owns ``decoder.lm.w``, not
``decoder.lmx.w``); preload prefixes are plain string prefixes, as RETURNN
has them.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _ckpt
from ._framework import framework_of as _framework_of
from ._gc import no_gc as _no_gc

PathLike = Union[str, "os.PathLike[str]"]


def _files_arg(files: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise TypeError(f"files must be a dict {{module name: file name}}, not {type(files).__name__}")
    return {str(module): os.fsdecode(os.fspath(file)) for module, file in files.items()}


def _names_arg(what: str, names: Union[None, str, Iterable[str]]) -> List[str]:
    if names is None:
        return []
    if isinstance(names, str):
        return [names]
    out = list(names)
    for name in out:
        if not isinstance(name, str):
            raise TypeError(f"{what} must be names (str), not {type(name).__name__}")
    return out


def module_file_of(name: str, files: Optional[Mapping[str, str]] = None,
                   init_only: Union[None, str, Iterable[str]] = None, main_file: str = "state") -> Optional[str]:
    """The file the leaf ``name`` goes to: the deepest assigned module's that
    owns it, ``main_file`` if none does, None if it is init-only."""
    file = _ckpt.module_file_of(name, _files_arg(files), _names_arg("init_only", init_only), main_file)
    return file or None


def split_by_module(state: Mapping[str, Any], files: Optional[Mapping[str, str]] = None,
                    init_only: Union[None, str, Iterable[str]] = None, main_file: str = "state") -> Dict[str, Any]:
    """``state`` divided into one state per file: ``{file: state}``, the main
    file first (every leaf no module claims), then the assigned files in name
    order; a file that gets no leaf is still there, empty.

    ``files`` maps module names to file names (``{"encoder":
    "encoder.safetensors"}``): a module's leaves and its submodules' go to
    its file and leave its parent's; a deeper assignment beats a shallower
    one; several modules may share a file. ``init_only`` modules or
    parameters go to no file. A list is never divided. Tensors stay what
    they were (torch tensors if ``state`` holds any, else numpy arrays), not
    copied; a flat state dict stays flat, a nested tree nested.

    Raises ValueError naming the module, entry or file for: an empty module
    name; a file name that is not one plain path component; an assigned
    module or init_only entry that matches no leaf; a list whose items would
    go to different files."""
    with _no_gc():
        parts = _ckpt.split_by_module(state, _files_arg(files), _names_arg("init_only", init_only), main_file,
                                      framework=_framework_of(state))
    return {file: part for file, part, _ in parts}


@dataclasses.dataclass
class ModuleFilesReport:
    """What :func:`merge_module_files` found. ``state``: the union of the files
    (a leaf in two files taken from the first). ``in_two_files``: leaves found
    in more than one file; ``wrong_file``: leaves found in a file their
    module is not assigned to (init-only ones included); ``missing_files``:
    expected files (the main file, every assigned one) that are absent, whose
    leaves are then missing from ``state``; ``details``: one line per
    problem. ``ok`` is True when there is none; ``summary`` says them in one
    line ("" when ok)."""

    state: Any
    in_two_files: List[str]
    wrong_file: List[str]
    missing_files: List[str]
    details: List[str]
    summary: str

    @property
    def ok(self) -> bool:
        return not (self.in_two_files or self.wrong_file or self.missing_files)

    def raise_if_problems(self) -> None:
        """Raises ValueError with :attr:`summary` unless :attr:`ok`."""
        if not self.ok:
            raise ValueError(self.summary)


def merge_module_files(parts: Mapping[str, Any], files: Optional[Mapping[str, str]] = None,
                       init_only: Union[None, str, Iterable[str]] = None, main_file: str = "state",
                       order_like: Any = None) -> ModuleFilesReport:
    """The inverse of :func:`split_by_module`: the union of ``parts`` (``{file
    name: state as loaded}``), checking that every leaf came from exactly one
    file, the one its module is assigned to, and that every expected file is
    there. ``order_like`` (the target state, or the state that was split):
    the result's keys follow its order. Raises ValueError for options
    split_by_module refuses or a part that is not a dict; problems in the
    files are reported, not raised (:meth:`ModuleFilesReport.raise_if_problems`)."""
    if not isinstance(parts, Mapping):
        raise TypeError(f"parts must be a dict {{file name: state}}, not {type(parts).__name__}")
    items = [(os.fsdecode(os.fspath(file)), state) for file, state in parts.items()]
    framework = _framework_of([state for _, state in items])
    with _no_gc():
        state, two, wrong, missing, details, summary = _ckpt.merge_module_files(
            items, _files_arg(files), _names_arg("init_only", init_only), main_file, order_like,
            framework=framework)
    return ModuleFilesReport(state, list(two), list(wrong), list(missing), list(details), summary)


_WHEN = {True: "train_fresh", False: "not_in_training", "always": "always"}


@dataclasses.dataclass
class Preload:
    """One preload: parts of the model's state taken from another checkpoint,
    with the options of RETURNN's ``preload_from_files`` entries
    (docs/modules.md says where they differ).

    ``source`` (or RETURNN's ``filename``): any path ckpt reads, or a run
    directory (its latest checkpoint). ``prefix``: a str P loads every
    source name N into P + N (RETURNN's single prefix); a dict maps source
    prefixes to target prefixes (plain string prefixes; source names that
    match none are not loaded). ``var_name_mapping``: {target name: source
    name}. ``ignore_missing``: target parameters in scope that the source
    lacks are let pass. ``ignore_params`` / ``ignore_params_prefixes``:
    target names never written. ``checkpoint_key``: the sub-dict of the
    source to read (e.g. "model"; None: the whole source). ``init_for_train``:
    False only outside training, True only when training starts fresh (never
    over a resumed model), "always" on every run (its parameters are then
    init-only: never saved). ``overrides``: may write a parameter an earlier
    preload wrote. ``name``: for reports and errors."""

    source: Optional[PathLike] = None
    filename: dataclasses.InitVar[Optional[PathLike]] = None
    name: str = ""
    prefix: Union[None, str, Mapping[str, str]] = None
    var_name_mapping: Optional[Mapping[str, str]] = None
    ignore_missing: bool = False
    ignore_params: Sequence[str] = ()
    ignore_params_prefixes: Sequence[str] = ()
    checkpoint_key: Optional[str] = None
    init_for_train: Union[bool, str] = True
    overrides: bool = False

    def __post_init__(self, filename: Optional[PathLike]) -> None:
        if filename is not None:
            if self.source is not None:
                raise ValueError("Preload takes source= or filename= (its RETURNN name), not both")
            self.source = filename
        if self.source is None:
            raise ValueError("Preload needs a source (a checkpoint path or a run directory)")
        if self.init_for_train not in _WHEN or isinstance(self.init_for_train, int) and not isinstance(
                self.init_for_train, bool):
            raise ValueError(f"init_for_train must be True, False or \"always\", not {self.init_for_train!r}")

    def _spec(self) -> Dict[str, Any]:
        prefix = self.prefix
        if prefix is None:
            prefix_map: Dict[str, str] = {}
        elif isinstance(prefix, str):
            prefix_map = {"": prefix}
        else:
            prefix_map = {str(k): str(v) for k, v in prefix.items()}
        return {
            "name": self.name,
            "source": os.fsdecode(os.fspath(self.source)),
            "prefix": prefix_map,
            "var_name_mapping": {str(k): str(v) for k, v in (self.var_name_mapping or {}).items()},
            "ignore_missing": bool(self.ignore_missing),
            "ignore_params": _names_arg("ignore_params", self.ignore_params),
            "ignore_params_prefixes": _names_arg("ignore_params_prefixes", self.ignore_params_prefixes),
            "checkpoint_key": self.checkpoint_key,
            "when": _WHEN[self.init_for_train],
            "overrides": bool(self.overrides),
        }

    @classmethod
    def from_returnn(cls, preload_from_files: Mapping[str, Mapping[str, Any]]) -> List["Preload"]:
        """RETURNN's ``preload_from_files`` config dict ({name: {"filename":
        ..., "prefix": ..., ...}}) as Preloads, in its order. Raises TypeError
        for an option Preload does not know."""
        return [cls(name=name, **dict(options)) for name, options in preload_from_files.items()]


@dataclasses.dataclass
class PreloadResult:
    """What one preload did: ``applied`` (False: skipped in this stage, its
    source not read), ``source`` (the path read: a run directory's latest
    checkpoint resolved), ``set`` [(target name, source name)], ``missing``
    (target names in scope the source lacks, let pass by ignore_missing),
    ``unexpected`` (target names a source name maps to that the model does
    not have), ``ignored`` (skipped by ignore_params*), ``overridden`` (set
    here over an earlier preload's)."""

    name: str
    init_for_train: Union[bool, str]
    applied: bool
    source: Optional[str]
    set: List[Tuple[str, str]]
    missing: List[str]
    unexpected: List[str]
    ignored: List[str]
    overridden: List[str]


@dataclasses.dataclass
class PreloadReport:
    """:func:`apply_preloads`'s result: ``state`` (the given state with every
    applied preload's parameters set; the rest as given), ``preloads`` (one
    :class:`PreloadResult` per preload, in order, skipped ones included) and
    ``init_only`` (the names set by applied "always" preloads: never save
    them)."""

    state: Any
    preloads: List[PreloadResult]
    init_only: List[str]


_STAGES = ("fresh", "continue", "not_training")


def apply_preloads(state: Mapping[str, Any], preloads: Iterable[Preload], stage: str = "fresh") -> PreloadReport:
    """Applies ``preloads`` to ``state`` (the model's state after the main
    checkpoint, e.g. ``model.state_dict()``), in order, each only where its
    ``init_for_train`` applies in ``stage``: "fresh" (training starts fresh),
    "continue" (training resumed from the run's checkpoint) or
    "not_training" (search, forward, export). All or nothing: on an error
    nothing is set. Load the result with ``model.load_state_dict(report.state)``
    or :func:`ckpt.restore`.

    Raises FileNotFoundError naming the preload, its source and the
    parameters for: a checkpoint_key the source lacks, a prefix that matches
    nothing, a var_name_mapping name missing on either side, target
    parameters the source lacks (without ignore_missing), a preload that
    sets nothing; MismatchError for a source tensor of another shape or dtype
    than the target's; ValueError for two preloads writing one parameter
    without ``overrides``; what reading a source raises."""
    if stage not in _STAGES:
        raise ValueError(f"stage must be one of {', '.join(map(repr, _STAGES))}, not {stage!r}")
    specs = []
    for preload in preloads:
        if not isinstance(preload, Preload):
            raise TypeError(f"preloads must be ckpt.Preload objects, not {type(preload).__name__}")
        specs.append(preload._spec())
    with _no_gc():
        out, results, init_only = _ckpt.apply_preloads(state, specs, stage, framework=_framework_of(state))
    return PreloadReport(out, [PreloadResult(**result) for result in results], list(init_only))
