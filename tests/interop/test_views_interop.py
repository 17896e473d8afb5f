"""Lazy means lazy: views that torch saved (expand, transpose, slices) and
Orbax arrays whose chunks were never written load as views over the bytes
that are stored, as torch and numpy hold them, and are gathered only when a
copy is asked for. The truth is what torch.load, tensorstore (zarr) and numpy
give; peak memory is measured in a child process (/proc/self/status)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import safetensors.torch
import tensorstore as ts
import torch

import ckpt

MIB = 1 << 20


PEAK = """
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
"""


def peak_growth(code, **names):
    """Runs `code` in one fresh interpreter (ckpt, numpy and torch imported
    first) and returns how far its peak resident memory (VmHWM, reset after
    the imports) rose over its resident memory before, in bytes. The
    child's `names` are given as strings."""
    header = "import ckpt, numpy as np, torch\n" + PEAK
    header += "".join(f"{key} = {value!r}\n" for key, value in names.items())
    header += "open('/proc/self/clear_refs', 'w').write('5')\nbefore = status('VmRSS')\n"
    footer = "\nprint(status('VmHWM') - before)\n"
    result = subprocess.run([sys.executable, "-c", header + textwrap.dedent(code) + footer], capture_output=True,
                            text=True, timeout=120, env=os.environ)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


# ---------------------------------------------------------------- torch views

def views_of_one_storage():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "base": base,
        "transposed": base.t(),
        "columns": base[:, 1:3],
        "every_other": base.reshape(-1)[1::2],
        "expanded_row": torch.arange(3, dtype=torch.float32)[None, :].expand(4, 3),
        "repeated_column": torch.arange(3, dtype=torch.float64)[:, None].expand(3, 5),
        "scalar_expanded": torch.tensor(2.5).expand(2, 3),
        "bfloat16_transposed": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t(),
    }


def test_numpy_load_returns_read_only_views_with_torchs_strides(tmp_path):
    path = tmp_path / "views.pt"
    torch.save(views_of_one_storage(), path)
    truth = torch.load(path)
    loaded = ckpt.load(path)
    for name, expected in truth.items():
        array = loaded[name]
        assert array.shape == tuple(expected.shape), name
        assert array.strides == tuple(s * expected.element_size() for s in expected.stride()), name
        assert array.flags.writeable is False, name
        contiguous = expected.contiguous()
        if contiguous.dtype == torch.bfloat16:
            contiguous = contiguous.view(torch.uint16)
            array = array.view(np.uint16)
        assert np.array_equal(array, contiguous.numpy()), name
    # Views of one storage view one memory, as torch's do.
    assert np.shares_memory(loaded["transposed"], loaded["base"])
    assert np.shares_memory(loaded["columns"], loaded["base"])


def test_torch_load_returns_tensors_with_torchs_strides_and_offsets(tmp_path):
    path = tmp_path / "views.pt"
    torch.save(views_of_one_storage(), path)
    truth = torch.load(path)
    loaded = ckpt.load(path, framework="torch")
    for name, expected in truth.items():
        tensor = loaded[name]
        assert tensor.dtype == expected.dtype, name
        assert tensor.shape == expected.shape, name
        assert tensor.stride() == expected.stride(), name
        if not expected.is_contiguous():
            assert tensor.storage_offset() == expected.storage_offset(), name
        assert torch.equal(tensor, expected), name
        assert tensor.contiguous().view(torch.uint8).numpy().tobytes() == \
            expected.contiguous().view(torch.uint8).numpy().tobytes(), name


def test_copies_are_gathered_as_torch_gathers_them(tmp_path):
    path = tmp_path / "views.pt"
    torch.save(views_of_one_storage(), path)
    truth = torch.load(path)
    for name, array in ckpt.load(path, lazy=False).items():
        assert array.flags.c_contiguous, name
        expected = truth[name].contiguous().view(torch.uint8).numpy().tobytes()
        assert array.tobytes() == expected, name
    # A conversion to a format without views writes the gathered bytes.
    out = tmp_path / "views.safetensors"
    ckpt.convert(path, out)
    converted = safetensors.torch.load_file(out)
    for name, expected in truth.items():
        assert torch.equal(converted[name], expected.contiguous()), name


def test_an_expanded_27000_square_loads_and_verifies_in_bounded_memory(tmp_path):
    path = tmp_path / "expanded.pt"
    torch.save({"w": torch.full((1,), 2.5).expand(27000, 27000)}, path)
    assert path.stat().st_size < 4096
    array = ckpt.load(path)["w"]
    assert array.shape == (27000, 27000) and array.strides == (0, 0) and not array.flags.writeable
    assert array[26999, 123] == 2.5
    tensor = ckpt.load(path, framework="torch")["w"]
    assert tensor.stride() == (0, 0) and tensor.storage_offset() == 0
    assert tensor.untyped_storage().nbytes() == 4
    # Each load was 2.9 GB (the view gathered) before.
    grown = peak_growth("""
        ckpt.verify(path)
        ckpt.inspect(path)
        w = ckpt.load(path)['w']
        t = ckpt.load(path, framework='torch')['w']
        assert w.shape == (27000, 27000) and t.shape == (27000, 27000)
        """, path=str(path))
    assert grown < 200 * MIB, grown


def test_gathering_a_view_larger_than_the_machine_is_a_checkpoint_error(tmp_path, ckpt_tool):
    # 10^12 float32 elements over one stored float: 4 TB gathered. It used to
    # raise a bare MemoryError('std::bad_alloc').
    path = tmp_path / "huge.pt"
    torch.save({"w": torch.zeros(1).expand(1000000, 1000000)}, path)
    assert ckpt.load(path)["w"].strides == (0, 0)  # lazy: a view, no error
    with pytest.raises(ckpt.CheckpointError, match="cannot allocate 4000000000000 bytes") as raised:
        ckpt.load(path, lazy=False)
    assert not isinstance(raised.value, MemoryError)
    with pytest.raises(ckpt.CheckpointError, match="cannot allocate"):
        ckpt.convert(path, tmp_path / "huge.safetensors")
    result = subprocess.run([ckpt_tool, "convert", str(path), str(tmp_path / "huge.safetensors")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "cannot allocate" in result.stderr, result.stderr
    assert not (tmp_path / "huge.safetensors").exists()


# ---------------------------------------------------------------- Orbax fill values

def zarr_item(path, shape, chunks, written, fill=None):
    """An Orbax item directory (per-array zarr layout) holding array "x" of
    float32 `shape` in `chunks`, of which only the chunks at the grid
    positions `written` exist (chunk i holds arange + i)."""
    (path / "x").mkdir(parents=True)
    (path / "_METADATA").write_text(json.dumps({"tree_metadata": {"('x',)": {
        "key_metadata": [{"key": "x", "key_type": 2}],
        "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False}}}}))
    (path / "x" / ".zarray").write_text(json.dumps({
        "chunks": chunks, "compressor": None, "dimension_separator": ".", "dtype": "<f4", "fill_value": fill,
        "filters": None, "order": "C", "shape": shape, "zarr_format": 2}))
    for index in written:
        values = np.arange(int(np.prod(chunks)), dtype="<f4") + index
        values.tofile(path / "x" / str(index))
    return ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(path / "x")}}).result()


def test_an_array_of_only_fill_value_is_a_read_only_broadcast(tmp_path):
    truth = zarr_item(tmp_path / "item", [900000000], [100000], written=[], fill=1.5)
    array = ckpt.load(tmp_path / "item")["x"]
    assert array.shape == (900000000,) and array.strides == (0,) and not array.flags.writeable
    for at in (0, 123456, 899999999):
        assert array[at] == truth[at].read().result()
    tensor = ckpt.load(tmp_path / "item", framework="torch")["x"]
    assert tensor.stride() == (0,) and tensor.untyped_storage().nbytes() == 4 and tensor[5].item() == 1.5
    grown = peak_growth("ckpt.verify(path); a = ckpt.load(path); t = ckpt.load(path, framework='torch')",
                        path=str(tmp_path / "item"))
    assert grown < 200 * MIB, grown


def test_a_partly_written_array_costs_its_written_chunks(tmp_path):
    # As the 400 KB directory of the issue: [9e8] float32, chunks 0 and 4500
    # written, the others missing (null fill: zeros). verify and load took
    # 3.6 GB.
    truth = zarr_item(tmp_path / "item", [900000000], [100000], written=[0, 4500])
    array = ckpt.load(tmp_path / "item")["x"]
    for at in (0, 99999, 100000, 450000000, 450000007, 899999999):
        assert array[at] == truth[at].read().result(), at
    window = np.s_[449999990:450000010]
    assert np.array_equal(array[window], truth[window].read().result())
    path = str(tmp_path / "item")
    grown = peak_growth("""
        ckpt.verify(path)
        x = ckpt.load(path)['x']
        assert x[450000001] == 4501
        t = ckpt.load(path, framework='torch')['x']
        assert t[5].item() == 5
        """, path=path)
    assert grown < 200 * MIB, grown
