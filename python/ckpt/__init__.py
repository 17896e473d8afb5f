"""ckpt: neural-network checkpoints for numpy and torch users.

Save and load nests of dicts, lists and tuples whose leaves are numpy arrays,
torch tensors (any dtype, bfloat16 and float8 included), Python scalars,
strings, bytes and None, in safetensors, torch (.pt), npz and npy files;
convert between them; inspect, verify and compare checkpoints. Loaded tensors
are zero-copy views of the mapped file (numpy: read-only arrays; torch:
tensors over a private copy-on-write mapping), which keep the file mapped
while they live.

    import ckpt
    ckpt.save("model.safetensors", model.state_dict())
    state = ckpt.load("model.safetensors", framework="torch")
    with ckpt.open("model.pt") as f:
        w = f.get("encoder.layers.0.weight")
    report = ckpt.restore(model, "old.pt", strict=False)   # fills the model, reports the rest
    ckpt.weight_norm(model.conv)   # eager weight norm: raw g, v stored; weight recomputed when they change
    with ckpt.Run("runs/a", model=model, optimizer=opt, save_every_steps=100) as run:   # stages, resume
        ...
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import sys as _sys


def _import_core():
    """Imports the C++ core so that its calls into its own libraries bind to
    them first (RTLD_DEEPBIND, where the platform has it). TensorFlow, when
    imported earlier, exports a protobuf of its own (another version) into
    the process's global symbol scope; bound there, the core's protobuf
    calls would crash."""
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if not deepbind:
        from . import _ckpt as core
        return core
    flags = _sys.getdlopenflags()
    _sys.setdlopenflags(flags | deepbind)
    try:
        from . import _ckpt as core
    finally:
        _sys.setdlopenflags(flags)
    return core


_ckpt = _import_core()
from ._gc import no_gc as _no_gc
from ._errors import CheckpointError, CorruptCheckpointError, MismatchError, RemoteError, UnsupportedError
from ._url import cache_clear, cache_dir, cache_list, cache_remove, fetch, is_url
from ._url import local_path as _local_path
from ._restore import KEEP, RestoreReport, TensorSpec, field, rename_steps, restore, to_nest
from ._manager import Manager, average, detect, list_run_directory, ls, prune
from ._weight_norm import convert_weight_norm_names, find_weight_norms, fold_weight_norm, unfold_weight_norm
from ._modules import (ModuleFilesReport, Preload, PreloadReport, PreloadResult, apply_preloads, merge_module_files,
                       module_file_of, split_by_module)
from ._formula import formula_function
from ._run import STAGES, Run, StageError
from ._distributed import Shard
from . import _distributed

_TORCH_ONLY = ("weight_norm", "reparametrize", "reparametrizations", "Reparametrization")  # from _reparam


def __getattr__(name: str) -> Any:
    """The names that need torch (eager re-parameterization, ``_reparam``),
    imported when first used: ``import ckpt`` does not import torch."""
    if name in _TORCH_ONLY:
        from . import _reparam
        return getattr(_reparam, name)
    raise AttributeError(f"module 'ckpt' has no attribute {name!r}")


KeepLast = _ckpt.KeepLast
KeepBest = _ckpt.KeepBest
KeepEverySteps = _ckpt.KeepEverySteps
KeepEverySeconds = _ckpt.KeepEverySeconds
KeepSteps = _ckpt.KeepSteps
ReturnnPolicy = _ckpt.ReturnnPolicy
CustomPolicy = _ckpt.CustomPolicy
CheckpointEntry = _ckpt.CheckpointEntry
RunListing = _ckpt.RunListing

__all__ = [
    "save", "load", "open", "convert", "inspect", "verify", "diff", "formats", "Checkpoint",
    "restore", "RestoreReport", "field", "KEEP", "TensorSpec", "detect",
    "Manager", "CheckpointEntry", "RunListing", "list_run_directory", "ls", "prune", "average",
    "KeepLast", "KeepBest", "KeepEverySteps", "KeepEverySeconds", "KeepSteps", "ReturnnPolicy", "CustomPolicy",
    "CheckpointError", "CorruptCheckpointError", "UnsupportedError", "MismatchError", "RemoteError",
    "fetch", "is_url", "cache_dir", "cache_list", "cache_remove", "cache_clear",
    "fold_weight_norm", "unfold_weight_norm", "convert_weight_norm_names", "find_weight_norms",
    "split_by_module", "merge_module_files", "module_file_of", "ModuleFilesReport",
    "Preload", "PreloadResult", "PreloadReport", "apply_preloads",
    "formula_function", "weight_norm", "reparametrize", "reparametrizations", "Reparametrization",
    "Run", "StageError", "STAGES", "Shard",
]
__version__ = _ckpt.__version__

_ckpt.register_errors(CorruptCheckpointError, UnsupportedError, MismatchError, RemoteError)

PathLike = Union[str, "os.PathLike[str]"]
Framework = str  # "numpy" (or "np") / "torch" (or "pt")


def _path(path: PathLike) -> str:
    return os.fsdecode(os.fspath(path))


def save(path: PathLike, state: Any, *, format: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
         extras: bool = True, checksum: str = "xxh3", fsync: bool = True, threads: int = 0,
         max_shard_bytes: int = 0, comm: Any = None) -> None:
    """Write ``state`` to ``path`` atomically (temporary name, fsync, rename).

    ``state`` is any nest of dicts (str or int keys), lists and tuples of numpy
    arrays, torch tensors (CPU or not: copied to the CPU), jax arrays, Python
    ints, floats, complex numbers (as 0-d complex128 arrays), bools, strings,
    bytes and None; dataclasses (flax.struct ones such as a TrainState too)
    and NamedTuples are stored as dicts by field name, as Flax stores them.
    A Flax file (".msgpack") holds what ``flax.serialization.to_bytes(state)``
    writes, byte for byte: lists and tuples as dicts keyed "0", "1", ...,
    int keys as strings; ``load`` gives those dicts back. Arrays and contiguous CPU tensors are
    written straight from their memory. ``format`` is a format id
    ("safetensors", "torch", "npz", "npy"); by default the extension decides
    (safetensors when it names no format). ``metadata`` is stored beside the
    tensors (str to str). ``extras=False`` writes a plain file, byte-identical
    to the reference writer where ckpt knows one. ``checksum``: "xxh3",
    "crc32c" or "none" (formats with room for ckpt's extras).
    ``max_shard_bytes``: formats written in shards (TF bundles) start a new
    shard before a tensor would take the current one past this size (0: one
    shard); others ignore it. With safetensors (the default for a path
    without extension) it writes Hugging Face's sharded directory:
    ``path/model-0000K-of-0000N.safetensors`` + ``model.safetensors.index.json``,
    which transformers' loaders read (docs/formats/hf_sharded.md).

    CUDA tensors are copied to the host through a small ring of pinned
    buffers, device-to-host copies overlapping (docs/gpu.md).

    Raises UnsupportedError if the format cannot hold the state (e.g. strings
    in safetensors without extras), TypeError for values ckpt cannot store,
    OSError if the system refuses the write. An earlier file at ``path`` is
    untouched on failure.

    ``comm`` (an mpi4py communicator or a torch.distributed ProcessGroup;
    docs/distributed.md): every rank calls save with its own ``state``,
    whose leaves may be ``ckpt.Shard(global_shape, offsets, local_tensor)``,
    torch DTensors or jax Arrays (the rank's box of a global tensor); other
    tensors are replicated, written once by the lowest rank. ``path`` becomes
    one sharded safetensors directory (a shard file per rank, rank 0's
    index), committed by all ranks together: an error on any rank raises on
    every rank and commits nothing. Leaves that are shards without ``comm``:
    saved by this one process.
    """
    if comm is not None or _distributed.has_shards(state):
        if format not in (None, "", "safetensors") or max_shard_bytes:
            raise ValueError("a sharded save (comm= or ckpt.Shard leaves) writes sharded safetensors: "
                             "format= and max_shard_bytes= cannot be given")
        with _no_gc():
            _distributed.save(_path(path), state, comm, metadata=metadata, extras=extras, checksum=checksum,
                              fsync=fsync, threads=threads)
        return
    options = dict(format=format or "", metadata=None if metadata is None else dict(metadata), extras=extras,
                   checksum=checksum, fsync=fsync, threads=threads, max_shard_bytes=max_shard_bytes)
    from . import _device
    state = _device.host_state(state)  # CUDA tensors: to the host through the pinned ring (docs/gpu.md)
    with _no_gc():
        try:
            _ckpt.save(_path(path), state, **options)
        except TypeError:
            nest = to_nest(state)  # dataclasses, NamedTuples: plain dicts and lists, then try again
            _ckpt.save(_path(path), nest, **options)


def load(path: PathLike, *, framework: Framework = "numpy", lazy: bool = True, verify: bool = False,
         threads: int = 0, rename: Any = None, device: Any = None, sha256: Optional[str] = None,
         offline: Optional[bool] = None, check_hash: bool = False,
         boxes: Optional[Mapping[str, Tuple[Sequence[int], Sequence[int]]]] = None, comm: Any = None) -> Any:
    """Read the whole state of ``path`` (any format ckpt reads, detected by content).

    Tensors come back as numpy arrays (``framework="numpy"``; bfloat16 and
    float8 as ml_dtypes arrays, as JAX does) or torch tensors
    (``framework="torch"``). With ``lazy=True`` they view the mapped file and
    are read when touched; numpy arrays are read-only, torch tensors writable
    (copy on write, the file never changes). A view that is not contiguous
    (a torch transpose or expand, an Orbax array of fill value only) comes
    back as a view of the stored bytes, never gathered: a read-only numpy
    array with the view's strides, a ``torch.as_strided`` tensor with the
    ``stride()`` and ``storage_offset()`` that ``torch.load`` gives.
    ``lazy=False`` reads everything into memory first (parallel reads),
    detached from the file, views gathered (UnsupportedError when that needs
    more than the machine's memory). ``verify``
    checks every stored checksum first. ``rename`` renames and drops entries
    (see ``ckpt.restore``; ``{"old.prefix": "new.prefix"}`` or a list of
    steps); two entries renamed to one raise ValueError.

    ``device`` (torch only; a string such as ``"cuda:0"`` or a
    ``torch.device``): where the tensors go. None or ``"cpu"``: as above. A
    CUDA device: the file's bytes stream through a small ring of pinned host
    buffers onto the device, disk reads overlapping host-to-device copies,
    never the whole state in host memory (``lazy`` is then irrelevant;
    docs/gpu.md). Other torch devices go through the same ring with plain
    buffers and synchronous copies.

    ``boxes`` (``{name: (offsets, sizes)}``): the leaves named there come
    back holding only that box of the tensor (an array of shape ``sizes``
    starting at element ``offsets``), read from the file alone: of a
    checkpoint stored in pieces (a sharded save, torch DCP's chunks), only
    the pieces the box overlaps. FileNotFoundError for a name the checkpoint
    lacks, ValueError for a box outside its tensor.

    ``comm`` (an mpi4py communicator or a torch.distributed ProcessGroup):
    a collective load, on any number of ranks whatever number saved; each
    rank gets its own ``boxes`` (a name left out comes whole), and an error
    on one rank raises on all (docs/distributed.md).

    ``path`` may be an http(s) URL: it is fetched into the local cache first
    (``ckpt.fetch``, which ``sha256``, ``offline`` and ``check_hash`` go to)
    and loaded from there.

    Raises FileNotFoundError, CorruptCheckpointError, UnsupportedError,
    RemoteError (a URL that cannot be fetched); ValueError for a device string torch does not know or a device with
    ``framework="numpy"``; RuntimeError naming the device when it is a CUDA
    device that is not available.
    """
    if comm is not None:
        if rename is not None or device is not None:
            raise ValueError("comm= cannot be combined with rename= or device=")
        with _no_gc():
            return _distributed.load(_local_path(_path(path), sha256, offline, check_hash), comm, boxes=boxes,
                                     framework=framework, lazy=lazy, verify=verify, threads=threads)
    if boxes:
        if rename is not None or (device is not None and str(device) != "cpu"):
            raise ValueError("boxes= cannot be combined with rename= or a CUDA device")
        boxes = {str(name): (list(offsets), list(sizes)) for name, (offsets, sizes) in boxes.items()}
    path = _local_path(_path(path), sha256, offline, check_hash)
    if device is not None:
        from . import _device
        if framework not in ("torch", "pt"):
            if str(device) != "cpu":
                raise ValueError(f"device={device!r} needs framework=\"torch\" (got framework={framework!r})")
        else:
            target = _device.parse_device(device)
            if target.type != "cpu":
                with _no_gc():
                    return _device.load(path, target, verify=verify, threads=threads, rename=rename)
    with _no_gc():
        if rename is not None:
            return _ckpt.load_renamed(_path(path), rename_steps(rename), framework=framework, lazy=lazy,
                                      verify=verify, threads=threads)
        return _ckpt.load(_path(path), framework=framework, lazy=lazy, verify=verify, threads=threads,
                          boxes=boxes or {})


class Checkpoint:
    """A lazily opened checkpoint, like ``safetensors.safe_open``: the index and
    tree are read, tensor data only when asked for. Use as a context manager
    or call ``close()``; arrays already handed out stay valid after closing."""

    def __init__(self, path: PathLike, framework: Framework = "numpy", verify: bool = False, *, lazy: bool = False,
                 sha256: Optional[str] = None, offline: Optional[bool] = None, check_hash: bool = False):
        self.path = _path(path)
        if is_url(self.path) and lazy:
            self._handle = _ckpt.open(self.path, framework=framework, verify=verify, remote_lazy=True,
                                      sha256=sha256 or "", offline=offline, check_hash=check_hash)
        else:
            self._handle = _ckpt.open(_local_path(self.path, sha256, offline, check_hash), framework=framework,
                                      verify=verify)

    def keys(self) -> List[str]:
        """Tensor names, in file order; then the names of tied tensors stored
        once (which share the stored tensor's memory)."""
        return self._handle.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return self._handle.size()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._handle.contains(name)

    def info(self, name: str) -> Dict[str, Any]:
        """``{"dtype", "shape", "offset", "nbytes", "checksum", "checksum_kind"}``
        of tensor ``name`` without reading its data."""
        return self._handle.info(name)

    def get(self, name: str) -> Any:
        """Tensor ``name`` (numpy array or torch tensor, zero-copy)."""
        return self._handle.get(name)

    def get_tensor(self, name: str) -> Any:
        """Same as get() (safetensors' spelling)."""
        return self._handle.get(name)

    def value(self, name: str) -> Any:
        """Any leaf or subtree by dotted name ("optimizer.param_groups")."""
        return self._handle.value(name)

    def values(self) -> Dict[str, Any]:
        """The non-tensor leaves by name."""
        return self._handle.values()

    def tree(self) -> Any:
        """The whole nest, as load() returns it."""
        with _no_gc():
            return self._handle.tree()

    @property
    def metadata(self) -> Dict[str, str]:
        return self._handle.metadata()

    @property
    def format(self) -> str:
        return self._handle.format()

    def close(self) -> None:
        self._handle.close()

    @property
    def closed(self) -> bool:
        return self._handle.closed()

    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.format}, {len(self)} tensors"
        return f"<ckpt.Checkpoint {self.path!r} ({state})>"


def open(path: PathLike, *, framework: Framework = "numpy", verify: bool = False, lazy: bool = False,  # noqa: A001
         sha256: Optional[str] = None, offline: Optional[bool] = None, check_hash: bool = False) -> Checkpoint:
    """Open ``path`` lazily; see Checkpoint.

    ``path`` may be an http(s) URL. By default it is fetched whole into the
    cache first (``ckpt.fetch``: ``sha256``, ``offline``, ``check_hash``).
    With ``lazy=True`` nothing more than the header is downloaded at first:
    a safetensors file's header with one range request, then each tensor's
    bytes when it is first asked for (``get``; ``tree()`` fetches all that
    is missing with neighbouring ranges coalesced), each checked against
    ckpt's stored checksum where the file has one (CorruptCheckpointError
    naming the tensor). The pieces go to the cache as a sparse file, so a
    later ``ckpt.load(url)`` downloads only what is still missing. Files of
    other formats are downloaded whole."""
    return Checkpoint(path, framework, verify, lazy=lazy, sha256=sha256, offline=offline, check_hash=check_hash)


def convert(src: PathLike, dst: PathLike, to: Optional[str] = None, *, extras: bool = True,
            rename: Any = None, drop_unsupported: bool = False) -> str:
    """Read ``src`` and write it to ``dst`` (format ``to``, else from ``dst``'s
    extension: one that names no format is a ValueError), tensors bit-exact;
    user metadata travels along where the target keeps it. ``rename`` renames
    and drops entries on the way (as in ``load``). A target that holds tensors
    only (npz, or ``extras=False``) gets the tensors under their dotted names;
    non-tensor values it cannot hold raise UnsupportedError, unless
    ``drop_unsupported=True`` leaves them behind. This is ``ckpt convert``'s
    own conversion. Returns the format written."""
    return _ckpt.convert(_path(src), _path(dst), to=to or "", extras=extras, rename=rename_steps(rename),
                         drop_unsupported=drop_unsupported)


def inspect(path: PathLike) -> Dict[str, Any]:
    """What ``ckpt inspect --json`` prints, as a dict: path, format,
    format_version, checksum, tensors (name, dtype, shape, nbytes, offset,
    checksum; tied tensors stored once are listed once), values (non-tensor
    leaves), metadata, total_nbytes."""
    return _ckpt.describe(_path(path))


def verify(path: PathLike) -> Dict[str, Any]:
    """Validate ``path`` completely, every stored checksum included. Returns
    ``{"tensors", "nbytes", "checksum"}`` (stored tensors, as ``ckpt verify``
    counts them); raises CorruptCheckpointError naming the first defect."""
    described = _ckpt.describe(_path(path), verify=True)
    return {"tensors": len(described["tensors"]), "nbytes": described["total_nbytes"],
            "checksum": described["checksum"]}


def diff(a: PathLike, b: PathLike, *, atol: float = 0.0) -> Dict[str, Any]:
    """Compare two checkpoints (any formats) by leaf name: what ``ckpt diff
    --json`` prints, as a dict; ``result["identical"]`` says whether they
    agree (within ``atol``)."""
    return _ckpt.diff(_path(a), _path(b), float(atol))


def formats() -> List[Dict[str, Any]]:
    """The registered formats, as ``ckpt formats --json`` lists them: id,
    description, extensions, read, write, the capabilities (nested_tree,
    lists_and_int_keys, checksums, single_tensor, metadata, shards, colliding_names, ties,
    file_per_tensor, state_file) and dtypes."""
    return _ckpt.formats()
