"""Modules: which parameters go to which checkpoint file, and preloads from
other checkpoints with RETURNN's ``preload_from_files`` options.

The rules are ckpt's C++ (include/ckpt/modules.h, include/ckpt/preload.h;
docs/modules.md). This module takes torch state dicts and nests of arrays
(through :func:`ckpt.to_nest`) and hands back nests in the state's own
framework: torch tensors for a state with torch tensors, numpy arrays
otherwise."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _ckpt
from ._restore import _has_torch_leaf, _is_module, to_nest

__all__ = ["split_by_module", "merge_module_files", "Preload", "PreloadReport", "apply_preloads"]

PathLike = Union[str, "os.PathLike[str]"]


def _nest_and_framework(state: Any, framework: Optional[str]) -> Tuple[Any, str]:
    if _is_module(state):
        state = state.state_dict()
    nest = to_nest(state)
    if not isinstance(nest, Mapping):
        raise TypeError(f"the state must be a mapping (a state dict or a nest of dicts), not {type(state).__name__}")
    return nest, framework or ("torch" if _has_torch_leaf(nest) else "numpy")


def split_by_module(state: Any, files: Optional[Mapping[str, str]] = None, init_only: Sequence[str] = (),
                    main_file: str = "state", *, framework: Optional[str] = None) -> Dict[str, Any]:
    """Splits ``state`` (a torch state dict or ``nn.Module``, or a nest of
    dicts of arrays) into one state per file: ``{file: state}``, the main
    file first, then the assigned files by name (each present, possibly
    empty). ``files`` maps module names (dotted prefixes at component
    boundaries: ``"decoder.lm"`` owns ``decoder.lm.*``, not
    ``decoder.lmx.*``) to file names; the deepest assignment wins;
    ``init_only`` modules or parameters go to no file. Raises ValueError for a
    module or init-only entry that matches nothing, or a file name that is not
    one plain path component."""
    nest, fw = _nest_and_framework(state, framework)
    parts = _ckpt.split_by_module(nest, files=dict(files or {}), init_only=list(init_only), main_file=main_file,
                                  framework=fw)
    return {file: part for file, _modules, part in parts}


def merge_module_files(parts: Mapping[str, Any], files: Optional[Mapping[str, str]] = None,
                       init_only: Sequence[str] = (), main_file: str = "state", *, order_like: Any = None,
                       framework: Optional[str] = None) -> Tuple[Any, Dict[str, Any]]:
    """The union of ``parts`` (``{file: state}``, as loaded), checked against
    the assignment: returns ``(state, report)``, the report a dict with
    ``in_two_files``, ``wrong_file``, ``missing_files``, ``details``, ``ok``
    and ``summary``. ``order_like``: a state whose key order the result
    follows."""
    items = []
    fw = framework
    for file, part in parts.items():
        nest, part_fw = _nest_and_framework(part, framework)
        fw = fw or (part_fw if part_fw == "torch" else None)
        items.append((file, nest))
    order = None if order_like is None else _nest_and_framework(order_like, framework)[0]
    out = _ckpt.merge_module_files(items, files=dict(files or {}), init_only=list(init_only), main_file=main_file,
                                   order_like=order, framework=fw or "numpy")
    state = out.pop("state")
    return state, out


_WHEN = {False: "not_training", True: "fresh", "always": "always"}


class Preload:
    """One preload spec, with RETURNN's ``preload_from_files`` keywords:

    - ``source`` (or ``filename``): any checkpoint ckpt reads, or a run
      directory (its latest checkpoint);
    - ``prefix``: a string ``P`` (RETURNN: source name ``N`` goes to target
      ``P + N``) or a dict ``{source prefix: target prefix}``; plain string
      prefixes;
    - ``var_name_mapping``: ``{target name: source name}``;
    - ``ignore_missing``, ``ignore_params``, ``ignore_params_prefixes``;
    - ``checkpoint_key``: the sub-dict of the source to read (``"model"``);
      None: the whole source;
    - ``init_for_train``: False (only outside training), True (only when
      training starts fresh; the default here, RETURNN's is False) or
      ``"always"`` (every run; its parameters are init-only);
    - ``overrides``: may write a parameter an earlier preload wrote."""

    __slots__ = ("name", "source", "prefix", "var_name_mapping", "ignore_missing", "ignore_params",
                 "ignore_params_prefixes", "checkpoint_key", "init_for_train", "overrides")

    def __init__(self, name: str = "", source: Optional[PathLike] = None, *, filename: Optional[PathLike] = None,
                 prefix: Union[str, Mapping[str, str], None] = None,
                 var_name_mapping: Optional[Mapping[str, str]] = None, ignore_missing: bool = False,
                 ignore_params: Sequence[str] = (), ignore_params_prefixes: Sequence[str] = (),
                 checkpoint_key: Optional[str] = None, init_for_train: Union[bool, str] = True,
                 overrides: bool = False):
        if source is not None and filename is not None:
            raise TypeError("Preload: give source or filename (its RETURNN name), not both")
        source = source if source is not None else filename
        if source is None:
            raise TypeError("Preload: source (or filename) is required")
        if not (init_for_train is True or init_for_train is False or init_for_train == "always"):
            raise ValueError(f"Preload {name!r}: init_for_train must be False, True or 'always', "
                             f"not {init_for_train!r}")
        if isinstance(prefix, str):
            prefix = {"": prefix} if prefix else {}
        self.name = name
        self.source = os.fspath(source)
        self.prefix = dict(prefix or {})
        self.var_name_mapping = dict(var_name_mapping or {})
        self.ignore_missing = bool(ignore_missing)
        self.ignore_params = [ignore_params] if isinstance(ignore_params, str) else list(ignore_params)
        self.ignore_params_prefixes = ([ignore_params_prefixes] if isinstance(ignore_params_prefixes, str)
                                       else list(ignore_params_prefixes))
        self.checkpoint_key = checkpoint_key
        self.init_for_train = init_for_train
        self.overrides = bool(overrides)

    @property
    def filename(self) -> str:
        return self.source

    def _spec(self) -> Dict[str, Any]:
        spec = {key: getattr(self, key) for key in self.__slots__ if key != "init_for_train"}
        spec["when"] = _WHEN[self.init_for_train]
        return spec

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Preload) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={getattr(self, key)!r}" for key in self.__slots__)
        return f"ckpt.Preload({fields})"


class PreloadReport:
    """What :func:`apply_preloads` did: ``state`` (the new state),
    ``preloads`` (one dict per spec: ``name``, ``when``, ``applied``,
    ``source``, ``set`` as (target, source) pairs, ``missing``,
    ``unexpected``, ``ignored``, ``overridden``) and ``init_only`` (what
    ``init_for_train="always"`` specs set: never to be saved)."""

    def __init__(self, result: Mapping[str, Any]):
        self.state = result["state"]
        self.preloads: List[Dict[str, Any]] = list(result["preloads"])
        for preload in self.preloads:
            preload["set"] = [tuple(pair) for pair in preload["set"]]
        self.init_only: List[str] = list(result["init_only"])

    def __repr__(self) -> str:
        done = ", ".join(f"{p['name']}: {len(p['set'])} set" if p["applied"] else f"{p['name']}: skipped"
                         for p in self.preloads)
        return f"<ckpt.PreloadReport {done}>"


_STAGES = ("fresh", "continued", "not_training")


def apply_preloads(state: Any, preloads: Sequence[Preload], *, stage: str = "fresh",
                   framework: Optional[str] = None) -> PreloadReport:
    """Applies ``preloads`` in order to ``state`` (a torch state dict or
    ``nn.Module``'s, or a nest of arrays, after the main checkpoint), each
    where its ``init_for_train`` says it applies in ``stage`` (``"fresh"``,
    ``"continued"`` or ``"not_training"``). Returns a :class:`PreloadReport`
    whose ``state`` is the new state (in the state's framework;
    ``model.load_state_dict(report.state)``); the input is not changed.
    Raises FileNotFoundError for what is not there (a source, a
    checkpoint_key, a prefix that matches nothing, missing parameters
    without ignore_missing), ckpt.MismatchError for a shape or dtype
    mismatch, ValueError for two preloads writing one parameter (unless the
    later ``overrides``)."""
    if stage not in _STAGES:
        raise ValueError(f"stage must be one of {', '.join(_STAGES)}, not {stage!r}")
    specs = []
    for preload in preloads:
        if not isinstance(preload, Preload):
            raise TypeError(f"preloads must be ckpt.Preload objects, not {type(preload).__name__}")
        specs.append(preload._spec())
    nest, fw = _nest_and_framework(state, framework)
    return PreloadReport(_ckpt.apply_preloads(nest, specs, stage=stage, framework=fw))
