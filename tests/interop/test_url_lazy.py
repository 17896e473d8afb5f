"""Lazy remote opens (issue 19): `ckpt.open(url, lazy=True)` fetches a
safetensors or torch file's header and then only the tensors asked for,
checked against their stored checksums, against nginx on 127.0.0.1 (byte
counts from its access log)."""

import pathlib

import numpy as np
import pytest

from url_servers import closed_port, fault_server, nginx_server, sha256_hex  # noqa: F401 - fixtures
from url_support import *  # noqa: F401,F403 - the autouse url_env fixture, `ckpt`, the helpers
from url_support import url_env  # noqa: F401 - pytest finds the autouse fixture through the module


@pytest.mark.parametrize("then", ["load", "fetch"])
@pytest.mark.parametrize("writer", ["ckpt", "safetensors"])
def test_lazy_open_fetches_the_header_and_one_tensor(ckpt, nginx_server, tmp_path, writer, then):
    state = sample_state(15, scale=2)
    local = write_peer(writer, tmp_path / "src", state)
    data = local.read_bytes()
    url = nginx_server.write("model.safetensors", data)
    name, header = middle_tensor(local)
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
    _, header = middle_tensor(local)
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


