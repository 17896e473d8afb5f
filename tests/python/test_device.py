"""The pinned-ring pipeline of python/ckpt/_device.py (docs/gpu.md), on the
CPU: a fake device whose copies run later on a thread of their own (as DMA
would), whose events complete when those copies are done, and which checks
that a buffer's bytes did not change between a copy's start and its end.
Expected values come from torch itself (the tensors saved, torch.load)."""

from __future__ import annotations

import os
import queue
import threading
import time

import pytest
import torch

import ckpt
from ckpt import _device


class FakeEvent:
    def __init__(self):
        self._done = threading.Event()

    def synchronize(self):
        assert self._done.wait(30), "fake event never completed"

    def query(self):
        return self._done.is_set()


class FakeDevice:
    """A copier whose 'device memory' is CPU tensors; copies are done later
    by a worker thread, each after ``delay`` seconds."""

    def __init__(self, delay=0.0005, fail_at=None):
        self.device = torch.device("cpu")
        self.delay = delay
        self.fail_at = fail_at
        self.log = []            # (direction, Piece), in issue order
        self.violations = []     # pieces whose source changed while in flight
        self.live = 0            # host buffers handed out, not released
        self.max_live = 0
        self.buffer_sizes = []
        self.device_allocations = 0
        self._queue = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()

    # the copier protocol
    def host_buffer(self, nbytes):
        self.live += 1
        self.max_live = max(self.max_live, self.live)
        self.buffer_sizes.append(nbytes)
        return torch.full((nbytes,), 0xAB, dtype=torch.uint8)  # garbage: bytes never written show

    def release(self, buffer):
        self.live -= 1

    def empty(self, nbytes):
        self.device_allocations += 1
        return torch.full((nbytes,), 0xEE, dtype=torch.uint8)

    def _issue(self, direction, dst, src, piece):
        if self.fail_at is not None and len(self.log) == self.fail_at:
            raise RuntimeError("fake device: copy failed")
        self.log.append((direction, piece))
        with self._lock:
            self._pending += 1
        self._queue.put((dst, src, src.clone(), piece))

    def to_device(self, dsts, src, pieces):
        assert len(dsts) == len(pieces)
        assert src.numel() == sum(p.size for p in pieces)
        for dst, piece in zip(dsts, pieces):
            assert dst.numel() == piece.size
            self._issue("h2d", dst, src[piece.buffer_offset:piece.buffer_offset + piece.size], piece)

    def to_host(self, dst, srcs, pieces):
        assert len(srcs) == len(pieces)
        assert dst.numel() == sum(p.size for p in pieces)
        for src, piece in zip(srcs, pieces):
            assert src.numel() == piece.size
            self._issue("d2h", dst[piece.buffer_offset:piece.buffer_offset + piece.size], src, piece)

    def record(self):
        event = FakeEvent()
        self._queue.put(event)
        return event

    def synchronize(self):
        self.record().synchronize()

    # the "DMA engine"
    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, FakeEvent):
                item._done.set()
                continue
            dst, src, snapshot, piece = item
            time.sleep(self.delay)
            if not torch.equal(src, snapshot):
                self.violations.append(piece)
            dst.copy_(src)
            with self._lock:
                self._pending -= 1

    @property
    def pending(self):
        with self._lock:
            return self._pending

    def stop(self):
        self._queue.put(None)
        self._worker.join(10)


@pytest.fixture
def fake():
    device = FakeDevice()
    yield device
    device.stop()


def _state():
    g = torch.Generator().manual_seed(7)
    big = torch.randn(50, 37, generator=g)  # 7400 bytes: spans several small buffers
    return {
        "big": big,
        "bf16": torch.randn(33, generator=g).to(torch.bfloat16),
        "f16": torch.randn(4, 5, generator=g).to(torch.float16),
        "i8": torch.randint(-128, 127, (17,), generator=g, dtype=torch.int8),
        "flags": torch.rand(9, generator=g) > 0.5,
        "scalar": torch.tensor(3.25, dtype=torch.float64),
        "empty": torch.empty(0, 4),
        "i64": torch.arange(10, dtype=torch.int64) * -3,
        "c64": torch.randn(3, generator=g, dtype=torch.complex64),
        "nested": {"w": torch.randn(3, 3, generator=g), "n": 5, "s": "text"},
    }


def _assert_same(got, want):
    assert isinstance(got, torch.Tensor)
    assert got.dtype == want.dtype
    assert tuple(got.shape) == tuple(want.shape)
    assert torch.equal(got, want)


def _pieces(fake, direction="h2d"):
    return [piece for d, piece in fake.log if d == direction]


def test_safetensors_onto_fake_device_every_dtype(tmp_path, fake):
    state = _state()
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    got = _device.load(path, None, copier=fake, buffers=3, buffer_bytes=1000)
    reference = ckpt.load(path, framework="torch")
    for name in ("big", "bf16", "f16", "i8", "flags", "scalar", "empty", "i64", "c64"):
        _assert_same(got[name], state[name])
        _assert_same(got[name], reference[name])
    _assert_same(got["nested"]["w"], state["nested"]["w"])
    assert got["nested"]["n"] == 5 and got["nested"]["s"] == "text"
    assert fake.violations == []
    assert fake.live == 0 and fake.pending == 0
    # The results live in the fake device's memory, not in the mapped file.
    for name in ("big", "bf16", "i8"):
        assert got[name].data_ptr() != reference[name].data_ptr()


def test_every_byte_arrives_exactly_once_in_order(tmp_path, fake):
    state = _state()
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    tensors = [v for v in state.values() if isinstance(v, torch.Tensor)] + [state["nested"]["w"]]
    total = sum(t.numel() * t.element_size() for t in tensors)
    buffers, size = 3, 1000
    _device.load(path, None, copier=fake, buffers=buffers, buffer_bytes=size)
    pieces = _pieces(fake)
    assert sum(p.size for p in pieces) == total
    by_job = {}
    for p in pieces:
        by_job.setdefault(p.name, []).append(p)
    for name, parts in by_job.items():
        offset = 0
        for p in parts:  # issued in byte order, no gap, no overlap
            assert p.offset == offset, name
            offset += p.size
    # One job per stored tensor with bytes (none share bytes in this file).
    assert len(by_job) == sum(1 for t in tensors if t.numel())
    assert fake.device_allocations == len(by_job)
    # Ring order: fills numbered 0, 1, ... through buffers 0, 1, 2, 0, ...; each at most `size` bytes.
    sequences = [p.sequence for p in pieces]
    assert sequences == sorted(sequences)
    assert set(sequences) == set(range(max(sequences) + 1))
    assert max(sequences) + 1 == -(-total // size)
    for p in pieces:
        assert p.buffer == p.sequence % buffers
        assert 0 <= p.buffer_offset and p.buffer_offset + p.size <= size
    per_fill = {}
    for p in pieces:
        per_fill[p.sequence] = per_fill.get(p.sequence, 0) + p.size
    assert all(n == size for s, n in per_fill.items() if s != max(sequences))  # small tensors packed
    assert any(n > 1 for n in (sum(1 for p in pieces if p.sequence == s) for s in per_fill))


def test_host_memory_is_bounded(tmp_path, fake):
    state = {f"w{i}": torch.full((256,), float(i)) for i in range(40)}  # 40 KiB
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    got = _device.load(path, None, copier=fake, buffers=2, buffer_bytes=3000)
    for name, tensor in state.items():
        _assert_same(got[name], tensor)
    assert fake.max_live <= 2
    assert all(n <= 3000 for n in fake.buffer_sizes)
    assert len(fake.buffer_sizes) == 2  # allocated once, reused for all 14 fills
    assert max(p.sequence for p in _pieces(fake)) + 1 == -(-40 * 1024 // 3000)
    assert fake.live == 0


def test_a_buffer_is_not_refilled_before_its_copy_completed(tmp_path):
    """The fake's check works: a ring that does not wait for its events
    (patched) is caught; the real one is not."""
    state = {f"w{i}": torch.full((300,), float(i)) for i in range(12)}
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    slow = FakeDevice(delay=0.003)
    try:
        got = _device.load(path, None, copier=slow, buffers=2, buffer_bytes=1200)
        assert slow.violations == []
        for name, tensor in state.items():
            _assert_same(got[name], tensor)
    finally:
        slow.stop()
    broken = FakeDevice(delay=0.003)
    original = _device._Ring.wait
    try:
        _device._Ring.wait = lambda self, slot: None
        got = _device.load(path, None, copier=broken, buffers=2, buffer_bytes=1200)
    finally:
        _device._Ring.wait = original
        broken.stop()
    assert broken.violations, "refilling buffers early went unnoticed"
    assert not all(torch.equal(got[name], tensor) for name, tensor in state.items())


def test_torch_file_ties_and_views_share_device_bytes(tmp_path, fake):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    state = {"a": base, "tied": base, "t": base.t(), "row": base[1], "col": base[:, 2],
             "other": torch.ones(5, dtype=torch.int16)}
    path = tmp_path / "m.pt"
    torch.save(state, path)
    want = torch.load(path, weights_only=True)
    got = _device.load(path, None, copier=fake, buffers=2, buffer_bytes=40)
    for name in state:
        _assert_same(got[name], want[name])
        assert got[name].stride() == want[name].stride(), name
        assert got[name].storage_offset() == want[name].storage_offset(), name
    # One storage in the file: one device allocation, copied once.
    assert got["a"].untyped_storage().data_ptr() == got["t"].untyped_storage().data_ptr()
    assert got["a"].untyped_storage().data_ptr() == got["row"].untyped_storage().data_ptr()
    assert sum(p.size for p in _pieces(fake)) == 24 * 4 + 5 * 2
    assert fake.device_allocations == 2
    assert want["col"].storage_offset() == 2  # a view into the middle of the storage
    got["a"][0, 0] = 100.0  # shared on the device as in torch.load's result
    assert got["t"][0, 0].item() == 100.0 and got["tied"][0, 0].item() == 100.0
    got["a"][3, 2] = -1.0
    assert got["col"][3].item() == -1.0


def test_load_to_cpu_device_through_the_host_copier(tmp_path):
    state = _state()
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    got = _device.load(path, "cpu", buffers=2, buffer_bytes=512)
    for name in ("big", "bf16", "flags", "scalar", "empty", "c64"):
        _assert_same(got[name], state[name])
    renamed = _device.load(path, "cpu", rename={"nested": "inner"}, buffer_bytes=512)
    _assert_same(renamed["inner"]["w"], state["nested"]["w"])
    assert "nested" not in renamed


def test_to_host_through_the_ring(fake):
    state = _state()
    transposed = torch.randn(6, 4).t()
    state["view"] = transposed
    state["tied"] = state["big"]
    got = _device.to_host(state, copier_of=lambda device: fake, on_device=lambda t: True, buffers=2,
                          buffer_bytes=700)
    for name in ("big", "bf16", "f16", "i8", "flags", "scalar", "empty", "i64", "c64", "view"):
        _assert_same(got[name], state[name])
        if state[name].numel():
            assert got[name].data_ptr() != state[name].data_ptr()  # copies, not the tensors themselves
    assert got["view"].is_contiguous()
    assert got["tied"] is got["big"]
    assert got["nested"]["s"] == "text"
    assert fake.violations == [] and fake.live == 0 and fake.max_live <= 2
    assert {d for d, _ in fake.log} == {"d2h"}


def test_to_host_through_the_host_copier():
    state = _state()
    got = _device.to_host(state, on_device=lambda t: True, buffers=2, buffer_bytes=300)  # HostCopier on "cpu"
    for name in ("big", "bf16", "f16", "i8", "flags", "scalar", "empty", "i64", "c64"):
        _assert_same(got[name], state[name])
        if state[name].numel():
            assert got[name].data_ptr() != state[name].data_ptr()


def test_to_host_result_saves_and_loads(tmp_path, fake):
    state = _state()
    host = _device.to_host(state, copier_of=lambda device: fake, on_device=lambda t: True, buffer_bytes=256)
    path = tmp_path / "m.safetensors"
    ckpt.save(path, host)
    back = ckpt.load(path, framework="torch")
    for name in ("big", "bf16", "flags", "scalar", "c64"):
        _assert_same(back[name], state[name])


def test_fill_copies_into_targets(fake):
    g = torch.Generator().manual_seed(3)
    sources = [torch.randn(100, generator=g), torch.randn(3, 4, generator=g).to(torch.bfloat16),
               torch.tensor(True), torch.empty(0)]
    targets = [torch.zeros(100), torch.zeros(3, 4, dtype=torch.bfloat16), torch.tensor(False), torch.empty(0)]
    odd_source, odd_target = torch.arange(6, dtype=torch.int32), torch.zeros(6, dtype=torch.int64)
    pairs = [(f"p{i}", s, t) for i, (s, t) in enumerate(zip(sources, targets))] + [("odd", odd_source, odd_target)]
    _device.fill(pairs, copier_of=lambda device: fake, buffers=2, buffer_bytes=64)
    for source, target in zip(sources, targets):
        assert torch.equal(target, source)
    assert torch.equal(odd_target, torch.arange(6, dtype=torch.int64))
    assert {p.name for p in _pieces(fake)} == {"p0", "p1", "p2"}
    assert fake.live == 0


def test_a_failing_copy_raises_and_frees_the_buffers(tmp_path):
    state = {f"w{i}": torch.full((100,), float(i)) for i in range(10)}
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    failing = FakeDevice(fail_at=4)
    try:
        with pytest.raises(RuntimeError, match="copy failed"):
            _device.load(path, None, copier=failing, buffers=3, buffer_bytes=500)
        assert failing.live == 0
        assert failing.pending == 0  # copies in flight were waited for before the buffers went
    finally:
        failing.stop()


def test_truncated_file_raises_cleanly(tmp_path, fake):
    path = tmp_path / "m.safetensors"
    ckpt.save(path, {"w": torch.randn(1000)})
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 100)
    with pytest.raises(ckpt.CheckpointError):
        _device.load(path, None, copier=fake)
    assert fake.live == 0 and fake.log == []


def test_bad_ring_sizes(tmp_path, fake):
    path = tmp_path / "m.safetensors"
    ckpt.save(path, {"w": torch.randn(10)})
    with pytest.raises(ValueError, match="buffers"):
        _device.load(path, None, copier=fake, buffers=0)
    with pytest.raises(ValueError, match="buffer_bytes"):
        _device.load(path, None, copier=fake, buffer_bytes=0)
    assert fake.live == 0


def test_ckpt_load_device_argument(tmp_path):
    state = {"w": torch.randn(4, 4), "b": torch.ones(3, dtype=torch.bfloat16)}
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    for device in ("cpu", torch.device("cpu")):
        on_cpu = ckpt.load(path, framework="torch", device=device)
        for name in state:
            _assert_same(on_cpu[name], state[name])
    assert ckpt.load(path, device="cpu")["w"].shape == (4, 4)  # numpy, on the CPU: today's load
    with pytest.raises(ValueError, match="bogus"):
        ckpt.load(path, framework="torch", device="bogus")
    with pytest.raises(ValueError):
        ckpt.load(path, framework="torch", device=3.5)
    with pytest.raises(ValueError, match="framework"):
        ckpt.load(path, device="cuda:0")
    if not torch.cuda.is_available():
        for device in ("cuda", "cuda:0", torch.device("cuda", 1)):
            with pytest.raises(RuntimeError, match="cuda"):
                ckpt.load(path, framework="torch", device=device)
    for device in ("mps", "xpu"):
        try:
            torch.empty(0, device=device)
        except Exception:  # not in this build: a RuntimeError naming it
            with pytest.raises(RuntimeError, match=device):
                ckpt.load(path, framework="torch", device=device)
    on_meta = ckpt.load(path, framework="torch", device="meta")  # shapes and dtypes only
    assert on_meta["w"].is_meta and on_meta["b"].dtype == torch.bfloat16 and on_meta["w"].shape == (4, 4)


def test_save_of_cpu_state_is_unchanged(tmp_path):
    state = {"w": torch.randn(8)}
    assert not _device.has_device_tensor(state)
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    _assert_same(ckpt.load(path, framework="torch")["w"], state["w"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_round_trip(tmp_path):
    state = _state()
    path = tmp_path / "m.safetensors"
    ckpt.save(path, state)
    got = ckpt.load(path, framework="torch", device="cuda:0")
    for name in ("big", "bf16", "f16", "i8", "flags", "scalar", "empty", "c64"):
        assert got[name].is_cuda
        _assert_same(got[name].cpu(), state[name])
    out = tmp_path / "again.safetensors"
    ckpt.save(out, got)
    back = ckpt.load(out, framework="torch")
    for name in ("big", "bf16", "flags", "scalar"):
        _assert_same(back[name], state[name])
    model = torch.nn.Linear(37, 50).cuda()
    ckpt.save(path, {"weight": state["big"], "bias": torch.zeros(50)})
    weight = model.weight
    ckpt.restore(model, path)
    assert model.weight is weight and weight.is_cuda  # filled in place
    _assert_same(model.weight.detach().cpu(), state["big"])
    nest = {"weight": torch.zeros(50, 37, device="cuda"), "bias": torch.ones(50, device="cuda"), "cpu": torch.zeros(2)}
    ckpt.save(path, {"weight": state["big"], "cpu": torch.ones(2)})
    report = ckpt.restore(nest, path, defaults={"bias": ckpt.KEEP})
    assert report.tree["weight"].is_cuda and report.tree["bias"].is_cuda
    _assert_same(report.tree["weight"].cpu(), state["big"])
    _assert_same(report.tree["bias"].cpu(), torch.ones(50))
    _assert_same(report.tree["cpu"], torch.ones(2))
    with ckpt.Manager(tmp_path / "run") as manager:
        manager.save(1, {"w": got["big"], "b": got["bf16"]}, blocking=False)
        manager.wait()
        back = manager.load(1, framework="torch")
        _assert_same(back["w"], state["big"])
        _assert_same(back["b"], state["bf16"])


def test_read_ahead_advice_is_harmless(tmp_path):
    """madvise(MADV_WILLNEED) on the mapped file's pages, unaligned and empty
    ranges included, leaves the bytes as they are."""
    path = tmp_path / "m.safetensors"
    want = torch.arange(5000, dtype=torch.int32)
    ckpt.save(path, {"w": want})
    loaded = ckpt.load(path, framework="torch")["w"]
    _device._advise_willneed(loaded.data_ptr() + 3, 1000)
    _device._advise_willneed(loaded.data_ptr(), 0)
    _device._advise_willneed(0, 100)
    _assert_same(loaded, want)


def test_overlapping_views_without_a_whole_storage(tmp_path, fake):
    """Two views of one torch storage that overlap, neither covering the
    other: one region of the bytes they span, copied once, shared."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    path = tmp_path / "m.pt"
    torch.save({"x": base[0:2], "y": base[1:3]}, path)
    want = torch.load(path, weights_only=True)
    got = _device.load(path, None, copier=fake, buffer_bytes=16)
    for name in ("x", "y"):
        _assert_same(got[name], want[name])
    assert fake.device_allocations == 1
    assert sum(p.size for p in _pieces(fake)) == 3 * 6 * 4
    got["x"][1, 0] = 50.0
    assert got["y"][0, 0].item() == 50.0


def test_host_state_without_cuda_is_the_state_itself():
    state = {"w": torch.randn(3), "n": [1, 2]}
    assert _device.host_state(state) is state


def test_a_failing_device_to_host_copy_raises_and_frees_the_buffers():
    state = {f"w{i}": torch.full((100,), float(i)) for i in range(10)}
    failing = FakeDevice(fail_at=5)
    try:
        with pytest.raises(RuntimeError, match="copy failed"):
            _device.to_host(state, copier_of=lambda device: failing, on_device=lambda t: True, buffers=2,
                            buffer_bytes=300)
        assert failing.live == 0 and failing.pending == 0
    finally:
        failing.stop()
