"""A file that is not a pickle is named for what it is (text, a zip archive, binary data),
by both readers alike, instead of being read as opcodes and refused as an attack; and the
pickles Python 3.14 writes by default (protocol 5) read like any other."""

from __future__ import annotations

import pickle
import pickletools
import zipfile

import pytest

import memlens
from snapshot_builders import hand_snapshot

ADVICE = "a memory snapshot is the pickle written by torch.cuda.memory._dump_snapshot"
READERS = ["python", "compiled"]


@pytest.fixture(params=READERS)
def reader(request, monkeypatch):
    monkeypatch.setenv("MEMLENS_READER", request.param)
    return request.param


@pytest.mark.parametrize(
    "content, kind",
    [
        # `o` (OBJ) and `b` (BUILD) are opcodes: read as a pickle, this CSV was an "attack"
        (b"step,bytes\nforward,10\nbackward,20\n", "looks like text"),
        (b"hello world. The end.", "looks like text"),
        ("café au lait\n".encode(), "looks like text"),
        (bytes([0x01, 0x02, 0x00, 0xFF, 0xFE, 0x10]) * 4, "looks like binary data"),
    ],
)
def test_non_pickle_is_named_not_refused_as_code(tmp_path, reader, content, kind):
    p = tmp_path / "notes.txt"
    p.write_bytes(content)
    with pytest.raises(memlens.SnapshotError) as err:
        memlens.load(p)
    assert str(err.value) == f"{p} is not a pickle: it {kind}; {ADVICE} (or its JSON)"
    assert "calls or imports code" not in str(err.value)


def test_zip_archive_is_named(tmp_path, reader):
    p = tmp_path / "model.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    with pytest.raises(memlens.SnapshotError, match=r"it is a zip archive \(torch.save"):
        memlens.load(p)


def test_text_bytes_in_memory_are_named():
    with pytest.raises(memlens.SnapshotError) as err:
        memlens.load(b"just some words\n")
    assert str(err.value) == f"data is not a pickle: it looks like text; {ADVICE} (or its JSON)"


def test_hostile_protocol_0_pickle_is_still_refused(tmp_path, reader):
    """A protocol 0 file that imports is a pickle: the scan still refuses it by name."""
    p = tmp_path / "evil.pickle"
    p.write_bytes(b"cos\nsystem\n(S'echo hi'\ntR.")
    with pytest.raises(memlens.UnsafePickleError, match="os.system"):
        memlens.load(p)


def test_python_314_default_protocol_5_pickle(tmp_path, reader):
    """Python 3.14 made protocol 5 the default (3.8-3.13: 4) and added no opcode: a
    snapshot holds no bytearray or PickleBuffer, so its protocol 5 pickle uses only the
    opcodes of protocol 4 (FRAME, MEMOIZE, ...) after PROTO 5."""
    data = pickle.dumps(hand_snapshot(), protocol=5)
    assert data[:2] == b"\x80\x05"
    used = {op.name for op, _, _ in pickletools.genops(data)}
    assert used <= {
        "PROTO", "FRAME", "EMPTY_DICT", "EMPTY_LIST", "MEMOIZE", "MARK", "SETITEMS",
        "SETITEM", "APPENDS", "APPEND", "SHORT_BINUNICODE", "BINUNICODE", "BININT",
        "BININT1", "BININT2", "LONG1", "TUPLE1", "TUPLE2", "TUPLE3", "TUPLE", "NONE",
        "NEWTRUE", "NEWFALSE", "BINGET", "LONG_BINGET", "BINFLOAT", "EMPTY_TUPLE", "STOP",
    }  # fmt: skip
    p = tmp_path / "s.pickle"
    p.write_bytes(data)
    curve = memlens.load(p).device(0).active_after.tolist()
    assert curve == [1050, 1150, 1350, 1350, 1250, 1200, 1500, 1500, 1510, 1310]
