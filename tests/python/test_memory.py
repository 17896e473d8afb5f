"""Peak memory of ckpt.load (lazy) on files of many tiny values (issue 15):
4M Nones as a torch pickle and as Flax msgpack stay within 64 bytes of
resident memory per byte of file, over what the same process needed just
before the load (the interpreter, numpy and ckpt imported); and a pickle
that references one memoized str 30,000 times is refused as corrupt, not
copied 30,000 times. Each is measured in a fresh interpreter
(resource.getrusage's ru_maxrss).

Run: .venv/bin/python -m pytest tests/python/test_memory.py -q
"""

import struct
import subprocess
import sys
import zipfile

import pytest

NONES = 4_000_000
BYTES_PER_FILE_BYTE = 64

MEASURE = r"""
import resource, sys
import ckpt
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tree = ckpt.load(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert tree == {"a": [None] * %d}, "wrong tree"
print(base, peak)
""" % NONES


def torch_zip(path, pickle):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pickle)
        archive.writestr("archive/byteorder", "little")
        archive.writestr("archive/version", "3\n")


def torch_nones(path):
    # {"a": [None] * NONES}: EMPTY_DICT, "a", EMPTY_LIST, MARK, N..., APPENDS, SETITEM
    torch_zip(path, b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01](" + b"N" * NONES + b"es.")


def msgpack_nones(path):
    path.write_bytes(b"\x81\xa1a\xdd" + struct.pack(">I", NONES) + b"\xc0" * NONES)


@pytest.mark.parametrize("make,name", [(torch_nones, "nones.pt"), (msgpack_nones, "nones.msgpack")])
def test_lazy_load_of_many_nones_stays_within_64_times_the_file(tmp_path, make, name):
    path = tmp_path / name
    make(path)
    size = path.stat().st_size
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    base_kb, peak_kb = map(int, done.stdout.split())
    per_byte = (peak_kb - base_kb) * 1024 / size
    assert per_byte <= BYTES_PER_FILE_BYTE, f"{name}: {per_byte:.0f} bytes per file byte over a base of {base_kb} KB"


def test_memoized_string_referenced_30000_times_is_refused(tmp_path):
    import ckpt

    path = tmp_path / "bomb.pt"
    text = b"x" * 60000
    torch_zip(path, b"\x80\x02](X" + struct.pack("<I", len(text)) + text + b"q\x01" + b"h\x01" * 30000 + b"e.")
    with pytest.raises(ckpt.CorruptCheckpointError, match="bomb.pt"):
        ckpt.load(path)
