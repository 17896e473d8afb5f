"""The URL cache's own API and the CLI over URLs (issue 19): cache_list /
remove / clear, `ckpt fetch`, `ckpt cache ls|rm|clear`, reading commands given
a URL, one-line errors, and the progress bar."""

import json
import os
import pathlib
import pty
import re
import select
import subprocess
import sys
import time

import numpy as np
import pytest

from url_servers import closed_port, fault_server, nginx_server, sha256_hex  # noqa: F401 - fixtures
from url_support import *  # noqa: F401,F403 - the autouse url_env fixture, `ckpt`, the helpers
from url_support import url_env  # noqa: F401 - pytest finds the autouse fixture through the module


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
    served = {url: urlopen_raw(url)[1] for url in (url_a, url_b)}  # nginx's own ETag and Last-Modified

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



def test_long_conversions_draw_a_progress_bar(ckpt, tmp_path, run, monkeypatch):
    """ckpt convert of 256 MiB or more draws the bar (bytes written of the
    source's tensor bytes) when asked for; a smaller one, or --quiet, none."""
    big = tmp_path / "big.safetensors"
    ckpt.save(big, {"w": np.zeros(260 * MIB // 4, np.float32)}, fsync=False)
    small = tmp_path / "small.safetensors"
    ckpt.save(small, {"w": np.zeros(MIB // 4, np.float32)})
    assert run("convert", big, tmp_path / "a.pt").stderr == ""  # no tty: no bar
    monkeypatch.setenv("CKPT_PROGRESS", "1")
    shown = run("convert", big, tmp_path / "b.pt").stderr
    assert "convert b.pt" in shown and "100%" in shown, shown
    assert run("convert", small, tmp_path / "c.pt").stderr == ""
    assert run("--quiet", "convert", big, tmp_path / "d.pt").stderr == ""
    assert ckpt.diff(tmp_path / "b.pt", big)["identical"]
