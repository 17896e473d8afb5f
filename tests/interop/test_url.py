"""Checkpoints named by URL (issue 19): the verified cache, hashes, resumable
downloads, retries and errors, offline mode, the per-entry lock, lazy remote
opens and the CLI, against real servers on 127.0.0.1 only: Debian's nginx and
the fault server of url_servers.py. The served files are written by ckpt.save
and by the real peers (safetensors.numpy.save_file, torch.save).

Every test points CKPT_CACHE at its own temporary directory and removes the
proxy variables (libcurl and urllib honour them), so nothing leaves loopback.
"""

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
from url_servers import closed_port, fault_server, nginx_server, sha256_hex  # noqa: F401 - fixtures

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


# ---------------------------------------------------------------------------
# The servers themselves (urllib; no ckpt): what the other tests rely on

def _urlopen(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def test_nginx_server_serves_ranges_and_logs_them(nginx_server):
    data = os.urandom(300 * KIB)
    url = nginx_server.write("dir/a.bin", data)
    status, headers, body = _urlopen(url)
    assert (status, body) == (200, data)
    etag = headers["ETag"]
    assert headers.get("Accept-Ranges") == "bytes"
    status, headers, body = _urlopen(url, {"Range": "bytes=1000-", "If-Range": etag})
    assert (status, body, headers["Content-Range"]) == (206, data[1000:], f"bytes 1000-{len(data) - 1}/{len(data)}")
    status, _, body = _urlopen(url, {"Range": "bytes=5-", "If-Range": '"other"'})
    assert (status, body) == (200, data)
    with pytest.raises(urllib.error.HTTPError) as missing:
        _urlopen(nginx_server.url("absent"))
    assert missing.value.code == 404
    rows = nginx_server.requests(min_count=4)
    assert [(r.path, r.status, r.range, r.if_range) for r in rows] == [
        ("/dir/a.bin", 200, None, None), ("/dir/a.bin", 206, "bytes=1000-", etag),
        ("/dir/a.bin", 200, "bytes=5-", '"other"'), ("/absent", 404, None, None)]
    assert [r.bytes for r in rows[:3]] == [len(data), len(data) - 1000, len(data)]
    assert len(nginx_server.requests(url)) == 3


def test_fault_server_modes(fault_server):
    data = os.urandom(200 * KIB)
    url = fault_server.add("n", data)
    etag = fault_server.etag("n")
    assert _urlopen(url, {"Range": "bytes=-100"})[2] == data[-100:]
    assert _urlopen(url, {"Range": "bytes=10-19"})[2] == data[10:20]
    assert _urlopen(url, {"Range": "bytes=10-", "If-Range": etag})[0] == 206
    assert _urlopen(url, {"Range": "bytes=10-", "If-Range": '"x"'})[:3:2] == (200, data)

    cut = fault_server.add("cut", data, mode="cut", cut_at=50000)
    with pytest.raises(Exception):  # http.client.IncompleteRead
        _urlopen(cut)
    assert _urlopen(cut, {"Range": "bytes=50000-", "If-Range": etag})[2] == data[50000:]
    assert [(r.status, r.bytes) for r in fault_server.requests("cut")] == [(200, 50000), (206, len(data) - 50000)]

    status, headers, body = _urlopen(fault_server.add("nr", data, mode="no_ranges"), {"Range": "bytes=0-9"})
    assert (status, body, "Accept-Ranges" in headers) == (200, data, False)

    flaky = fault_server.add("flaky", data, mode="fail_then_ok", failures=2)
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError) as failed:
            _urlopen(flaky)
        assert failed.value.code == 503
    assert _urlopen(flaky)[2] == data

    changing = fault_server.add("e", data, mode="etag_changes")
    first = _urlopen(changing)
    second = _urlopen(changing, {"Range": "bytes=10-", "If-Range": first[1]["ETag"]})
    assert second[0] == 200 and second[2] == data[::-1] and second[1]["ETag"] != first[1]["ETag"]

    stall = fault_server.add("stall", data, mode="stall", stall_after=1000)
    started = time.monotonic()
    with pytest.raises(Exception):  # socket.timeout / TimeoutError while reading the body
        with urllib.request.urlopen(stall, timeout=0.5) as response:
            response.read()
    assert time.monotonic() - started < 5
    assert fault_server.requests("stall", timeout=0)[0].bytes == 1000


# ---------------------------------------------------------------------------
# Download once, then the cache

@pytest.mark.parametrize("writer", ["ckpt", "safetensors", "torch"])
def test_load_downloads_once_then_uses_the_cache(ckpt, nginx_server, tmp_path, writer):
    state = sample_state(10)
    local = write_peer(writer, tmp_path / "src", state)
    data = local.read_bytes()
    url = nginx_server.write(local.name, data)

    first = ckpt.load(url)
    second = ckpt.load(url)
    assert_bit_exact(first, state)
    assert_bit_exact(second, state)
    assert_bit_exact(ckpt.load(local), first)

    file_gets = gets(nginx_server.requests(url, min_count=1))
    assert [(r.status, r.bytes) for r in file_gets] == [(200, len(data))], file_gets
    entry = entry_of(ckpt, url)
    assert entry is not None and entry["complete"]
    assert entry["size"] == len(data) and entry["sha256"] == sha256_hex(data)
    assert pathlib.Path(entry["path"]).read_bytes() == data
    assert ckpt.fetch(url) == entry["path"]
    assert len(gets(nginx_server.requests(url))) == 1


def test_every_reading_call_takes_a_url(ckpt, nginx_server, tmp_path):
    import torch
    state = sample_state(11)
    local = write_peer("ckpt", tmp_path / "src", state)
    url = nginx_server.write("every.safetensors", local.read_bytes())

    tensors_of = lambda doc: [(t["name"], t["dtype"], t["shape"], t["nbytes"]) for t in doc["tensors"]]  # noqa: E731
    assert tensors_of(ckpt.inspect(url)) == tensors_of(ckpt.inspect(local))
    assert ckpt.verify(url) == ckpt.verify(local)
    assert ckpt.diff(url, local)["identical"]
    out = tmp_path / "out.npz"
    ckpt.convert(url, out)
    with np.load(out) as npz:
        assert_bit_exact({name: npz[name] for name in npz.files}, state)
    with ckpt.open(url) as f:
        assert sorted(f.keys()) == sorted(state)
        assert f.get("decoder.weight").tobytes() == state["decoder.weight"].tobytes()

    module = torch.nn.Linear(5, 3)
    module_url = nginx_server.write("linear.safetensors", b"")
    ckpt.save(nginx_server.root / "linear.safetensors", module.state_dict())
    target = torch.nn.Linear(5, 3)
    with torch.no_grad():
        target.weight.zero_()
        target.bias.zero_()
    ckpt.restore(target, module_url)
    assert torch.equal(target.weight, module.weight) and torch.equal(target.bias, module.bias)

    base = {name: np.zeros_like(value) for name, value in state.items()}
    report = ckpt.apply_preloads(base, [ckpt.Preload(url)])
    assert_bit_exact({name: np.asarray(v) for name, v in report.state.items()}, state)


# ---------------------------------------------------------------------------
# Hashes

def _hash_call(ckpt, nginx_server, url, name, source, hexdigest):
    """The fetch and the load that name `hexdigest` through `source`."""
    if source == "argument":
        return (lambda: ckpt.fetch(url, sha256=hexdigest)), (lambda: ckpt.load(url, sha256=hexdigest))
    if source == "fragment":
        return (lambda: ckpt.fetch(f"{url}#sha256={hexdigest}")), (lambda: ckpt.load(f"{url}#sha256={hexdigest}"))
    assert source == "sibling"
    nginx_server.write(name + ".sha256", f"{hexdigest}  {name}\n".encode())
    return (lambda: ckpt.fetch(url)), (lambda: ckpt.load(url))


@pytest.mark.parametrize("source", ["argument", "fragment", "sibling"])
def test_a_wrong_hash_is_never_cached(ckpt, nginx_server, tmp_path, url_env, source):
    data = ckpt_bytes(tmp_path)
    url = nginx_server.write("model.safetensors", data)
    wrong, right = sha256_hex(b"something else"), sha256_hex(data)
    fetch, load = _hash_call(ckpt, nginx_server, url, "model.safetensors", source, wrong)

    for attempt, call in enumerate((fetch, load), start=1):
        with pytest.raises(ckpt.CorruptCheckpointError) as error:
            call()
        assert_one_line_naming(error.value, url)
        assert re.search(rf"expected\W+(sha-?256\W+)?{wrong}", str(error.value), re.I), str(error.value)
        assert re.search(rf"got\W+(sha-?256\W+)?{right}", str(error.value), re.I), str(error.value)
        assert_not_cached(ckpt, url, url_env, data)
        assert len(gets(nginx_server.requests(url, min_count=attempt))) == attempt  # downloaded again


@pytest.mark.parametrize("source", ["argument", "fragment", "sibling", "sibling_bare"])
def test_the_right_hash_is_accepted(ckpt, nginx_server, tmp_path, source):
    data = write_peer("torch", tmp_path / "src", sample_state(12)).read_bytes()
    url = nginx_server.write("model.pt", data)
    right = sha256_hex(data)
    if source == "sibling_bare":
        nginx_server.write("model.pt.sha256", right.encode())
        fetch, load = (lambda: ckpt.fetch(url)), (lambda: ckpt.load(url))
    else:
        fetch, load = _hash_call(ckpt, nginx_server, url, "model.pt", source, right)

    path = fetch()
    assert pathlib.Path(path).read_bytes() == data
    assert_bit_exact(load(), sample_state(12))
    entry = entry_of(ckpt, url)
    assert entry["complete"] and entry["sha256"] == right and entry["path"] == path
    assert len(gets(nginx_server.requests(url, min_count=1))) == 1
    if source.startswith("sibling"):
        assert [r.status for r in nginx_server.requests("model.pt.sha256")][:1] == [200]


def test_check_hash_uses_the_prefix_in_the_name(ckpt, nginx_server, tmp_path, url_env):
    data = write_peer("torch", tmp_path / "src", sample_state(13)).read_bytes()
    right = sha256_hex(data)
    good = nginx_server.write(f"resnet-{right[:8]}.pt", data)
    other = write_peer("torch", tmp_path / "other", sample_state(14)).read_bytes()  # not in the cache as `good`
    bad_prefix = "cafef00d" if sha256_hex(other).startswith("deadbeef") else "deadbeef"
    bad = nginx_server.write(f"resnet-{bad_prefix}.pt", other)
    plain = nginx_server.write("resnet.pt", data)

    assert pathlib.Path(ckpt.fetch(good, check_hash=True)).read_bytes() == data
    assert_bit_exact(ckpt.load(good, check_hash=True), sample_state(13))
    with pytest.raises(ckpt.CorruptCheckpointError) as error:
        ckpt.fetch(bad, check_hash=True)
    assert_one_line_naming(error.value, bad, bad_prefix, sha256_hex(other))
    assert_not_cached(ckpt, bad, url_env, other)
    with pytest.raises(ckpt.CorruptCheckpointError):
        ckpt.load(bad, check_hash=True)
    assert pathlib.Path(ckpt.fetch(bad)).read_bytes() == other  # without check_hash the name is just a name
    assert pathlib.Path(ckpt.fetch(plain, check_hash=True)).read_bytes() == data  # no -<hex>. in the name


# ---------------------------------------------------------------------------
# Interrupted downloads

def test_resume_after_a_cut_connection(ckpt, fault_server, tmp_path):
    data = ckpt_bytes(tmp_path, scale=2)
    cut = 700_001
    url = fault_server.add("model.safetensors", data, mode="cut", cut_at=cut)

    path = ckpt.fetch(url)
    assert pathlib.Path(path).read_bytes() == data
    assert_bit_exact(ckpt.load(url), sample_state(1, 2))
    rows = gets(fault_server.requests(url))
    assert len(rows) == 2, rows
    assert (rows[0].range, rows[0].status, rows[0].bytes) == (None, 200, cut)
    assert rows[1].range in (f"bytes={cut}-", f"bytes={cut}-{len(data) - 1}"), rows[1]  # from the cut to the end
    assert rows[1].if_range == fault_server.etag("model.safetensors"), rows[1]
    assert (rows[1].status, rows[1].bytes) == (206, len(data) - cut)
    assert sum(r.bytes for r in rows) == len(data)


def test_resume_across_processes(ckpt, fault_server, tmp_path, url_env):
    data = ckpt_bytes(tmp_path, scale=2)
    url = fault_server.add("model.safetensors", data, rate=512 * KIB, chunk=8 * KIB)
    child = child_fetch(url)
    deadline = time.monotonic() + 15
    sent = 0
    while time.monotonic() < deadline and child.poll() is None:
        rows = fault_server.requests(url, timeout=0)
        sent = rows[0].bytes if rows else 0
        if sent >= 400 * KIB:
            break
        time.sleep(0.02)
    child.kill()
    finish(child)
    assert 0 < sent < len(data), f"the child was not killed mid-download ({sent} bytes sent)"
    head = data[:100 * KIB]  # a partial file: plain or sparse, under whatever name
    partial = [p for p in url_env.rglob("*") if p.is_file() and p.open("rb").read(len(head)) == head]
    after_kill = sorted(str(p.relative_to(url_env)) for p in url_env.rglob("*"))
    assert partial, f"the killed download left nothing in the cache: {after_kill}"

    fault_server.set("model.safetensors", rate=None)
    code, out, err = finish(child_fetch(url))
    assert code == 0, err
    assert pathlib.Path(out.strip()).read_bytes() == data
    rows = gets(fault_server.requests(url))
    assert len(rows) == 2, rows
    assert rows[1].range is not None, (
        f"the second process downloaded from byte 0 instead of resuming the killed one's {rows[0].bytes} bytes "
        f"(the cache after the kill: {after_kill})")
    start = range_start(rows[1].range)
    assert 0 < start <= rows[0].bytes
    assert rows[1].if_range == fault_server.etag("model.safetensors")
    assert (rows[1].status, rows[1].bytes) == (206, len(data) - start)


def test_a_server_ignoring_ranges_means_a_restart(ckpt, fault_server, tmp_path):
    data = ckpt_bytes(tmp_path)
    url = fault_server.add("model.safetensors", data, mode="no_ranges", cut_at=300_000)
    path = ckpt.fetch(url)
    assert pathlib.Path(path).read_bytes() == data
    rows = gets(fault_server.requests(url))
    assert [(r.status, r.bytes) for r in rows] == [(200, 300_000), (200, len(data))], rows
    entry = entry_of(ckpt, url)
    assert entry["complete"] and entry["sha256"] == sha256_hex(data)


def test_a_changed_etag_means_a_restart(ckpt, fault_server, tmp_path):
    old, new = ckpt_bytes(tmp_path, seed=1), ckpt_bytes(tmp_path, seed=2)
    assert len(old) == len(new) and old != new
    url = fault_server.add("model.safetensors", old, mode="etag_changes", new_data=new, cut_at=300_000)
    path = ckpt.fetch(url)
    assert pathlib.Path(path).read_bytes() == new  # not old's first 300 kB glued to new's rest
    assert_bit_exact(ckpt.load(url), sample_state(2))
    entry = entry_of(ckpt, url)
    assert entry["etag"] == fault_server.etag("model.safetensors", changed=True)
    assert entry["sha256"] == sha256_hex(new)
    rows = gets(fault_server.requests(url))
    assert rows[-1].status == 200 and rows[-1].bytes == len(new), rows


# ---------------------------------------------------------------------------
# Retries and errors

def test_503_then_success_is_retried(ckpt, fault_server, tmp_path):
    data = ckpt_bytes(tmp_path)
    url = fault_server.add("model.safetensors", data, mode="fail_then_ok", failures=2)
    assert pathlib.Path(ckpt.fetch(url)).read_bytes() == data
    assert [r.status for r in fault_server.requests(url)] == [503, 503, 200]


def test_5xx_retries_are_bounded(ckpt, fault_server, monkeypatch):
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "2")
    url = fault_server.add("model.safetensors", b"x" * 1000, mode="status", status=500)
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url)
    assert_one_line_naming(error.value, url, "HTTP 500")
    assert [r.status for r in fault_server.requests(url)] == [500, 500, 500]  # the first try and 2 retries


def test_cuts_are_retried_a_bounded_number_of_times(ckpt, fault_server, monkeypatch, url_env):
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "2")
    data = os.urandom(200 * KIB)
    # every answer restarts the file and is cut after 1000 bytes (20 times: a loop that does not count ends)
    url = fault_server.add("model.safetensors", data, mode="no_ranges", cut_at=1000, cuts=20)
    try:
        ckpt.fetch(url)
    except ckpt.RemoteError as raised:
        error = raised
    else:
        pytest.fail(f"ckpt.fetch retried {len(fault_server.requests(url)) - 1} cuts with CKPT_FETCH_RETRIES=2 "
                    "(until the server stopped cutting): not bounded")
    assert_one_line_naming(error, url)
    assert [(r.status, r.bytes) for r in gets(fault_server.requests(url))] == [(200, 1000)] * 3
    assert_not_cached(ckpt, url, url_env, data)


@pytest.mark.parametrize("status", [404, 403])
def test_4xx_is_one_request_and_a_remote_error(ckpt, fault_server, status):
    url = fault_server.add("model.safetensors", b"x" * 1000, mode="status", status=status)
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url)
    assert isinstance(error.value, ckpt.CheckpointError) and isinstance(error.value, OSError)
    assert_one_line_naming(error.value, url, f"HTTP {status}")
    assert len(fault_server.requests(url)) == 1
    with pytest.raises(ckpt.RemoteError):
        ckpt.load(url)
    assert len(fault_server.requests(url)) == 2


def test_nginx_404_is_a_remote_error(ckpt, nginx_server):
    url = nginx_server.url("absent.safetensors")
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.load(url)
    assert_one_line_naming(error.value, url, "HTTP 404")
    assert [r.status for r in nginx_server.requests(url, min_count=1)] == [404]


def test_dns_failure(ckpt, monkeypatch):
    host = "nonexistent.invalid"  # RFC 6761: .invalid never resolves
    try:
        addresses = socket.getaddrinfo(host, 80)
    except socket.gaierror:
        addresses = None
    if addresses:  # a resolver that answers anyway: ckpt would leave loopback
        pytest.skip(f"this machine's resolver resolves {host} to {addresses[0][4]}")
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "0")
    url = f"http://{host}/x.safetensors"
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url)
    assert_one_line_naming(error.value, url, "cannot resolve host")


def test_connection_refused(ckpt, closed_port, monkeypatch):
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "1")
    url = f"http://127.0.0.1:{closed_port}/x.safetensors"
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url)
    assert_one_line_naming(error.value, url, "cannot connect")


def test_tls_failure(ckpt, fault_server, monkeypatch):
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "0")
    fault_server.add("x.safetensors", b"x" * 100)
    url = f"https://127.0.0.1:{fault_server.port}/x.safetensors"  # TLS to a plain-HTTP server
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url)
    assert_one_line_naming(error.value, url, "TLS")


def test_a_stalled_transfer_times_out(ckpt, fault_server, monkeypatch, url_env):
    monkeypatch.setenv("CKPT_FETCH_TIMEOUT", "1")
    monkeypatch.setenv("CKPT_FETCH_RETRIES", "1")
    data = os.urandom(MIB)
    url = fault_server.add("model.safetensors", data, mode="stall", stall_after=10_000)
    started = time.monotonic()
    code, out, err = finish(child_fetch(url), timeout=30)  # a child: a missing timeout fails, not hangs
    elapsed = time.monotonic() - started
    assert code == 3, (out, err)
    assert err.startswith("RemoteError: "), err
    assert "timed out" in err and url in err, err
    assert elapsed < 15, elapsed
    assert_not_cached(ckpt, url, url_env, data)


# ---------------------------------------------------------------------------
# Offline

def test_offline_miss_asks_no_server(ckpt, nginx_server, tmp_path, monkeypatch, run):
    url = nginx_server.write("model.safetensors", ckpt_bytes(tmp_path))
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url, offline=True)
    assert_one_line_naming(error.value, url, "offline")
    with pytest.raises(ckpt.RemoteError):
        ckpt.load(url, offline=True)
    monkeypatch.setenv("CKPT_OFFLINE", "1")
    with pytest.raises(ckpt.RemoteError) as error:
        ckpt.fetch(url)
    assert_one_line_naming(error.value, url, "offline")
    with pytest.raises(ckpt.RemoteError):
        ckpt.open(url, lazy=True)
    result = run("fetch", url, expect=None)
    assert result.returncode in (1, 2) and result.stdout == ""
    assert_one_line_naming(result.stderr.strip(), url, "offline")
    monkeypatch.delenv("CKPT_OFFLINE")
    result = run("fetch", url, "--offline", expect=None)
    assert result.returncode in (1, 2), result
    assert nginx_server.requests(timeout=0.3) == []


def test_offline_hit_uses_the_cache_only(ckpt, nginx_server, tmp_path, monkeypatch, run):
    state = sample_state(14)
    data = write_peer("ckpt", tmp_path / "src", state).read_bytes()
    url = nginx_server.write("model.safetensors", data)
    path = ckpt.fetch(url)
    before = nginx_server.requests(min_count=1)
    assert ckpt.fetch(url, offline=True) == path
    monkeypatch.setenv("CKPT_OFFLINE", "1")
    assert ckpt.fetch(url) == path
    assert_bit_exact(ckpt.load(url), state)
    assert run("fetch", url).stdout.strip() == path
    assert nginx_server.requests() == before


# ---------------------------------------------------------------------------
# The lock per entry

def test_two_processes_download_once(ckpt, fault_server, tmp_path):
    data = ckpt_bytes(tmp_path)
    url = fault_server.add("model.safetensors", data, rate=MIB)  # about 1.4 s
    children = [child_fetch(url) for _ in range(2)]
    results = [finish(child) for child in children]
    for code, out, err in results:
        assert code == 0, err
    paths = {out.strip() for _, out, _ in results}
    assert len(paths) == 1, paths
    assert pathlib.Path(paths.pop()).read_bytes() == data
    rows = gets(fault_server.requests(url))
    assert [(r.range, r.status, r.bytes) for r in rows] == [(None, 200, len(data))], rows


# ---------------------------------------------------------------------------
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


def _middle_tensor(path):
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


@pytest.mark.parametrize("then", ["load", "fetch"])
@pytest.mark.parametrize("writer", ["ckpt", "safetensors"])
def test_lazy_open_fetches_the_header_and_one_tensor(ckpt, nginx_server, tmp_path, writer, then):
    state = sample_state(15, scale=2)
    local = write_peer(writer, tmp_path / "src", state)
    data = local.read_bytes()
    url = nginx_server.write("model.safetensors", data)
    name, header = _middle_tensor(local)
    tensor_bytes = state[name].nbytes
    assert tensor_bytes > HEADER_PROBE

    with ckpt.open(url, lazy=True) as f:
        opened = nginx_server.requests(url, min_count=1)
        assert len(opened) == 1, opened
        assert range_start(opened[0].range) == 0 and opened[0].status == 206
        assert opened[0].bytes <= HEADER_PROBE
        assert sorted(f.keys()) == sorted(state)
        got = f.get(name)
        assert got.dtype == state[name].dtype and got.tobytes() == state[name].tobytes()
    rows = nginx_server.requests(url, min_count=2)
    assert len(rows) == 2, rows
    assert rows[1].status == 206 and range_start(rows[1].range) >= header
    assert sum(r.bytes for r in rows) <= header + tensor_bytes + HEADER_PROBE
    entry = entry_of(ckpt, url)
    assert entry is not None and entry["complete"] is False

    if then == "load":  # either fetches only the missing ranges
        assert_bit_exact(ckpt.load(url), state)
    else:
        assert pathlib.Path(ckpt.fetch(url)).read_bytes() == data
    rows = nginx_server.requests(url, min_count=3)
    total = sum(r.bytes for r in rows)
    assert len(data) <= total <= len(data) + HEADER_PROBE, (total, len(data), rows)
    assert entry_of(ckpt, url)["complete"] is True
    count = len(rows)
    assert pathlib.Path(ckpt.fetch(url)).read_bytes() == data
    assert len(nginx_server.requests(url)) == count


def test_lazy_open_of_a_torch_zip_file(ckpt, nginx_server, tmp_path):
    """Issue 19 names torch zip files too (their records are stored, not
    compressed): one tensor of eight costs well under the whole file."""
    import torch
    state = {f"layer{i}.weight": torch.from_numpy(random_array("float32", (256, 256), 40 + i)) for i in range(8)}
    local = tmp_path / "model.pt"
    torch.save(state, local)
    size = local.stat().st_size
    url = nginx_server.write("model.pt", local.read_bytes())
    with ckpt.open(url, lazy=True) as f:
        assert sorted(f.keys()) == sorted(state)
        got = f.get("layer5.weight")
        assert got.tobytes() == state["layer5.weight"].numpy().tobytes()
    rows = nginx_server.requests(url, min_count=2)
    assert all(r.status == 206 for r in rows), rows
    assert sum(r.bytes for r in rows) <= state["layer5.weight"].nbytes + 3 * HEADER_PROBE, (size, rows)


def test_lazy_open_reads_a_long_header_with_a_second_request(ckpt, nginx_server, tmp_path):
    state = {f"model.layers.{i:05d}.attention.query_key_value.weight": np.full((2,), i, np.float32)
             for i in range(2500)}
    local = write_peer("safetensors", tmp_path / "src", state)
    _, header = _middle_tensor(local)
    assert header > HEADER_PROBE
    url = nginx_server.write("long.safetensors", local.read_bytes())
    with ckpt.open(url, lazy=True) as f:
        assert len(f.keys()) == len(state)
        rows = nginx_server.requests(url, min_count=2)
        assert len(rows) == 2, rows
        assert range_start(rows[0].range) == 0
        assert sum(r.bytes for r in rows) <= header + HEADER_PROBE
        assert f.get("model.layers.01234.attention.query_key_value.weight").tolist() == [1234.0, 1234.0]


def test_lazy_tree_coalesces_neighbouring_tensors(ckpt, nginx_server, tmp_path):
    state = sample_state(16)
    local = write_peer("ckpt", tmp_path / "src", state)
    data = local.read_bytes()
    url = nginx_server.write("model.safetensors", data)
    with ckpt.open(url, lazy=True) as f:
        assert_bit_exact(f.tree(), state)
    rows = nginx_server.requests(url, min_count=2)
    assert 2 <= len(rows) <= 3, rows  # the header, then the tensors in one or two ranges, not one each
    assert sum(r.bytes for r in rows) <= len(data) + HEADER_PROBE


def test_lazy_open_detects_a_corrupted_tensor(ckpt, nginx_server, tmp_path):
    state = sample_state(17)
    local = write_peer("ckpt", tmp_path / "src", state)
    victim = "encoder.layer0.weight"
    url = nginx_server.write("damaged.safetensors", flip_one_byte(local, victim))
    with ckpt.open(url, lazy=True) as f:
        assert f.get("decoder.weight").tobytes() == state["decoder.weight"].tobytes()
        with pytest.raises(ckpt.CorruptCheckpointError) as error:
            f.get(victim)
        assert victim in str(error.value) or error.value.entry == victim, str(error.value)
        assert f.get("encoder.embedding").tobytes() == state["encoder.embedding"].tobytes()

    # A file without ckpt's checksums has nothing to check a tensor against.
    plain = write_peer("safetensors", tmp_path / "plain", state)
    url = nginx_server.write("plain-damaged.safetensors", flip_one_byte(plain, victim))
    with ckpt.open(url, lazy=True) as f:
        got = f.get(victim)
        assert got.tobytes() != state[victim].tobytes()
        assert np.count_nonzero(got.view(np.uint8) != state[victim].view(np.uint8)) == 1


# ---------------------------------------------------------------------------
# The cache's own API and the CLI

def test_cache_dir_follows_the_environment(ckpt, monkeypatch, tmp_path, url_env):
    assert pathlib.Path(ckpt.cache_dir()) == url_env
    monkeypatch.delenv("CKPT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pathlib.Path(ckpt.cache_dir()) == tmp_path / "xdg" / "ckpt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert pathlib.Path(ckpt.cache_dir()) == tmp_path / "home" / ".cache" / "ckpt"


def test_cache_list_remove_clear(ckpt, nginx_server, tmp_path):
    a = ckpt_bytes(tmp_path, seed=1)
    b = write_peer("torch", tmp_path / "srcb", sample_state(2)).read_bytes()
    url_a = nginx_server.write("a.safetensors", a)
    url_b = nginx_server.write("sub/b.pt", b)
    started = time.time()
    path_a, path_b = ckpt.fetch(url_a), ckpt.fetch(url_b)
    served = {url: _urlopen(url)[1] for url in (url_a, url_b)}  # nginx's own ETag and Last-Modified

    entries = {e["url"]: e for e in ckpt.cache_list()}
    assert set(entries) == {url_a, url_b}
    for url, path, data in ((url_a, path_a, a), (url_b, path_b, b)):
        entry = entries[url]
        assert CACHE_ENTRY_KEYS <= set(entry), entry
        assert entry["path"] == path and pathlib.Path(path).read_bytes() == data
        assert pathlib.Path(path).resolve().is_relative_to(pathlib.Path(ckpt.cache_dir()).resolve())
        assert entry["size"] == len(data) and entry["sha256"] == sha256_hex(data)
        assert entry["etag"] == served[url]["ETag"] and entry["last_modified"] == served[url]["Last-Modified"]
        assert entry["complete"] is True and entry["time"]
        if isinstance(entry["time"], (int, float)):
            assert started - 5 <= entry["time"] <= time.time() + 5

    assert ckpt.cache_remove(url_a) == 1
    assert not pathlib.Path(path_a).exists()
    assert [e["url"] for e in ckpt.cache_list()] == [url_b]
    assert ckpt.cache_remove(url_a) == 0
    ckpt.fetch(url_a)
    assert len(gets(nginx_server.requests(url_a, min_count=3))) == 3  # 2 fetches + the ETag probe above
    assert ckpt.cache_clear() == 2
    assert ckpt.cache_list() == []
    assert not pathlib.Path(path_b).exists()


def test_cli_fetch_and_cache_commands(ckpt, nginx_server, tmp_path, run, url_env):
    a = ckpt_bytes(tmp_path, seed=1)
    b = ckpt_bytes(tmp_path, seed=2)
    url_a = nginx_server.write("a.safetensors", a)
    url_b = nginx_server.write("b.safetensors", b)
    path_a = run("fetch", url_a).stdout.strip()
    assert pathlib.Path(path_a).read_bytes() == a
    assert run("fetch", url_b, "--sha256", sha256_hex(b)).stdout.strip() == ckpt.fetch(url_b)

    listing = json.loads(run("cache", "ls", "--json").stdout)
    assert pathlib.Path(listing["cache_dir"]) == url_env
    entries = {e["url"]: e for e in listing["entries"]}
    assert set(entries) == {url_a, url_b}
    assert CACHE_ENTRY_KEYS <= set(entries[url_a])
    assert entries[url_a]["path"] == path_a and entries[url_a]["size"] == len(a)
    assert entries[url_a]["sha256"] == sha256_hex(a) and entries[url_a]["complete"] is True
    assert url_a in run("cache", "ls").stdout

    run("cache", "rm", url_a)
    assert not pathlib.Path(path_a).exists()
    assert [e["url"] for e in json.loads(run("cache", "ls", "--json").stdout)["entries"]] == [url_b]
    run("fetch", url_a)
    run("cache", "clear")
    assert json.loads(run("cache", "ls", "--json").stdout)["entries"] == []
    assert ckpt.cache_list() == []


def test_cli_errors_are_one_line(ckpt, nginx_server, tmp_path, run, closed_port):
    data = ckpt_bytes(tmp_path)
    url = nginx_server.write("model.safetensors", data)
    wrong = sha256_hex(b"other")
    cases = [
        (("fetch", url, "--sha256", wrong), url, ["expected", wrong, sha256_hex(data)]),
        (("fetch", nginx_server.url("absent.safetensors")), nginx_server.url("absent.safetensors"), ["HTTP 404"]),
        (("inspect", nginx_server.url("absent.safetensors"), "--json"), nginx_server.url("absent.safetensors"),
         ["HTTP 404"]),
        (("fetch", f"http://127.0.0.1:{closed_port}/x"), f"http://127.0.0.1:{closed_port}/x", ["cannot connect"]),
    ]
    for args, named, needles in cases:
        result = run(*args, expect=None)
        assert result.returncode in (1, 2), (args, result)
        assert result.stdout == "", (args, result.stdout)
        assert_one_line_naming(result.stderr.strip(), named, *needles)
    assert ckpt.cache_list() == []


def test_cli_inspect_verify_convert_a_url(ckpt, nginx_server, tmp_path, run, inspect_json):
    state = sample_state(18)
    for writer in ("ckpt", "torch"):
        local = write_peer(writer, tmp_path / writer, state)
        url = nginx_server.write(local.name, local.read_bytes())
        remote, here = inspect_json(url), inspect_json(local)
        assert remote["format"] == here["format"]
        assert remote["tensors"] == here["tensors"]
        run("verify", url)
        out = tmp_path / f"{writer}.npz"
        run("convert", url, out)
        with np.load(out) as npz:
            assert_bit_exact({name: npz[name] for name in npz.files}, state)


# ---------------------------------------------------------------------------
# The progress bar

def _progress_shown(stderr):
    return bool(stderr.strip()) and re.search(r"\d", stderr) is not None


def test_progress_bar_settings(ckpt, fault_server, tmp_path, run, monkeypatch, ckpt_tool):
    data = os.urandom(MIB)
    urls = [fault_server.add(f"p{i}.bin", data, rate=4 * MIB) for i in range(5)]

    assert run("fetch", urls[0]).stderr == ""  # no tty: no bar
    assert _progress_shown(run("--progress", "fetch", urls[1]).stderr)
    assert run("--quiet", "fetch", urls[2]).stderr == ""
    monkeypatch.setenv("CKPT_PROGRESS", "1")
    result = run("fetch", urls[3])
    assert _progress_shown(result.stderr), result.stderr
    assert pathlib.Path(result.stdout.strip()).read_bytes() == data
    monkeypatch.delenv("CKPT_PROGRESS")

    # stderr a terminal: the bar by default (CKPT_PROGRESS=0 turns it off), stdout still just the path
    code, out, shown = _fetch_on_a_terminal(ckpt_tool, urls[4])
    assert code == 0
    assert pathlib.Path(out.strip()).read_bytes() == data
    assert _progress_shown(shown), shown
    run("cache", "clear")
    monkeypatch.setenv("CKPT_PROGRESS", "0")
    code, out, shown = _fetch_on_a_terminal(ckpt_tool, urls[4])
    assert code == 0 and pathlib.Path(out.strip()).read_bytes() == data
    assert shown.strip() == "", shown


def _fetch_on_a_terminal(ckpt_tool, url):
    """`ckpt fetch url` with stderr a pseudo-terminal: (exit code, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    try:
        child = subprocess.Popen([ckpt_tool, "fetch", url], stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        slave = None
        shown = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif child.poll() is not None:
                break
        out, _ = child.communicate(timeout=30)
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    return child.returncode, out, shown.decode(errors="replace")


def test_python_fetch_progress(ckpt, fault_server, capfd):
    data = os.urandom(MIB)
    quiet, loud = (fault_server.add(f"{name}.bin", data, rate=4 * MIB) for name in ("quiet", "loud"))
    assert pathlib.Path(ckpt.fetch(quiet)).read_bytes() == data
    assert capfd.readouterr().err == ""  # stderr is no terminal here
    assert pathlib.Path(ckpt.fetch(loud, progress=True)).read_bytes() == data
    assert _progress_shown(capfd.readouterr().err)
