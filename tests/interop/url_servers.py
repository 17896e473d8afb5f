"""Loopback HTTP servers for the URL tests (issue 19), as pytest fixtures.

`nginx_server`: Debian's nginx, started as a foreground child on a free port of
127.0.0.1 with a temporary config (ranges on, `etag on`, `sendfile on`), serving
the files a test writes into `.root`; `.requests()` parses its access log.

`fault_server`: a Python ThreadingHTTPServer for what nginx will not do (a cut
connection, ignored ranges, 503 then success, a stall, an ETag that changes),
serving the bytes a test registers with `.add(path, data, mode=..., **kw)`;
every request is logged (`.requests(path)`).

Both listen on 127.0.0.1 only, are bounded in time and stop at teardown, even
when the test fails.
"""

import dataclasses
import hashlib
import http.server
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time

import pytest

NGINX = os.environ.get("CKPT_TEST_NGINX", "/usr/sbin/nginx")
START_TIMEOUT_S = 10.0


def free_port():
    """A port of 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, deadline, alive=lambda: True):
    """True once 127.0.0.1:port accepts a connection before `deadline`
    (time.monotonic()), False when it passes or `alive()` turns False."""
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.02)
    return False


@dataclasses.dataclass
class Request:
    """One logged request: `range`/`if_range` are the request's headers (None
    when absent), `bytes` the body bytes the server sent."""
    method: str
    path: str
    status: int
    bytes: int
    range: object = None
    if_range: object = None
    complete: bool = True


def _settle(read, min_count, timeout, quiet_s):
    """Polls `read()` (a list) until it holds at least `min_count` items and
    has not grown for `quiet_s`, or `timeout` passes; returns the last list."""
    deadline = time.monotonic() + timeout
    last = read()
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = read()
        if len(now) != len(last):
            last, stable_since = now, time.monotonic()
            continue
        last = now
        if len(last) >= min_count and time.monotonic() - stable_since >= quiet_s:
            break
    return last


# ---------------------------------------------------------------------------
# nginx

# Tab-separated, one request a line; nginx escapes tabs, quotes and bytes
# outside 32..126 inside variables as \xXX, and writes "-" for an empty one.
_LOG_FIELDS = ("method", "path", "status", "bytes", "range", "if_range", "completion")
_LOG_FORMAT = "\\t".join(("$request_method", "$request_uri", "$status", "$body_bytes_sent",
                          "$http_range", "$http_if_range", "$request_completion"))

_NGINX_CONF = """\
master_process off;
worker_processes 1;
error_log {tmp}/error.log info;
pid {tmp}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    default_type application/octet-stream;
    types {{ }}
    log_format ckpt_tests '{log_format}';
    access_log {tmp}/access.log ckpt_tests;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    sendfile on;
    etag on;
    keepalive_timeout 10s;
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
        root {root};
        location / {{ }}
        # The same files at 150 MB/s: a network slower than the disk (bench/bench_url.py).
        location /limited/ {{ alias {root}/; limit_rate 150m; }}
    }}
}}
"""


def _unescape_nginx(text):
    if text == "-":
        return None
    if "\\x" not in text:
        return text
    out, i = bytearray(), 0
    raw = text.encode("latin-1")
    while i < len(raw):
        if raw[i:i + 2] == b"\\x" and i + 4 <= len(raw):
            out.append(int(raw[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


class NginxServer:
    """nginx serving `root` on 127.0.0.1:`port`; stop() ends it."""

    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.root = self.tmp / "root"
        self.root.mkdir()
        self.log_path = self.tmp / "access.log"
        self.process = None
        self.port = None

    def start(self):
        if not os.access(NGINX, os.X_OK):
            pytest.fail(f"nginx is not installed at {NGINX} (scripts/install-deps installs it)")
        errors = []
        for _attempt in range(3):  # the free port may be taken between the pick and nginx's bind
            self.port = free_port()
            conf = self.tmp / "nginx.conf"
            conf.write_text(_NGINX_CONF.format(tmp=self.tmp, root=self.root, port=self.port,
                                               log_format=_LOG_FORMAT))
            stderr = open(self.tmp / "stderr.log", "wb")
            self.process = subprocess.Popen(
                [NGINX, "-p", str(self.tmp), "-e", str(self.tmp / "error.log"), "-c", str(conf),
                 "-g", "daemon off;"],
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)
            stderr.close()
            deadline = time.monotonic() + START_TIMEOUT_S
            if wait_for_port(self.port, deadline, alive=lambda: self.process.poll() is None):
                return self
            self.stop()
            errors.append(self._diagnostics())
        pytest.fail("nginx did not start on 127.0.0.1 within "
                    f"{START_TIMEOUT_S:.0f} s:\n" + "\n---\n".join(errors))

    def _diagnostics(self):
        parts = []
        for name in ("stderr.log", "error.log"):
            path = self.tmp / name
            if path.exists():
                parts.append(f"{name}: {path.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts) or "(no output)"

    def stop(self):
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: finishes the log lines
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def url(self, name):
        return f"{self.base_url}/{str(name).lstrip('/')}"

    def write(self, name, data):
        """Writes `data` (bytes) as root/name; returns its URL."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return self.url(name)

    def _read_log(self):
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_bytes().decode("latin-1").split("\n")
        out = []
        for line in lines[:-1]:  # the last piece is "" or a line still being written
            fields = line.split("\t")
            if len(fields) != len(_LOG_FIELDS):
                continue
            row = dict(zip(_LOG_FIELDS, fields))
            path = _unescape_nginx(row["path"]) or ""
            out.append(Request(method=row["method"], path=path.split("?", 1)[0], status=int(row["status"]),
                               bytes=int(row["bytes"]), range=_unescape_nginx(row["range"]),
                               if_range=_unescape_nginx(row["if_range"]), complete=row["completion"] == "OK"))
        return out

    def requests(self, path=None, min_count=0, timeout=2.0, quiet_s=0.1):
        """The access log's requests (of `path`, "/name" or a URL, when given),
        in order. nginx writes a line when its request ends: this polls until
        the log has at least `min_count` lines and stops growing briefly."""
        rows = _settle(self._read_log, min_count, timeout, quiet_s)
        return _filter(rows, path, self.base_url)


def _filter(rows, path, base_url):
    if path is None:
        return list(rows)
    path = str(path)
    if path.startswith(base_url):
        path = path[len(base_url):]
    path = "/" + path.split("#", 1)[0].lstrip("/")
    return [r for r in rows if r.path == path]


@pytest.fixture
def nginx_server(tmp_path_factory):
    """nginx on 127.0.0.1 serving a fresh temporary root (see NginxServer)."""
    server = NginxServer(tmp_path_factory.mktemp("nginx"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------------------
# The fault server

MODES = ("normal", "cut", "no_ranges", "fail_then_ok", "status", "stall", "etag_changes")
_LAST_MODIFIED = "Wed, 02 Dec 2026 12:00:00 GMT"


class _Entry:
    def __init__(self, data, mode, kw):
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r} (one of {MODES})")
        self.mode = mode
        self.data = bytes(data)
        self.etag = kw.pop("etag", None) or '"%s"' % hashlib.sha256(self.data).hexdigest()[:16]
        self.new_data = bytes(kw.pop("new_data", self.data[::-1]))  # etag_changes: the content after the change
        self.new_etag = '"%s"' % hashlib.sha256(b"changed" + self.new_data).hexdigest()[:16]
        self.cut_at = kw.pop("cut_at", None)                # cut (and any mode): bytes sent before the close
        self.cuts = kw.pop("cuts", 1)                       # ... on the first `cuts` whole-file GETs
        self.failures = kw.pop("failures", 1)               # fail_then_ok: how many requests fail
        self.status = kw.pop("status", 503 if mode == "fail_then_ok" else 404)
        self.stall_after = kw.pop("stall_after", 1024)      # stall: body bytes sent before the stall
        self.rate = kw.pop("rate", None)                    # bytes per second, any mode; None: full speed
        self.chunk = kw.pop("chunk", 16384)
        if kw:
            raise TypeError(f"unknown fault server options {sorted(kw)}")
        self.requests_seen = 0
        self.full_gets_seen = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ckpt-fault-server"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_HEAD(self):  # noqa: N802
        self._serve(head=True)

    def do_GET(self):  # noqa: N802
        self._serve(head=False)

    def _serve(self, head):
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        record = Request(method=self.command, path=path, status=0, bytes=0,
                         range=self.headers.get("Range"), if_range=self.headers.get("If-Range"), complete=False)
        owner._log(record)
        try:
            self._answer(owner, path, record, head)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout):
            self.close_connection = True
        finally:
            record.complete = True

    def _answer(self, owner, path, record, head):
        with owner._lock:
            entry = owner._entries.get(path)
            if entry is not None:
                entry.requests_seen += 1
                nth = entry.requests_seen
        if entry is None:
            return self._status(record, 404)
        mode = entry.mode
        if mode == "status":
            return self._status(record, entry.status)
        if mode == "fail_then_ok" and nth <= entry.failures:
            return self._status(record, entry.status)
        data, etag = entry.data, entry.etag
        if mode == "etag_changes" and nth > 1:
            data, etag = entry.new_data, entry.new_etag
        ranges = mode != "no_ranges"
        total = len(data)
        begin, end = 0, total  # [begin, end)
        status = 200
        wanted = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if ranges and wanted and (if_range is None or if_range in (etag, _LAST_MODIFIED)):
            span = _parse_range(wanted, total)
            if span == "unsatisfiable":
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{total}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                record.status = 416
                return
            if span is not None:
                begin, end = span
                status = 206
        cut = None
        if status == 200 and not head and entry.cut_at is not None:
            with owner._lock:
                entry.full_gets_seen += 1
                if entry.full_gets_seen <= entry.cuts:
                    cut = min(entry.cut_at, total)
        self.send_response(status)
        record.status = status
        self.send_header("Content-Length", str(end - begin))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", _LAST_MODIFIED)
        if ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {begin}-{end - 1}/{total}")
        if cut is not None:
            self.send_header("Connection", "close")
        self.end_headers()
        if head:
            return
        stop_at = end if cut is None else begin + cut
        if mode == "stall":
            stop_at = min(stop_at, begin + entry.stall_after)
        self._send_body(owner, entry, data, begin, stop_at, record)
        if mode == "stall":
            owner._stopping.wait(60)  # until the server stops (bounded in any case)
            self.close_connection = True
            return
        if cut is not None:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)  # a clean FIN after the bytes, not a reset

    def _send_body(self, owner, entry, data, begin, stop_at, record):
        view = memoryview(data)
        position = begin
        while position < stop_at and not owner._stopping.is_set():
            n = min(entry.chunk, stop_at - position)
            self.wfile.write(view[position:position + n])
            self.wfile.flush()
            position += n
            record.bytes += n
            if entry.rate:
                owner._stopping.wait(n / entry.rate)

    def _status(self, record, status):
        body = f"{status} {http.HTTPStatus(status).phrase}\n".encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        record.status = status
        if self.command != "HEAD":
            self.wfile.write(body)
            record.bytes += len(body)


def _parse_range(header, total):
    """(begin, end) of a single `bytes=` range, "unsatisfiable", or None
    (a header this server ignores: several ranges, another unit, garbage)."""
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first == "":  # suffix: the last n bytes
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            return (max(0, total - n), total)
        begin = int(first)
        end = total if last == "" else min(int(last) + 1, total)
    except ValueError:
        return None
    if begin >= total or end <= begin:
        return "unsatisfiable"
    return (begin, end)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FaultServer:
    """The Python server on 127.0.0.1 (see the module docstring)."""

    def __init__(self):
        self._entries = {}
        self._log_rows = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-server", daemon=True)
        self._thread.start()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def url(self, name):
        return f"{self.base_url}/{str(name).lstrip('/')}"

    def add(self, path, data, mode="normal", **kw):
        """Serves `data` at `path` ("/name" or "name") in `mode`; returns its URL.
        Options: cut_at, cuts (the first `cuts` whole-file GETs close after
        `cut_at` body bytes: any mode, "cut" needs it), failures and status
        (fail_then_ok, status), stall_after (stall), new_data (etag_changes),
        rate (bytes/s, throttles every body), etag."""
        path = "/" + str(path).lstrip("/")
        if mode == "cut" and "cut_at" not in kw:
            raise TypeError("mode='cut' needs cut_at=")
        entry = _Entry(data, mode, dict(kw))
        with self._lock:
            self._entries[path] = entry
        return self.url(path)

    def set(self, path, **kw):
        """Changes options of a registered path (e.g. rate=None after a throttled start)."""
        path = "/" + str(path).lstrip("/")
        with self._lock:
            entry = self._entries[path]
            for key, value in kw.items():
                if not hasattr(entry, key):
                    raise TypeError(f"unknown fault server option {key!r}")
                setattr(entry, key, value)

    def etag(self, path, changed=False):
        entry = self._entries["/" + str(path).lstrip("/")]
        return entry.new_etag if changed else entry.etag

    def _log(self, record):
        with self._lock:
            self._log_rows.append(record)

    def requests(self, path=None, timeout=2.0):
        """The logged requests (of `path` when given: "/name", "name" or its URL),
        in arrival order, as copies. Waits up to `timeout` for the requests in
        flight to end (a stalled one stays incomplete until stop())."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(r.complete for r in self._log_rows):
                    break
            time.sleep(0.02)
        with self._lock:
            rows = [dataclasses.replace(r) for r in self._log_rows]
        return _filter(rows, path, self.base_url)

    def stop(self):
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def fault_server():
    """The fault server on 127.0.0.1 (see FaultServer); stopped at teardown."""
    server = FaultServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def closed_port():
    """A port of 127.0.0.1 held bound but not listening: a connection is refused."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


__all__ = ["nginx_server", "fault_server", "closed_port", "NginxServer", "FaultServer", "Request",
           "free_port", "sha256_hex"]
