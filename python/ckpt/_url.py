"""Checkpoints named by URL (docs/urls.md): an http(s) URL is downloaded once
into a local cache, verified by SHA-256, and then opened like a local file.
Every reading call of the package takes a URL where it takes a path; these
are the cache's own calls and the keywords that ``load``, ``open`` and
``restore`` pass on."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from . import _ckpt


def is_url(path: Any) -> bool:
    """True if ``path`` is a str naming an http:// or https:// URL."""
    return isinstance(path, str) and _ckpt.is_url(path)


def fetch(url: str, *, sha256: Optional[str] = None, offline: Optional[bool] = None, check_hash: bool = False,
          progress: Optional[bool] = None) -> str:
    """Download ``url`` into the cache unless it is there, and return the
    cached file's path.

    The cache is ``$CKPT_CACHE``, else ``$XDG_CACHE_HOME/ckpt``, else
    ``~/.cache/ckpt``. The file is verified against ``sha256`` (64 hex
    digits), else the URL's ``#sha256=<hex>`` fragment, else the server's
    ``<url>.sha256`` when it has one; a wrong file never enters the cache
    (CorruptCheckpointError naming the URL, the expected and the actual
    hash). ``check_hash=True`` applies torch.hub's rule: a file named
    ``<stem>-<hex>.<ext>`` must have a hash starting with ``<hex>``.
    ``offline`` (default: ``CKPT_OFFLINE=1`` in the environment) uses only
    the cache. An interrupted download resumes with a range request where
    the server allows it; two processes fetching one URL download it once.
    ``progress``: a progress bar on stderr (None: only when stderr is a
    terminal, or as ``CKPT_PROGRESS`` says).

    Raises RemoteError (a CheckpointError and an OSError) for HTTP errors,
    DNS and TLS failures, refused connections, timeouts and offline misses,
    each naming the URL."""
    return _ckpt.fetch(os.fspath(url), sha256=sha256 or "", offline=offline, check_hash=check_hash,
                       progress=progress)


def local_path(path: str, sha256: Optional[str], offline: Optional[bool], check_hash: bool = False,
               progress: Optional[bool] = None) -> str:
    """``path`` itself, or the cached file of a URL (fetched as ``fetch`` does)."""
    if is_url(path):
        return fetch(path, sha256=sha256, offline=offline, check_hash=check_hash, progress=progress)
    if sha256 is not None:
        raise ValueError(f"sha256= is for URLs; {path!r} is a local path")
    return path


def cache_dir() -> str:
    """The cache directory (see ``fetch``)."""
    return _ckpt.cache_dir()


def cache_list() -> List[Dict[str, Any]]:
    """The cache's entries, as ``ckpt cache ls --json`` lists them: url, path,
    size, sha256 (None while incomplete), etag, last_modified, time, complete
    (False for the pieces a lazy ``ckpt.open(url, lazy=True)`` fetched),
    present (bytes held)."""
    return _ckpt.cache_list()["entries"]


def cache_remove(url: str) -> int:
    """Remove the cached entries of ``url``; returns how many there were."""
    return _ckpt.cache_remove(os.fspath(url))


def cache_clear() -> int:
    """Remove every cached entry; returns how many there were."""
    return _ckpt.cache_clear()
