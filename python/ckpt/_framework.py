"""Which framework a state's tensors come back in, for functions that take a
state and return one (weight norm, module files, preloads)."""

from __future__ import annotations

import sys
from typing import Any


def framework_of(state: Any) -> str:
    """ "torch" if the nest holds a torch tensor, else "numpy"."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "numpy"
    stack = [state]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            return "torch"
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return "numpy"
