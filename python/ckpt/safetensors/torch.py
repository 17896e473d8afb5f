"""``safetensors.torch`` on ckpt: save and load dicts of torch tensors, and
whole models whose parameters share memory (tied weights).

Tensors are written straight from their memory (CPU tensors; others are
copied to the CPU first) and loaded as views of the mapped file (copy on
write). As in the reference package, ``save_file`` refuses tensors that
share memory (a state dict with tied weights): ``save_model`` stores each
shared group once and ``load_model`` fills all of them again.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import torch

from . import SafetensorError, TensorSpec, _open_bytes, safe_open, serialize, serialize_file

__all__ = ["save", "save_file", "load", "load_file", "save_model", "load_model", "storage_ptr", "storage_size"]

# The reference module's private tables (_SIZE, _TYPES, _getdtype), kept for
# code that imports them; this module itself asks torch for element sizes.
_SIZE = {dtype: torch.empty((), dtype=dtype).element_size()
         for dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                       torch.bfloat16, torch.float32, torch.float64, torch.complex64)}
_TYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
          "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
          "F64": torch.float64, "C64": torch.complex64}
for _code, _name in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"), ("F8_E4M3", "float8_e4m3fn"),
                     ("F8_E5M2", "float8_e5m2"), ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
                     ("F8_E5M2FNUZ", "float8_e5m2fnuz"), ("F8_E8M0", "float8_e8m0fnu"),
                     ("F4", "float4_e2m1fn_x2")):
    if hasattr(torch, _name):
        _TYPES[_code] = getattr(torch, _name)
        _SIZE[getattr(torch, _name)] = torch.empty((), dtype=getattr(torch, _name)).element_size()


def _getdtype(dtype_str: str) -> torch.dtype:
    try:
        return _TYPES[dtype_str]
    except KeyError:
        raise SafetensorError(f"torch has no dtype for {dtype_str}") from None


# ---------------------------------------------------------------- memory


def storage_ptr(tensor: torch.Tensor) -> int:
    """The address of the storage under ``tensor`` (0 where it has none)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, AttributeError):
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """The size in bytes of the storage under ``tensor``."""
    try:
        return tensor.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError, AttributeError):
        return tensor.nelement() * tensor.element_size()


def _end_ptr(tensor: torch.Tensor) -> int:
    """One past the last byte ``tensor``'s elements reach (its address when empty)."""
    if tensor.nelement() == 0:
        return tensor.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr() + (last + 1) * tensor.element_size()


def _overlap_groups(names: Set[str], state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Splits names of one storage into groups whose byte ranges overlap,
    sweeping the ranges in address order."""
    if len(names) < 2:
        return [set(names)]
    spans = sorted((state_dict[name].data_ptr(), _end_ptr(state_dict[name]), name) for name in names)
    groups: List[Set[str]] = []
    reach = None
    for start, end, name in spans:
        if reach is not None and start < reach:
            groups[-1].add(name)
        else:
            groups.append({name})
        reach = end
    return groups


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Groups of names whose tensors overlap in memory (every name is in one
    group; meta tensors and tensors without storage in none), ordered as the
    reference package orders them."""
    by_storage: Dict[Tuple[Any, int, int], Set[str]] = defaultdict(set)
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta":
            continue
        pointer, size = storage_ptr(tensor), storage_size(tensor)
        if pointer != 0 and size != 0:
            by_storage[(tensor.device, pointer, size)].add(name)
    groups: List[Set[str]] = []
    for names in sorted(by_storage.values()):
        groups.extend(_overlap_groups(names, state_dict))
    return groups


def _is_complete(tensor: torch.Tensor) -> bool:
    """True if ``tensor`` covers its whole storage, from its first byte."""
    return tensor.data_ptr() == storage_ptr(tensor) and \
        tensor.nelement() * tensor.element_size() == storage_size(tensor)


def _remove_duplicate_names(state_dict: Dict[str, torch.Tensor], *, preferred_names: Optional[List[str]] = None,
                            discard_names: Optional[List[str]] = None) -> Dict[str, List[str]]:
    """For each group of shared tensors, the name to keep (one covering the
    whole storage: among ``preferred_names`` if any is, else not among
    ``discard_names`` if possible, else the first in sorted order) mapped to
    the names dropped in its favour. Raises RuntimeError for a group where
    no tensor covers the whole storage."""
    preferred = set(preferred_names or [])
    discard = set(discard_names or [])
    dropped: Dict[str, List[str]] = defaultdict(list)
    for group in _find_shared_tensors(state_dict):
        complete = sorted(name for name in group if _is_complete(state_dict[name]))
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {group}. None is covering the entire storage.Refusing to save/load the model"
                " since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue.")
        keep = ([n for n in complete if n in preferred] or [n for n in complete if n not in discard] or complete)[0]
        for name in sorted(group):
            if name != keep:
                dropped[keep].append(name)
    return dropped


# ---------------------------------------------------------------- saving


def _check_for_save(tensors: Any) -> None:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(value)}")
        if value.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed.")
    shared = [group for group in _find_shared_tensors(tensors) if len(group) > 1]
    if shared:
        raise RuntimeError(
            f"""
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {shared}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """)


def _specs(tensors: Dict[str, torch.Tensor], keep_alive: List[torch.Tensor]) -> Dict[str, TensorSpec]:
    _check_for_save(tensors)
    specs = {}
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It either means you"
                " are trying to save tensors which are reference of each other in which case it's recommended to"
                " save only the full tensors, and reslice at load time, or simply call `.contiguous()` on your"
                " tensor to pack it before saving.")
        if tensor.device.type != "cpu":
            tensor = tensor.to("cpu")
        # Conjugate and negative views keep their bits lazily: materialize them.
        tensor = tensor.resolve_conj().resolve_neg()
        keep_alive.append(tensor)
        nbytes = tensor.nelement() * tensor.element_size()
        specs[name] = TensorSpec(dtype=str(tensor.dtype).rsplit(".", 1)[-1], shape=tensor.shape,
                                 data_ptr=tensor.data_ptr() if nbytes else 0, data_len=nbytes)
    return specs


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of ``tensors`` (the reference writer's bytes).
    Raises ValueError for non-tensors, sparse or non-contiguous tensors,
    RuntimeError for tensors that share memory (use save_model)."""
    keep_alive: List[torch.Tensor] = []
    return serialize(_specs(tensors, keep_alive), metadata=metadata)


def save_file(tensors: Dict[str, torch.Tensor], filename: Union[str, "os.PathLike[str]"],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Writes ``tensors`` to ``filename`` atomically; the errors of save()."""
    keep_alive: List[torch.Tensor] = []
    serialize_file(_specs(tensors, keep_alive), filename, metadata=metadata)


def save_model(model: torch.nn.Module, filename: str, metadata: Optional[Dict[str, str]] = None,
               force_contiguous: bool = True) -> None:
    """Saves ``model``'s state dict, each group of tensors that share memory
    stored once under one name; the metadata records each dropped name
    mapped to the kept one (``{"lm_head.weight": "embed.weight"}``).
    ``force_contiguous=False`` refuses non-contiguous tensors (ValueError)
    instead of packing them."""
    state_dict = model.state_dict()
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {name: tensor.contiguous() for name, tensor in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as error:
        raise ValueError(f"{error} Or use save_model(..., force_contiguous=True), read the docs for potential "
                         "caveats.") from None


# ---------------------------------------------------------------- loading


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """The tensors of a safetensors file held in memory, in file order; they
    view one private copy of ``data``."""
    handle = _open_bytes(bytearray(data), "torch", "<bytes>")
    return {name: handle.get(name) for name in handle.keys()}


def load_file(filename: Union[str, "os.PathLike[str]"], device: Union[str, int] = "cpu", *,
              backend: str = "mmap") -> Dict[str, torch.Tensor]:
    """The tensors of ``filename`` (any format ckpt reads), in file order, on
    ``device``; views of the mapped file (copy on write) with "mmap"."""
    with safe_open(filename, framework="pt", device=device, backend=backend) as f:
        return f.get_tensors()


def load_model(model: torch.nn.Module, filename: Union[str, "os.PathLike[str]"], strict: bool = True,
               device: Union[str, int] = "cpu", *, backend: str = "mmap") -> Tuple[List[str], List[str]]:
    """Loads ``filename`` into ``model`` (``load_state_dict``, so the
    model's hooks run), counting tensors that the model shares in memory as
    one: a tied name the file lacks is not missing, nor is one it holds in
    place of the model's kept name unexpected. Returns (missing, unexpected);
    with ``strict`` raises RuntimeError when either is non-empty."""
    state_dict = load_file(filename, device=device, backend=backend)
    dropped = _remove_duplicate_names(model.state_dict(), preferred_names=list(state_dict.keys()))
    missing_list, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing_list)
    for names in dropped.values():
        for name in names:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        message = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            message += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            message += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(message)
    return missing, unexpected
