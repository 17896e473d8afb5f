"""The exceptions ckpt raises. Every one carries the structured context of the
C++ error: ``path``, ``entry`` (tensor, record or tree path) and ``offset``
(byte offset in the file), each None when unknown, and ``reason`` (the bare
message without them)."""


class CheckpointError(Exception):
    """Base class of ckpt's own exceptions."""

    path = None
    entry = None
    offset = None
    reason = None


class CorruptCheckpointError(CheckpointError, ValueError):
    """The file's bytes fail validation or a stored checksum."""


class UnsupportedError(CheckpointError, ValueError):
    """Valid, but not something ckpt reads or writes (an unknown format, a value
    a format cannot hold, a global refused in a torch pickle)."""


class MismatchError(CheckpointError, ValueError):
    """Two things that must agree do not (names, dtypes, shapes)."""


class RemoteError(CheckpointError, OSError):
    """A checkpoint named by URL could not be fetched: an HTTP error status, a
    host that does not resolve, a refused connection, a TLS failure, a
    timeout, or offline mode without a cached copy. The message names the
    URL (also in ``path``)."""
