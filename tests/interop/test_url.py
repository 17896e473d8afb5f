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
import re
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from url_servers import closed_port, fault_server, nginx_server, sha256_hex  # noqa: F401 - fixtures
from url_support import *  # noqa: F401,F403 - the autouse url_env fixture, `ckpt`, the helpers
from url_support import url_env  # noqa: F401 - pytest finds the autouse fixture through the module

# ---------------------------------------------------------------------------
# The servers themselves (urllib; no ckpt): what the other tests rely on

def test_nginx_server_serves_ranges_and_logs_them(nginx_server):
    data = os.urandom(300 * KIB)
    url = nginx_server.write("dir/a.bin", data)
    status, headers, body = urlopen_raw(url)
    assert (status, body) == (200, data)
    etag = headers["ETag"]
    assert headers.get("Accept-Ranges") == "bytes"
    status, headers, body = urlopen_raw(url, {"Range": "bytes=1000-", "If-Range": etag})
    assert (status, body, headers["Content-Range"]) == (206, data[1000:], f"bytes 1000-{len(data) - 1}/{len(data)}")
    status, _, body = urlopen_raw(url, {"Range": "bytes=5-", "If-Range": '"other"'})
    assert (status, body) == (200, data)
    with pytest.raises(urllib.error.HTTPError) as missing:
        urlopen_raw(nginx_server.url("absent"))
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
    assert urlopen_raw(url, {"Range": "bytes=-100"})[2] == data[-100:]
    assert urlopen_raw(url, {"Range": "bytes=10-19"})[2] == data[10:20]
    assert urlopen_raw(url, {"Range": "bytes=10-", "If-Range": etag})[0] == 206
    assert urlopen_raw(url, {"Range": "bytes=10-", "If-Range": '"x"'})[:3:2] == (200, data)

    cut = fault_server.add("cut", data, mode="cut", cut_at=50000)
    with pytest.raises(Exception):  # http.client.IncompleteRead
        urlopen_raw(cut)
    assert urlopen_raw(cut, {"Range": "bytes=50000-", "If-Range": etag})[2] == data[50000:]
    assert [(r.status, r.bytes) for r in fault_server.requests("cut")] == [(200, 50000), (206, len(data) - 50000)]

    status, headers, body = urlopen_raw(fault_server.add("nr", data, mode="no_ranges"), {"Range": "bytes=0-9"})
    assert (status, body, "Accept-Ranges" in headers) == (200, data, False)

    flaky = fault_server.add("flaky", data, mode="fail_then_ok", failures=2)
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError) as failed:
            urlopen_raw(flaky)
        assert failed.value.code == 503
    assert urlopen_raw(flaky)[2] == data

    changing = fault_server.add("e", data, mode="etag_changes")
    first = urlopen_raw(changing)
    second = urlopen_raw(changing, {"Range": "bytes=10-", "If-Range": first[1]["ETag"]})
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


def test_a_hashed_download_resumed_mid_block_hashes_every_byte(ckpt, fault_server, tmp_path):
    # A download is written in 128 KiB blocks that end at multiples of 128
    # KiB (download.cc, kWriteBlock), and with a hash to check, each block is
    # hashed from memory beside the transfer: a cut past the first block end
    # and a resumed range that starts mid-block and crosses several block
    # ends must give the file byte for byte and the hash of all of it.
    data = ckpt_bytes(tmp_path, scale=2)
    cut = 5 * 128 * KIB + 12345
    assert len(data) > cut + 2 * 128 * KIB, len(data)
    url = fault_server.add("model.safetensors", data, mode="cut", cut_at=cut)

    path = ckpt.fetch(url, sha256=sha256_hex(data))
    assert pathlib.Path(path).read_bytes() == data
    rows = gets(fault_server.requests(url))
    assert len(rows) == 2, rows
    assert (rows[0].status, rows[0].bytes) == (200, cut)
    assert range_start(rows[1].range) == cut, rows[1]  # all that arrived before the cut was written
    assert (rows[1].status, rows[1].bytes) == (206, len(data) - cut)
    assert entry_of(ckpt, url)["sha256"] == sha256_hex(data)


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
