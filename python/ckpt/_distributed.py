"""Sharded saves across processes (issue 20; docs/distributed.md).

``ckpt.save(path, state, comm=comm)`` where leaves may be ``ckpt.Shard``,
torch ``DTensor`` / ``ShardedTensor`` or jax ``Array``: every rank writes the shard file of what
it holds, rank 0 the index, committed together (a rank that fails fails
every rank; one that dies leaves nothing committed). ``ckpt.load(path,
comm=comm, boxes={name: (offsets, sizes)})`` gives each rank its boxes on any
number of ranks. The protocol is the C++ one (``ckpt/distributed.h``); this
module adapts the engines the caller already runs: an ``mpi4py``
communicator or a ``torch.distributed`` ProcessGroup (``None``: one process).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _ckpt


class Shard:
    """This process's part of a global tensor: ``local_tensor`` (a numpy
    array, a torch tensor, anything ``ckpt.save`` stores) is the box of the
    global tensor of shape ``global_shape`` that starts at ``offsets`` (one
    per dimension). Boxes that several ranks hold alike are written once,
    by the lowest of them."""

    __slots__ = ("global_shape", "offsets", "local_tensor")

    def __init__(self, global_shape: Sequence[int], offsets: Sequence[int], local_tensor: Any):
        self.global_shape = tuple(int(n) for n in global_shape)
        self.offsets = tuple(int(n) for n in offsets)
        self.local_tensor = local_tensor
        ndim = len(getattr(local_tensor, "shape", ()))
        if len(self.global_shape) != ndim or len(self.offsets) != ndim:
            raise ValueError(f"ckpt.Shard: global_shape {self.global_shape} and offsets {self.offsets} must have as "
                             f"many dimensions as the local tensor ({ndim})")

    def __repr__(self) -> str:
        shape = tuple(getattr(self.local_tensor, "shape", ()))
        return f"ckpt.Shard(global_shape={self.global_shape}, offsets={self.offsets}, local shape {shape})"


# ---- Communicators: the engines' collectives as bytes in, bytes out ----

class _OneProcess:
    rank = 0
    size = 1
    background = True  # ckpt.Manager may call it from its background thread

    def all_gather(self, data: bytes) -> List[bytes]:
        return [data]

    def broadcast(self, data: bytes, root: int) -> bytes:
        return data

    def barrier(self) -> None:
        pass


class _Mpi4py:
    background = False

    def __init__(self, comm: Any):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def all_gather(self, data: bytes) -> List[bytes]:
        return self.comm.allgather(data)

    def broadcast(self, data: bytes, root: int) -> bytes:
        return self.comm.bcast(data if self.rank == root else None, root=root)

    def barrier(self) -> None:
        self.comm.Barrier()


class _TorchGroup:
    background = False

    def __init__(self, group: Any):
        import torch.distributed as dist
        self.dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("ckpt: this process is not a member of the ProcessGroup given as comm=")

    def all_gather(self, data: bytes) -> List[bytes]:
        out: List[Any] = [None] * self.size
        self.dist.all_gather_object(out, data, group=self.group)
        return out

    def broadcast(self, data: bytes, root: int) -> bytes:
        box = [data if self.rank == root else None]
        self.dist.broadcast_object_list(box, src=self.dist.get_global_rank(self.group, root), group=self.group)
        return box[0]

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)


_ADAPTER_METHODS = ("all_gather", "broadcast", "barrier")


def communicator(comm: Any) -> Any:
    """The adapter for ``comm``: None (one process), an mpi4py communicator,
    a torch.distributed ProcessGroup, or an object that already is one (int
    attributes ``rank`` and ``size``; ``all_gather(bytes) -> [bytes per
    rank]``, ``broadcast(bytes, root) -> bytes``, ``barrier()``: another
    engine's collectives). Raises TypeError otherwise."""
    if comm is None:
        return _OneProcess()
    if all(callable(getattr(comm, name, None)) for name in _ADAPTER_METHODS) and \
            isinstance(getattr(comm, "rank", None), int) and isinstance(getattr(comm, "size", None), int):
        return comm
    if hasattr(comm, "Get_rank") and hasattr(comm, "allgather") and hasattr(comm, "bcast"):
        return _Mpi4py(comm)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and isinstance(comm, dist.ProcessGroup):
        return _TorchGroup(comm)
    raise TypeError(f"comm= takes an mpi4py communicator, a torch.distributed ProcessGroup or None, "
                    f"not {type(comm).__module__}.{type(comm).__name__}")


def manager_communicator(comm: Any) -> Any:
    """The adapter for a ckpt.Manager's ``comm=`` (collective: every rank
    calls it). Its ``background`` says whether the manager may run a save's
    collectives on its background thread while the training loop goes on
    using the engine (``blocking=False``; else such a save blocks): an
    mpi4py communicator is duplicated (``Dup``, so that ckpt's messages never
    meet the caller's) and may when MPI runs at ``MPI_THREAD_MULTIPLE``
    (mpi4py's default); a torch ProcessGroup spanning the whole world gets a
    gloo group of its own (``new_group``) and may; a smaller one may not."""
    adapter = communicator(comm)
    if isinstance(adapter, _Mpi4py):
        from mpi4py import MPI
        duplicate = _Mpi4py(adapter.comm.Dup())
        duplicate.background = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        return duplicate
    if isinstance(adapter, _TorchGroup):
        dist = adapter.dist
        if adapter.size == dist.get_world_size():
            own = _TorchGroup(dist.new_group(backend="gloo"))
            own.background = True
            return own
    return adapter


# ---- Leaves that are shards ----

def _is_dtensor(value: Any) -> bool:
    return type(value).__name__ == "DTensor" and type(value).__module__.startswith("torch.distributed")


def _is_sharded_tensor(value: Any) -> bool:
    return type(value).__name__ == "ShardedTensor" and type(value).__module__.startswith("torch.distributed")


def _one_box(global_shape: Sequence[int], pieces: List[Tuple[Tuple[int, ...], Any]], empty: Any, what: str) -> Shard:
    """The Shard of a process that holds several distinct boxes of one tensor
    (``pieces``: offsets and local data, no two the same box): their union
    when it is a box (devices adjacent in the mesh, the usual placement),
    assembled by ``empty(shape, like)``; a ValueError otherwise (ckpt stores
    one box per tensor and process)."""
    if len(pieces) == 1:
        return Shard(tuple(global_shape), pieces[0][0], pieces[0][1])
    rank = len(global_shape)
    low = [min(offsets[d] for offsets, _ in pieces) for d in range(rank)]
    high = [max(offsets[d] + data.shape[d] for offsets, data in pieces) for d in range(rank)]
    sizes = [high[d] - low[d] for d in range(rank)]
    covered = sum(math.prod(data.shape) for _, data in pieces)
    # Distinct boxes of one sharding never partly overlap: elements adding up
    # to the bounding box's mean they tile it.
    if covered != math.prod(sizes):
        raise ValueError(f"ckpt: {what} holds {len(pieces)} shards on this process whose union is not one box; "
                         "ckpt stores one box per tensor and process")
    out = empty(sizes, pieces[0][1])
    for offsets, data in pieces:
        out[tuple(slice(offsets[d] - low[d], offsets[d] - low[d] + data.shape[d]) for d in range(rank))] = data
    return Shard(tuple(global_shape), tuple(low), out)


def _from_sharded_tensor(value: Any) -> Shard:
    import torch
    pieces = []
    for local in value.local_shards():
        tensor = local.tensor.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        pieces.append((tuple(local.metadata.shard_offsets), tensor.contiguous()))
    if not pieces:
        raise ValueError("ckpt: a ShardedTensor with no local shard on this rank")
    return _one_box(tuple(value.size()), pieces, lambda shape, like: torch.empty(shape, dtype=like.dtype),
                    "a ShardedTensor")


def _is_jax_array(value: Any) -> bool:
    return type(value).__module__.startswith("jax") and hasattr(value, "addressable_shards") \
        and hasattr(value, "sharding")


def _from_dtensor(value: Any) -> Shard:
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    if any(placement.is_partial() for placement in value.placements):
        raise ValueError("ckpt: a DTensor with a Partial placement holds no values yet; "
                         "redistribute it (Replicate or Shard) before saving")
    _, offsets = compute_local_shape_and_global_offset(value.shape, value.device_mesh, value.placements)
    local = value.to_local().detach()
    if local.device.type != "cpu":
        local = local.cpu()
    return Shard(tuple(value.shape), tuple(offsets), local.contiguous())


def _from_jax_array(value: Any) -> Any:
    import numpy as np
    if value.is_fully_addressable:
        return np.asarray(value)
    # One of each distinct box this process holds (replicas of a box are one).
    pieces: Dict[Tuple[int, ...], Any] = {}
    for shard in sorted(value.addressable_shards, key=lambda shard: shard.replica_id):
        offsets = tuple((s.start or 0) for s in shard.index)
        if offsets not in pieces:
            pieces[offsets] = np.asarray(shard.data)
    return _one_box(tuple(value.shape), list(pieces.items()),
                    lambda shape, like: np.empty(shape, dtype=like.dtype), "a jax Array")


def _join(prefix: str, key: Any) -> str:
    return str(key) if not prefix else f"{prefix}.{key}"


def split_state(state: Any) -> Tuple[Any, Dict[str, Tuple[List[int], List[int]]]]:
    """``state`` with each shard leaf replaced by its local tensor, and the
    shards by dotted name: ``{name: (global_shape, offsets)}``."""
    shards: Dict[str, Tuple[List[int], List[int]]] = {}

    on_path: set = set()  # the containers being walked: a cycle is left to the core to refuse

    def walk(value: Any, name: str) -> Any:
        if _is_dtensor(value):
            value = _from_dtensor(value)
        elif _is_sharded_tensor(value):
            value = _from_sharded_tensor(value)
        elif _is_jax_array(value):
            value = _from_jax_array(value)
        if isinstance(value, Shard):
            shards[name] = (list(value.global_shape), list(value.offsets))
            return value.local_tensor
        if not (isinstance(value, dict) or type(value) in (list, tuple)) or id(value) in on_path:
            return value
        on_path.add(id(value))
        try:
            if isinstance(value, dict):
                return {key: walk(item, _join(name, key)) for key, item in value.items()}
            return type(value)(walk(item, _join(name, i)) for i, item in enumerate(value))
        finally:
            on_path.discard(id(value))

    return walk(state, ""), shards


_LEAF, _CONTAINER, _SHARD = 0, 1, 2
_KIND_OF_TYPE: Dict[type, int] = {}  # what has_shards decided for each type it met


def _kind_of(kind: type) -> int:
    found = _KIND_OF_TYPE.get(kind)
    if found is None:
        if issubclass(kind, Shard) or (kind.__name__ in ("DTensor", "ShardedTensor")
                                       and kind.__module__.startswith("torch.distributed")):
            found = _SHARD
        elif issubclass(kind, dict) or kind is list or kind is tuple:
            found = _CONTAINER
        else:
            found = _LEAF
        _KIND_OF_TYPE[kind] = found
    return found


def has_shards(state: Any) -> bool:
    """Whether a leaf of ``state`` is a shard. Cheap (every save asks): one
    lookup by type per leaf; a container met twice (a cycle, or shared) is
    walked once, and the core refuses cycles as before."""
    stack = [state]
    seen = set()
    kinds = _KIND_OF_TYPE
    while stack:
        container = stack.pop()
        kind = kinds.get(type(container))
        if kind is None:
            kind = _kind_of(type(container))
        if kind == _SHARD:
            return True
        if kind == _LEAF or id(container) in seen:
            continue
        seen.add(id(container))
        for value in (container.values() if isinstance(container, dict) else container):
            kind = kinds.get(type(value))
            if kind is None:
                kind = _kind_of(type(value))
            if kind == _SHARD:
                return True
            if kind == _CONTAINER:
                stack.append(value)
    return False


def save(path: str, state: Any, comm: Any, *, metadata: Optional[Mapping[str, str]], extras: bool, checksum: str,
         fsync: bool, threads: int) -> None:
    local, shards = split_state(state)
    _ckpt.save_sharded(path, local, shards, communicator(comm), metadata=None if metadata is None else dict(metadata),
                       extras=extras, checksum=checksum, fsync=fsync, threads=threads)


def load(path: str, comm: Any, *, boxes: Optional[Mapping[str, Tuple[Sequence[int], Sequence[int]]]],
         framework: str, lazy: bool, verify: bool, threads: int) -> Any:
    wanted = {str(name): (list(offsets), list(sizes)) for name, (offsets, sizes) in (boxes or {}).items()}
    return _ckpt.load_sharded(path, communicator(comm), boxes=wanted, framework=framework, lazy=lazy, verify=verify,
                              threads=threads)
