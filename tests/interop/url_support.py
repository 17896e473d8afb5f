"""What the URL tests (test_url*.py, issue 19) share: the autouse fixture
that gives each test a private cache and no proxies, the `ckpt` fixture, the
files they serve (written by ckpt.save and by the real peers), safetensors
layouts, and child processes that fetch."""


import json
import os
import pathlib
import pty
import re
import select
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import random_array

try:
    import ckpt as _ckpt_module
    _IMPORT_ERROR = None
except ImportError as error:  # reported by the `ckpt` fixture, so the server self-checks still run
    _ckpt_module, _IMPORT_ERROR = None, error

PYTHON = sys.executable
KIB, MIB = 1024, 1024 * 1024
HEADER_PROBE = 64 * KIB  # a lazy open's first range request: the first 64 KiB
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ftp_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                   "ALL_PROXY", "FTP_PROXY")
CACHE_ENTRY_KEYS = {"url", "path", "size", "sha256", "etag", "last_modified", "time", "complete"}


@pytest.fixture(autouse=True)
def url_env(monkeypatch, tmp_path):
    """A private cache, no proxies, fast retries, no progress or offline
    settings inherited from the caller's shell. Returns the cache directory."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CKPT_CACHE", str(cache))
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("CKPT_OFFLINE", "CKPT_PROGRESS", "CKPT_FETCH_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "3")
    monkeypatch.setenv("CKPT_FETCH_BACKOFF", "0.01")
    return cache


@pytest.fixture
def ckpt():
    """The ckpt package, failing the test clearly while its URL API is missing."""
    if _ckpt_module is None:
        pytest.fail(f"cannot import ckpt ({_IMPORT_ERROR}); run `make python`")
    missing = [name for name in ("fetch", "cache_dir", "cache_list", "cache_remove", "cache_clear", "RemoteError")
               if not hasattr(_ckpt_module, name)]
    if missing:
        pytest.fail(f"ckpt lacks the URL API: {', '.join(missing)}")
    return _ckpt_module


# ---------------------------------------------------------------------------
# Files written by ckpt and by the real peers

def sample_state(seed, scale=1):
    """About 1.3 MiB × scale of tensors of several dtypes, every bit pattern."""
    return {
        "encoder.embedding": random_array("float32", (256 * scale, 512), seed),
        "encoder.layer0.weight": random_array("float16", (256 * scale, 512), seed + 1),
        "encoder.layer0.bias": random_array("float32", (512,), seed + 2),
        "decoder.weight": random_array("float64", (64 * scale, 512), seed + 3),
        "decoder.steps": random_array("int64", (1000,), seed + 4),
        "decoder.mask": random_array("bool", (3000,), seed + 5),
        "decoder.bytes": random_array("uint8", (70000,), seed + 6),
    }


def write_peer(writer, directory, state, stem="model"):
    """Writes `state` with `writer` ("ckpt", "safetensors" or "torch");
    returns the file."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if writer == "ckpt":
        import ckpt
        path = directory / f"{stem}.safetensors"
        ckpt.save(path, state)
    elif writer == "safetensors":
        from safetensors.numpy import save_file
        path = directory / f"{stem}.safetensors"
        save_file(state, str(path))
    elif writer == "torch":
        import torch
        path = directory / f"{stem}.pt"
        torch.save({name: torch.from_numpy(np.array(value)) for name, value in state.items()}, path)
    else:
        raise ValueError(writer)
    return path


def ckpt_bytes(tmp_path, seed=1, scale=1):
    return write_peer("ckpt", tmp_path / f"src-{seed}-{scale}", sample_state(seed, scale)).read_bytes()


def assert_bit_exact(loaded, expected):
    assert sorted(loaded) == sorted(expected)
    for name, want in expected.items():
        got = np.asarray(loaded[name])
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), name


def urlopen_raw(url, headers=None):
    """(status, headers, body) of a GET by urllib (no ckpt)."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def gets(requests):
    return [r for r in requests if r.method == "GET"]


def range_start(header):
    match = re.fullmatch(r"bytes=(\d+)-(\d*)", header or "")
    assert match, f"not a range request from an offset: {header!r}"
    return int(match.group(1))


def entry_of(ckpt, url):
    entries = [e for e in ckpt.cache_list() if e["url"] == url]
    assert len(entries) <= 1, entries
    return entries[0] if entries else None


def assert_not_cached(ckpt, url, cache, data):
    entry = entry_of(ckpt, url)
    assert entry is None or not entry["complete"], entry
    if cache.exists():
        for path in cache.rglob("*"):
            if path.is_file() and path.stat().st_size == len(data):
                assert path.read_bytes() != data, f"the rejected bytes are in the cache as {path}"


def assert_one_line_naming(error, url, *needles):
    message = str(error)
    assert "\n" not in message.strip(), message
    assert url.split("#", 1)[0] in message, message
    for needle in needles:
        assert needle.lower() in message.lower(), message


CHILD_FETCH = """\
import sys, ckpt
try:
    print(ckpt.fetch(sys.argv[1]))
except Exception as error:
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(3)
"""


def child_fetch(url, **popen):
    """A separate Python process running ckpt.fetch(url) (os.environ as it is now)."""
    return subprocess.Popen([PYTHON, "-c", CHILD_FETCH, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def finish(process, timeout=60):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"the child did not finish within {timeout} s\nstdout: {out}\nstderr: {err}")
    return process.returncode, out, err


# Lazy remote opens

def safetensors_layout(path):
    """(header length, {name: (begin, end)}) of a safetensors file, absolute
    byte offsets, read with json + struct (no ckpt code)."""
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return base, {name: (base + info["data_offsets"][0], base + info["data_offsets"][1])
                  for name, info in header.items()}


def middle_tensor(path):
    """A tensor over 64 KiB whose bytes lie past the first 64 KiB (none of
    them in the header probe), the one starting nearest the file's middle;
    and the header's length."""
    header, spans = safetensors_layout(path)
    size = pathlib.Path(path).stat().st_size
    big = [n for n, (begin, end) in spans.items() if end - begin > HEADER_PROBE and begin >= HEADER_PROBE]
    name = min(big or spans, key=lambda n: abs(spans[n][0] - size // 2))
    return name, header


def flip_one_byte(path, name):
    """The file's bytes with one bit flipped in the middle of tensor `name`."""
    _, spans = safetensors_layout(path)
    data = bytearray(pathlib.Path(path).read_bytes())
    begin, end = spans[name]
    data[(begin + end) // 2] ^= 0x10
    return bytes(data)


