"""Tensors to and from an accelerator through a small ring of pinned host
buffers (docs/gpu.md).

Loading onto a CUDA device: the checkpoint is opened lazily (its tensors are
views of the mapped file), and the bytes of every stored tensor stream
through ``buffers`` pinned host buffers of ``buffer_bytes`` each: the reader
copies file bytes into buffer i (the read: page faults of the mapping), the
copier issues the host-to-device copy of buffer i on a side stream and
records an event; buffer i is refilled only once its event has completed,
so the next buffers are read while earlier ones are in flight. Large tensors
are split across buffers, small ones packed into one. Host memory used:
``buffers * buffer_bytes``, never the whole state.

Saving CUDA tensors runs the ring the other way (device-to-host copies into
the buffers, then out of each buffer into the host tensor the writer takes).

The copier (what allocates buffers, copies and records events) is
injectable: :class:`CudaCopier` for CUDA, :class:`HostCopier` for any other
device (plain buffers, synchronous copies), and tests pass a fake device.
A copier has:

- ``device``: the ``torch.device`` results live on;
- ``host_buffer(nbytes)`` -> a 1-D uint8 host tensor, ``release(buffer)``;
- ``empty(nbytes)`` -> a 1-D uint8 tensor on the device;
- ``to_device(dsts, src, pieces)``: start copying the filled part ``src`` of
  a ring buffer, cut into ``pieces`` (:class:`Piece` objects, one after the other
  from its start), into the device tensors ``dsts`` (one per piece);
  ``to_host(dst, srcs, pieces)``: the reverse, the device tensors ``srcs``
  into the buffer part ``dst``. Either may be asynchronous: the buffer must
  not change (be read, for ``to_host``) until an event recorded after the
  call has completed;
- ``record()`` -> an event with ``synchronize()`` (wait until every copy
  started before ``record()`` is done) and ``query()`` (done yet?);
- ``synchronize()``: wait until every copy started is done.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

DEFAULT_BUFFERS = 4
DEFAULT_BUFFER_BYTES = 32 << 20

__all__ = ["Piece", "CudaCopier", "HostCopier", "parse_device", "copier_for", "copy_to_device", "copy_to_host",
           "load", "to_host", "fill", "host_state", "has_device_tensor", "DEFAULT_BUFFERS", "DEFAULT_BUFFER_BYTES"]


_TORCH: Any = None


def _torch() -> Any:
    global _TORCH
    if _TORCH is None:
        import torch

        _TORCH = torch
    return _TORCH


class Piece(NamedTuple):
    """One copy the pipeline issues: ``size`` bytes at byte ``offset`` of the
    job ``name`` (a tensor's name, or a region of tensors sharing bytes),
    through ring buffer ``buffer`` (its index, 0..buffers-1) at byte
    ``buffer_offset``; ``sequence`` counts the fills of the ring (0, 1, ...)."""

    name: str
    offset: int
    size: int
    buffer: int
    buffer_offset: int
    sequence: int


# ------------------------------------------------------------------ devices

def parse_device(device: Any) -> Any:
    """``device`` (a string such as "cuda:0", or a ``torch.device``) as a
    ``torch.device``. Raises ValueError for a string torch does not know, and
    RuntimeError naming the device when this process cannot use it (no CUDA,
    no such index, a backend this torch lacks)."""
    torch = _torch()
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"unknown device {device!r}: {error}") from None
    else:
        raise ValueError(f"device must be a string or a torch.device, not {type(device).__name__}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {str(dev)!r} requested, but CUDA is not available "
                               f"(torch {torch.__version__}, torch.cuda.is_available() is False)")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise RuntimeError(f"device {str(dev)!r} requested, but there are only "
                               f"{torch.cuda.device_count()} CUDA devices")
    elif dev.type not in ("cpu", "meta"):
        try:  # a backend this build of torch lacks fails in ways of its own (NotImplementedError, AssertionError...)
            torch.empty(0, device=dev)
        except Exception as error:
            raise RuntimeError(f"device {str(dev)!r} requested, but it is not available: "
                               f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from None
    return dev


def _split(buffer: Any, pieces: Sequence[Piece]) -> Sequence[Any]:
    """The filled part of a ring buffer (or of a staging buffer) cut into
    the pieces' parts, which lie one after the other from its start."""
    if len(pieces) == 1:
        return (buffer,)
    return _torch().split(buffer, [piece.size for piece in pieces])


def _copy_all(dsts: List[Any], srcs: List[Any]) -> None:
    """dsts[i].copy_(srcs[i]) for all i: one ``torch._foreach_copy_`` (one
    launch on CUDA) where torch has it."""
    foreach = getattr(_torch(), "_foreach_copy_", None)
    if foreach is not None:
        foreach(dsts, srcs)
    else:
        for dst, src in zip(dsts, srcs):
            dst.copy_(src)


class _ReadyEvent:
    """An event of a synchronous copier: done when made."""

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class HostCopier:
    """The copier for devices without streams (and the fallback): plain host
    buffers, ``dst.copy_(src)`` synchronously, events done when recorded."""

    def __init__(self, device: Any):
        self.device = device

    def host_buffer(self, nbytes: int) -> Any:
        return _torch().empty(nbytes, dtype=_torch().uint8)

    def release(self, buffer: Any) -> None:
        pass

    def empty(self, nbytes: int) -> Any:
        return _torch().empty(nbytes, dtype=_torch().uint8, device=self.device)

    def to_device(self, dsts: Sequence[Any], src: Any, pieces: Sequence[Piece]) -> None:
        _copy_all(list(dsts), list(_split(src, pieces)))

    def to_host(self, dst: Any, srcs: Sequence[Any], pieces: Sequence[Piece]) -> None:
        _copy_all(list(_split(dst, pieces)), list(srcs))

    def record(self) -> Any:
        return _ReadyEvent()

    def synchronize(self) -> None:
        pass


class CudaCopier:
    """The CUDA copier: pinned host buffers (plain ones where pinning fails),
    ``non_blocking`` copies on a side stream of ``device``, a CUDA event per
    buffer fill."""

    def __init__(self, device: Any):
        torch = _torch()
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        # Allocations made on the current stream before the pipeline starts
        # are ordered before the side stream's copies.
        self.stream.wait_stream(torch.cuda.current_stream(device))
        self.pinned = True
        self._allocated = False  # device memory allocated since the side stream last waited
        self._staging: Any = None

    def host_buffer(self, nbytes: int) -> Any:
        torch = _torch()
        try:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        except RuntimeError:
            self.pinned = False
            return torch.empty(nbytes, dtype=torch.uint8)

    def release(self, buffer: Any) -> None:
        pass  # the caching host allocator takes the memory back when the last reference goes

    def empty(self, nbytes: int) -> Any:
        torch = _torch()
        self._allocated = True
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def _wait_for_allocations(self) -> None:
        if self._allocated:
            # Memory the caching allocator handed out on the current stream may
            # still be in use there by work queued before it was freed.
            self.stream.wait_stream(_torch().cuda.current_stream(self.device))
            self._allocated = False

    def _stage(self, nbytes: int) -> Any:
        """The first ``nbytes`` of the device staging buffer (one, reused: its
        copies are ordered on the side stream)."""
        if self._staging is None or self._staging.numel() < nbytes:
            with _torch().cuda.stream(self.stream):  # allocated for (and freed by) the side stream
                self._staging = _torch().empty(nbytes, dtype=_torch().uint8, device=self.device)
        return self._staging[:nbytes]

    def to_device(self, dsts: Sequence[Any], src: Any, pieces: Sequence[Piece]) -> None:
        torch = _torch()
        self._wait_for_allocations()
        with torch.cuda.stream(self.stream):
            if len(dsts) == 1:
                dsts[0].copy_(src, non_blocking=True)
            else:  # many pieces: one host-to-device copy, then one scatter on the device
                stage = self._stage(src.numel())
                stage.copy_(src, non_blocking=True)
                _copy_all(list(dsts), list(_split(stage, pieces)))

    def to_host(self, dst: Any, srcs: Sequence[Any], pieces: Sequence[Piece]) -> None:
        torch = _torch()
        self._wait_for_allocations()
        with torch.cuda.stream(self.stream):
            if len(srcs) == 1:
                dst.copy_(srcs[0], non_blocking=True)
            else:  # many pieces: one gather on the device, then one device-to-host copy
                stage = self._stage(dst.numel())
                _copy_all(list(_split(stage, pieces)), list(srcs))
                dst.copy_(stage, non_blocking=True)

    def record(self) -> Any:
        torch = _torch()
        event = torch.cuda.Event()
        event.record(self.stream)
        return event

    def synchronize(self) -> None:
        self.stream.synchronize()
        _torch().cuda.current_stream(self.device).wait_stream(self.stream)


def copier_for(device: Any) -> Any:
    """The copier for a parsed ``torch.device``: CudaCopier for CUDA,
    HostCopier for others."""
    return CudaCopier(device) if device.type == "cuda" else HostCopier(device)


# ------------------------------------------------------------------ the ring

class _Job(NamedTuple):
    name: str
    host: Any    # 1-D uint8 host tensor
    device: Any  # 1-D uint8 device tensor, as long as host


def _plan(jobs: Sequence[_Job], buffer_bytes: int) -> List[List[Tuple[int, int, int, int]]]:
    """The jobs' bytes cut into ring fills: each fill a list of (job index,
    byte offset in the job, size, byte offset in the buffer), at most
    ``buffer_bytes`` in all. The bytes of all jobs, in order, fill the
    buffers one after the other: small jobs share a buffer, large ones span
    several."""
    fills: List[List[Tuple[int, int, int, int]]] = []
    current: List[Tuple[int, int, int, int]] = []
    used = 0
    for index, job in enumerate(jobs):
        offset, left = 0, int(job.host.numel())
        while left > 0:
            if used == buffer_bytes:
                fills.append(current)
                current, used = [], 0
            size = min(left, buffer_bytes - used)
            current.append((index, offset, size, used))
            offset += size
            left -= size
            used += size
    if current:
        fills.append(current)
    return fills


class _Ring:
    """``count`` host buffers of ``nbytes`` from ``copier``, each with the
    event of its last use; ``close()`` waits for every event and releases
    the buffers (also when the pipeline failed)."""

    def __init__(self, copier: Any, count: int, nbytes: int):
        self.copier = copier
        self.buffers: List[Any] = []
        self.events: List[Any] = []
        try:
            for _ in range(count):
                self.buffers.append(copier.host_buffer(nbytes))
                self.events.append(None)
        except BaseException:
            self.close()
            raise

    def wait(self, slot: int) -> None:
        event = self.events[slot]
        if event is not None:
            event.synchronize()
            self.events[slot] = None

    def close(self) -> None:
        error: Optional[BaseException] = None
        for slot in range(len(self.events)):
            try:
                self.wait(slot)
            except BaseException as caught:  # keep releasing; raise the first afterwards
                error = error or caught
        try:
            self.copier.synchronize()
        except BaseException as caught:
            error = error or caught
        while self.buffers:
            self.copier.release(self.buffers.pop())
        self.events.clear()
        if error is not None:
            raise error

    def close_after_error(self) -> None:
        """close() while an error propagates: that error is the one raised."""
        try:
            self.close()
        except BaseException:
            pass


def _ring_size(total: int, buffers: int, buffer_bytes: int) -> Tuple[int, int]:
    if int(buffers) < 1:
        raise ValueError(f"buffers must be at least 1, not {buffers}")
    if int(buffer_bytes) < 1:
        raise ValueError(f"buffer_bytes must be at least 1, not {buffer_bytes}")
    # No more (or larger) buffers than the bytes need.
    size = max(1, min(int(buffer_bytes), total))
    count = max(1, min(int(buffers), -(-total // size)))
    return count, size


_MADV_WILLNEED = 3
_madvise: Any = None


def _advise_willneed(address: int, nbytes: int) -> None:
    """Ask the kernel to start reading [address, address + nbytes) of a
    mapping (``madvise(MADV_WILLNEED)``): read-ahead of the file pages the
    ring will copy next, while the current ones are copied. Advice only:
    nothing happens where the platform lacks it or the call fails."""
    global _madvise
    if _madvise is None:
        _madvise = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                function = libc.madvise
                function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                function.restype = ctypes.c_int
                _madvise = function
            except (OSError, AttributeError):
                _madvise = False
    if not _madvise or nbytes <= 0 or address == 0:
        return
    import mmap

    start = address - address % mmap.PAGESIZE
    _madvise(start, address + nbytes - start, _MADV_WILLNEED)


def _prefetch(jobs: Sequence[_Job], fill_: Sequence[Tuple[int, int, int, int]]) -> None:
    """Read-ahead advice for a fill's source bytes: one call for the span
    when the pieces lie close together in memory (tensors in file order),
    else one per piece."""
    ranges = [(jobs[index].host.data_ptr() + offset, n) for index, offset, n, _ in fill_]
    lo = min(address for address, _ in ranges)
    hi = max(address + n for address, n in ranges)
    if hi - lo <= 2 * sum(n for _, n in ranges):
        _advise_willneed(lo, hi - lo)
    else:
        for address, n in ranges:
            _advise_willneed(address, n)


def _part(tensor: Any, offset: int, n: int) -> Any:
    """tensor[offset:offset + n], without a slice where that is all of it."""
    return tensor if offset == 0 and n == tensor.numel() else tensor[offset:offset + n]


def _pieces(jobs: Sequence[_Job], fill_: Sequence[Tuple[int, int, int, int]], slot: int,
            sequence: int) -> List[Piece]:
    return [Piece(jobs[index].name, offset, n, slot, at, sequence) for index, offset, n, at in fill_]


def _gather(buffer: Any, sources: Sequence[Any]) -> Any:
    """``sources`` (1-D uint8 host tensors) one after the other at the start
    of ``buffer``: the read. Returns the part of the buffer filled."""
    used = sum(int(source.numel()) for source in sources)
    part = buffer[:used]
    if len(sources) == 1:
        part.copy_(sources[0])  # one large piece: torch's parallel copy
    else:
        _torch().cat(sources, out=part)  # many small pieces: one call
    return part


def _run_to_device(jobs: Sequence[_Job], copier: Any, buffers: int, buffer_bytes: int) -> None:
    total = sum(int(job.host.numel()) for job in jobs)
    if total == 0:
        return
    count, size = _ring_size(total, buffers, buffer_bytes)
    fills = _plan(jobs, size)
    ring = _Ring(copier, count, size)
    try:
        for ahead in fills[:count]:
            _prefetch(jobs, ahead)
        for sequence, fill_ in enumerate(fills):
            slot = sequence % count
            if sequence + count < len(fills):  # read-ahead: the file pages of the fill after the ring's turn
                _prefetch(jobs, fills[sequence + count])
            ring.wait(slot)  # its last copies are done: it may be refilled
            part = _gather(ring.buffers[slot], [_part(jobs[i].host, offset, n) for i, offset, n, _ in fill_])
            copier.to_device([_part(jobs[i].device, offset, n) for i, offset, n, _ in fill_], part,
                             _pieces(jobs, fill_, slot, sequence))
            ring.events[slot] = copier.record()
    except BaseException:
        ring.close_after_error()
        raise
    ring.close()


def _run_to_host(jobs: Sequence[_Job], copier: Any, buffers: int, buffer_bytes: int) -> None:
    total = sum(int(job.host.numel()) for job in jobs)
    if total == 0:
        return
    count, size = _ring_size(total, buffers, buffer_bytes)
    fills = _plan(jobs, size)
    ring = _Ring(copier, count, size)
    pending: List[Optional[List[Tuple[int, int, int, int]]]] = [None] * count

    def drain(slot: int) -> None:
        # The buffer's device-to-host copies are done: out into the host tensors.
        ring.wait(slot)
        fill_, pending[slot] = pending[slot], None
        if not fill_:
            return
        used = sum(n for _, _, n, _ in fill_)
        parts = _torch().split(ring.buffers[slot][:used], [n for _, _, n, _ in fill_])
        for (index, offset, n, _), part in zip(fill_, parts):
            _part(jobs[index].host, offset, n).copy_(part)

    try:
        for sequence, fill_ in enumerate(fills):
            slot = sequence % count
            drain(slot)
            used = sum(n for _, _, n, _ in fill_)
            copier.to_host(ring.buffers[slot][:used], [_part(jobs[i].device, offset, n) for i, offset, n, _ in fill_],
                           _pieces(jobs, fill_, slot, sequence))
            ring.events[slot] = copier.record()
            pending[slot] = fill_
        for step in range(count):  # the last fills, oldest first
            drain((len(fills) + step) % count)
    except BaseException:
        ring.close_after_error()
        raise
    ring.close()


def copy_to_device(jobs: Iterable[Tuple[str, Any, Any]], copier: Any, *, buffers: int = DEFAULT_BUFFERS,
                   buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
    """Copy each ``(name, host, device)`` job's bytes (1-D uint8 tensors of
    one length: ``host`` in host memory, ``device`` on ``copier``'s device)
    from host to device through the ring; returns when all are done. Raises
    what the copier or a read raises, after waiting for the copies in flight
    and releasing the buffers."""
    _run_to_device([_Job(*job) for job in jobs], copier, buffers, buffer_bytes)


def copy_to_host(jobs: Iterable[Tuple[str, Any, Any]], copier: Any, *, buffers: int = DEFAULT_BUFFERS,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
    """Copy each ``(name, host, device)`` job's bytes from device to host
    through the ring (the reverse of :func:`copy_to_device`)."""
    _run_to_host([_Job(*job) for job in jobs], copier, buffers, buffer_bytes)


# ------------------------------------------------------------------ tensors

def _bytes_of(tensor: Any) -> Any:
    """A contiguous tensor's bytes as a 1-D uint8 tensor over its memory."""
    torch = _torch()
    flat = tensor.reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def _storage_bytes(tensor: Any) -> Any:
    """The whole untyped storage of a host tensor as a 1-D uint8 tensor."""
    torch = _torch()
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


def _walk(value: Any, leaf: Callable[[Any, str], Any], name: str = "") -> Any:
    """``value`` rebuilt with ``leaf(tensor, dotted name)`` for every torch
    tensor (dicts, lists, tuples and NamedTuples keep their types)."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return leaf(value, name)
    prefix = f"{name}." if name else ""
    if isinstance(value, dict):
        items = [(k, _walk(v, leaf, f"{prefix}{k}")) for k, v in value.items()]
        try:
            return type(value)(items)
        except TypeError:
            return dict(items)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return type(value)(*[_walk(v, leaf, f"{prefix}{i}") for i, v in enumerate(value)])
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v, leaf, f"{prefix}{i}") for i, v in enumerate(value))
    return value


def _place(tensors: Sequence[Tuple[str, Any]], copier: Any, buffers: int, buffer_bytes: int) -> Dict[int, Any]:
    """Host tensors (views of the mapped file) onto ``copier``'s device: the
    host storages they view are merged where they overlap into regions (tied
    tensors, views of one storage), each region copied once into one device
    allocation, and every tensor rebuilt over it with its own shape, strides
    and storage offset. Returns id(host tensor) -> device tensor."""
    torch = _torch()
    spans = []
    for name, tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes() == 0:
            continue
        lo = storage.data_ptr()
        spans.append((lo, lo + storage.nbytes(), name, tensor))
    spans.sort(key=lambda span: span[0])
    regions: List[List[Any]] = []  # [lo, hi, name, host tensor over the region's storage, members]
    for lo, hi, name, tensor in spans:
        if regions and lo < regions[-1][1]:
            region = regions[-1]
            if hi > region[1]:
                region[1] = hi
            region[4].append((lo, tensor))
        else:
            regions.append([lo, hi, name, tensor, [(lo, tensor)]])
    jobs = []
    placed = []
    for lo, hi, name, first, members in regions:
        nbytes = hi - lo
        if nbytes == first.untyped_storage().nbytes():
            host = _storage_bytes(first)
        else:  # several storages overlapping: the bytes they span
            host = _span_bytes(members, lo, nbytes)
        device = copier.empty(nbytes)
        jobs.append(_Job(name, host, device))
        placed.append((lo, device, members))
    _run_to_device(jobs, copier, buffers, buffer_bytes)
    out: Dict[int, Any] = {}
    for lo, device, members in placed:
        for member_lo, tensor in members:
            out[id(tensor)] = _rebuilt(tensor, device, member_lo - lo)
    for name, tensor in tensors:
        if id(tensor) not in out:  # no bytes: empty tensors
            out[id(tensor)] = torch.empty_strided(tuple(tensor.shape), tensor.stride(), dtype=tensor.dtype,
                                                  device=copier.device)
    return out


def _span_bytes(members: Sequence[Tuple[int, Any]], lo: int, nbytes: int) -> Any:
    """The host bytes [lo, lo + nbytes) that overlapping storages cover, as a
    uint8 tensor: one storage covers them when it starts at lo and is the
    longest; otherwise the pieces are joined (a host copy of the region
    only)."""
    torch = _torch()
    for member_lo, tensor in members:
        if member_lo == lo and tensor.untyped_storage().nbytes() >= nbytes:
            return _storage_bytes(tensor)[:nbytes]
    joined = torch.empty(nbytes, dtype=torch.uint8)
    for member_lo, tensor in members:
        storage = _storage_bytes(tensor)
        joined[member_lo - lo:member_lo - lo + storage.numel()].copy_(storage)
    return joined


def _rebuilt(tensor: Any, region: Any, byte_offset: int) -> Any:
    """``tensor`` (shape, strides, storage offset, dtype) over the device
    ``region``, its storage starting ``byte_offset`` bytes into it."""
    torch = _torch()
    itemsize = tensor.element_size()
    storage_bytes = tensor.untyped_storage().nbytes()
    if byte_offset % itemsize != 0:  # not aligned for the dtype: a device copy of its own
        region = region[byte_offset:byte_offset + storage_bytes].clone()
        byte_offset = 0
    out = torch.empty(0, dtype=tensor.dtype, device=region.device)
    out.set_(region.untyped_storage(), byte_offset // itemsize + tensor.storage_offset(), tuple(tensor.shape),
             tensor.stride())
    return out


def load(path: Any, device: Any, *, copier: Any = None, verify: bool = False, threads: int = 0, rename: Any = None,
         buffers: int = DEFAULT_BUFFERS, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> Any:
    """``ckpt.load(path, framework="torch")`` with every tensor on ``device``
    (a string or ``torch.device``; with ``copier`` given, that copier's
    device), copied through the ring; non-tensor leaves as loaded. Tensors
    that share bytes in the file share them on the device; views keep their
    strides and storage offsets.

    Raises ValueError for an unknown device string, RuntimeError for a CUDA
    device that is not available, and what ``ckpt.load`` raises
    (FileNotFoundError, CorruptCheckpointError, ...); buffers are released
    in every case."""
    import ckpt

    if copier is None:
        copier = copier_for(parse_device(device))
    state = ckpt.load(path, framework="torch", lazy=True, verify=verify, threads=threads, rename=rename)
    tensors: List[Tuple[str, Any]] = []
    seen = set()

    def collect(tensor: Any, name: str) -> Any:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            tensors.append((name, tensor))
        return tensor

    _walk(state, collect)
    placed = _place(tensors, copier, buffers, buffer_bytes)
    return _walk(state, lambda tensor, name: placed[id(tensor)])


def to_host(state: Any, *, copier_of: Optional[Callable[[Any], Any]] = None,
            on_device: Optional[Callable[[Any], bool]] = None, buffers: int = DEFAULT_BUFFERS,
            buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> Any:
    """``state`` with its device tensors (``on_device(t)``; default: not on
    the CPU or meta) replaced by host copies made through the ring (one ring
    per device; ``copier_of(device)`` gives its copier, default
    :func:`copier_for`). Tensors that are one object stay one; other leaves
    and CPU tensors are kept as they are. Non-contiguous tensors are made
    contiguous on their device first. Returns the new nest (``state`` itself
    when it has no device tensor)."""
    torch = _torch()
    if on_device is None:
        def on_device(t: Any) -> bool:
            return t.device.type not in ("cpu", "meta")
    if copier_of is None:
        copier_of = copier_for
    found: Dict[int, Tuple[str, Any]] = {}

    def collect(tensor: Any, name: str) -> Any:
        if on_device(tensor) and id(tensor) not in found:
            found[id(tensor)] = (name, tensor)
        return tensor

    _walk(state, collect)
    if not found:
        return state
    by_device: Dict[Any, List[Tuple[str, Any, Any]]] = {}
    hosts: Dict[int, Any] = {}
    for key, (name, tensor) in found.items():
        source = tensor.detach()
        if source.is_conj():
            source = source.resolve_conj()
        if source.is_neg():
            source = source.resolve_neg()
        source = source.contiguous()
        host = torch.empty(tuple(source.shape), dtype=source.dtype)
        hosts[key] = host
        if host.numel():
            by_device.setdefault(source.device, []).append((name, _bytes_of(host), _bytes_of(source)))
    for device, jobs in by_device.items():
        copy_to_host(jobs, copier_of(device), buffers=buffers, buffer_bytes=buffer_bytes)
    return _walk(state, lambda tensor, name: hosts.get(id(tensor), tensor))


def fill(pairs: Iterable[Tuple[str, Any, Any]], *, copier_of: Optional[Callable[[Any], Any]] = None,
         buffers: int = DEFAULT_BUFFERS, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
    """Copy each ``(name, source, target)``: ``source`` a host tensor,
    ``target`` a contiguous device tensor of the same dtype and shape (what
    ``restore`` fills a module on a GPU with), through one ring per device.
    Pairs the ring cannot take (other dtypes or shapes, a non-contiguous
    target) are copied with ``target.copy_(source)``."""
    if copier_of is None:
        copier_of = copier_for
    by_device: Dict[Any, List[Tuple[str, Any, Any]]] = {}
    for name, source, target in pairs:
        if (source.dtype != target.dtype or tuple(source.shape) != tuple(target.shape)
                or not target.is_contiguous() or source.is_conj() or source.is_neg()):
            target.copy_(source)
            continue
        if target.numel() == 0:
            continue
        by_device.setdefault(target.device, []).append((name, _bytes_of(source.contiguous()), _bytes_of(target)))
    for device, jobs in by_device.items():
        copy_to_device(jobs, copier_of(device), buffers=buffers, buffer_bytes=buffer_bytes)


def _scan(state: Any) -> Tuple[bool, bool]:
    """(holds a CUDA tensor, holds a dataclass), through dicts, lists,
    tuples and dataclass fields."""
    import dataclasses

    torch = sys.modules["torch"]
    cuda = dataclass = False
    stack = [state]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            cuda = cuda or value.is_cuda
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            dataclass = True
            stack.extend(getattr(value, f.name) for f in dataclasses.fields(value))
    return cuda, dataclass


def has_device_tensor(state: Any) -> bool:
    """Whether ``state`` holds a torch tensor on a CUDA device (False without
    torch imported, or without CUDA initialized: then none can exist)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    return _scan(state)[0]


def host_state(state: Any) -> Any:
    """What ``ckpt.save`` and ``Manager.save`` write: ``state`` itself, or,
    when it holds CUDA tensors, the state with those copied to the host
    through the ring (:func:`to_host`; dataclasses and NamedTuples first
    made plain dicts, as the writer would)."""
    if not has_device_tensor(state):
        return state
    from ._restore import to_nest

    return to_host(to_nest(state) if _scan(state)[1] else state)
