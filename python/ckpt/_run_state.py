"""What a :class:`ckpt.Run` keeps of itself in a checkpoint beside the model
(docs/run.md): its counters, the random generators' states (Python's
``random``, numpy's global generator, torch's CPU generator) and the
optimizer's state in a form ckpt stores and ``torch.optim`` takes back; and
the start decision (fresh or continue), a pure function of the run's
listing."""

from __future__ import annotations

import random
import sys
from typing import Any, Dict, Mapping, NamedTuple, Optional, Sequence

import numpy as np

# The keys of a Run checkpoint's main state.
MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"
RUN_KEY = "run"
# The version of the "run" record; a reader refuses newer ones.
RUN_RECORD_VERSION = 1


class Start(NamedTuple):
    """How a run starts: ``mode`` "fresh" (nothing committed) or "continue"
    (from committed ``step``, the newest)."""

    mode: str
    step: Optional[int]


def decide_start(entries: Sequence[Any]) -> Start:
    """The start of a run whose committed checkpoints are ``entries`` (what
    ``Manager.list()`` gives: oldest first, each with ``.step``): "continue"
    from the newest when there is one, else "fresh". A save that a crash cut
    short is not committed and not listed, so the newest committed one wins."""
    if not entries:
        return Start("fresh", None)
    return Start("continue", max(int(entry.step) for entry in entries))


# ------------------------------------------------------------------ RNG

def _torch() -> Any:
    return sys.modules.get("torch")


def capture_rng() -> Dict[str, Any]:
    """The states of Python's ``random``, numpy's global generator and (when
    torch is imported) torch's CPU generator, as a nest ckpt stores: arrays,
    ints, floats and None."""
    version, internal, gauss_next = random.getstate()
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: Dict[str, Any] = {
        "python": {"version": int(version), "state": np.asarray(internal, dtype=np.int64),
                   "gauss_next": None if gauss_next is None else float(gauss_next)},
        "numpy": {"kind": str(kind), "keys": np.asarray(keys, dtype=np.uint32).copy(), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
    }
    torch = _torch()
    if torch is not None:
        state["torch"] = torch.get_rng_state().clone()
    return state


def _array(value: Any, dtype: Any) -> Any:
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=dtype)


def scalar(value: Any) -> Any:
    """A stored number as a Python number (a 0-d array or tensor included)."""
    if hasattr(value, "item"):
        return value.item()
    return value


def set_rng(state: Mapping[str, Any]) -> None:
    """Sets the generators to ``state`` (what :func:`capture_rng` gave, as
    saved and loaded: arrays as numpy arrays or torch tensors). Raises
    ValueError naming the part that does not fit."""
    try:
        py = state["python"]
        internal = tuple(int(x) for x in _array(py["state"], np.int64).tolist())
        gauss = py.get("gauss_next")
        random.setstate((int(scalar(py["version"])), internal, None if gauss is None else float(scalar(gauss))))
        npy = state["numpy"]
        np.random.set_state((str(npy["kind"]), _array(npy["keys"], np.uint32), int(scalar(npy["pos"])),
                             int(scalar(npy["has_gauss"])), float(scalar(npy["cached_gaussian"]))))
        torch = _torch()
        if torch is not None and "torch" in state:
            torch.set_rng_state(torch.from_numpy(_array(state["torch"], np.uint8).copy()))
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"the run's random generator states do not fit: {type(error).__name__}: {error}") from error


# ------------------------------------------------------------------ optimizer

def _int_key(key: Any, where: str) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        raise ValueError(f"optimizer state: {where} key {key!r} is not a parameter index") from None


def _plain(value: Any) -> Any:
    """A loaded non-tensor leaf as torch wrote it: 0-d numpy scalars as Python
    numbers, nested lists through."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def torch_optimizer_state(stored: Mapping[str, Any], like: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """``stored`` (a torch optimizer's ``state_dict()`` as saved and loaded
    back: int keys may come back as strings, tuples as lists) in the form
    ``Optimizer.load_state_dict`` takes: the ``state`` map keyed by int
    parameter indices, each group's ``params`` as ints. ``like`` (the live
    optimizer's ``state_dict()``): a group setting that is a tuple there
    (Adam's ``betas``) becomes a tuple again. Raises ValueError for a state
    that is not an optimizer's."""
    if not isinstance(stored, Mapping) or "param_groups" not in stored:
        raise ValueError("the checkpoint's optimizer state is not a torch optimizer's state_dict() "
                         "(no 'param_groups')")
    state = stored.get("state", {})
    if isinstance(state, (list, tuple)):  # a format that keeps int-keyed maps as lists
        state = dict(enumerate(state))
    per_param = {}
    for key, value in state.items():
        if not isinstance(value, Mapping):
            raise ValueError(f"optimizer state: entry {key!r} is not a map")
        per_param[_int_key(key, "state")] = {str(k): _plain(v) for k, v in value.items()}
    groups_in = stored["param_groups"]
    if isinstance(groups_in, Mapping):
        groups_in = [groups_in[k] for k in sorted(groups_in, key=lambda k: _int_key(k, "param_groups"))]
    like_groups = list((like or {}).get("param_groups", []))
    groups = []
    for index, group in enumerate(groups_in):
        group = {str(k): _plain(v) for k, v in group.items()}
        group["params"] = [_int_key(p, "params") for p in group.get("params", [])]
        if index < len(like_groups):
            for key, value in like_groups[index].items():
                if isinstance(value, tuple) and isinstance(group.get(key), list):
                    group[key] = tuple(group[key])
        groups.append(group)
    result = {str(k): _plain(v) for k, v in stored.items() if k not in ("state", "param_groups")}
    result["state"] = per_param
    result["param_groups"] = groups
    return result
