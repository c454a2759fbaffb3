"""Hostile, corrupt and foreign input: a clear memlens error, nothing executed, no hang."""

from __future__ import annotations

import gzip
import os
import pickle
import subprocess
import sys

import pytest

import memlens
from memlens.errors import SnapshotError, UnsafePickleError
from snapshot_builders import hand_snapshot


class _RunsCommand:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('true')",))


def test_pickle_importing_os_system_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pickle"
    payload = {"segments": [], "device_traces": [[_RunsCommand(str(marker))]]}
    path.write_bytes(pickle.dumps(payload, protocol=4))
    with pytest.raises(UnsafePickleError) as info:
        memlens.load(path)
    assert "system" in str(info.value)  # names what it tried to import (posix.system)
    assert "nothing was executed" in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_eval_reduce_refused_in_every_protocol(tmp_path, protocol):
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(_CallsEval(), protocol=protocol))
    with pytest.raises(UnsafePickleError, match=r"(builtins|__builtin__)\.eval"):
        memlens.load(path)


def test_persistent_id_refused():
    import io

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "x" if obj == "secret" else None

    buf = io.BytesIO()
    P(buf, protocol=2).dump({"segments": ["secret"]})
    with pytest.raises(UnsafePickleError, match="persistent"):
        memlens.load(buf.getvalue())


def test_extension_registry_opcode_refused():
    import copyreg

    copyreg.add_extension("os", "system", 0x3ABC)
    try:
        data = pickle.dumps(os.system, protocol=2)
    finally:
        copyreg.remove_extension("os", "system", 0x3ABC)
    # the registry of the reading process does not hold the code, and if it did,
    # the lookup would still go through find_class and be refused
    with pytest.raises(SnapshotError):
        memlens.load(data)
    copyreg.add_extension("os", "system", 0x3ABC)
    try:
        with pytest.raises(UnsafePickleError, match="system"):
            memlens.load(data)
    finally:
        copyreg.remove_extension("os", "system", 0x3ABC)


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_truncated_pickle(tmp_path):
    data = pickle.dumps(hand_snapshot(), protocol=4)
    p = _write(tmp_path, "cut.pickle", data[: len(data) // 2])
    with pytest.raises(SnapshotError, match="truncated|not a readable pickle"):
        memlens.load(p)


def test_random_bytes(tmp_path):
    p = _write(tmp_path, "noise.pickle", os.urandom(4096))
    with pytest.raises(SnapshotError):
        memlens.load(p)


def test_empty_file(tmp_path):
    with pytest.raises(SnapshotError, match="empty"):
        memlens.load(_write(tmp_path, "empty.pickle", b""))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SnapshotError, match="no such file"):
        memlens.load(tmp_path / "nope.pickle")
    with pytest.raises(SnapshotError, match="directory"):
        memlens.load(tmp_path)


@pytest.mark.parametrize(
    "obj, message",
    [
        ([1, 2, 3], "not a list of allocator segments"),
        ({"model": "resnet"}, "neither 'segments' nor 'device_traces'"),
        ("hello", "holds a str"),
        ({"segments": [], "device_traces": [[{"addr": 1}]]}, "no 'action' field"),
        (
            {"segments": [], "device_traces": [[{"action": "alloc", "addr": "x", "size": 1}]]},
            "expected an integer",
        ),
        ({"segments": [], "device_traces": {"0": []}}, "should be a list"),
        ({"segments": 5}, "should be a list"),
        ({"segments": [], "device_traces": [[7]]}, "expected a dict"),
    ],
)
def test_foreign_or_malformed_structures(tmp_path, obj, message):
    p = _write(tmp_path, "foreign.pickle", pickle.dumps(obj, protocol=4))
    with pytest.raises(SnapshotError, match=message):
        memlens.load(p)


def test_invalid_json_and_corrupt_gzip(tmp_path):
    with pytest.raises(SnapshotError, match="not valid JSON"):
        memlens.load(_write(tmp_path, "bad.json", b'{"segments": [1, 2'))
    gz = gzip.compress(pickle.dumps(hand_snapshot(), protocol=4))
    with pytest.raises(SnapshotError):
        memlens.load(_write(tmp_path, "cut.pickle.gz", gz[: len(gz) // 2]))


def test_empty_trace_is_fine():
    snap = memlens.load({"segments": [], "device_traces": [[]]})
    d = snap.device(0)
    assert d.n_events == 0 and d.peak_active_bytes == 0 and d.peak_event_index == -1
    assert d.live_at(-1).tolist() == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memlens", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_prints_one_line_and_exits_2_for_bad_input(tmp_path):
    marker = tmp_path / "pwned"
    evil = _write(
        tmp_path, "evil.pickle", pickle.dumps({"x": _RunsCommand(str(marker))}, protocol=4)
    )
    for path in (
        evil,
        _write(tmp_path, "noise.pickle", os.urandom(300)),
        _write(tmp_path, "e.pickle", b""),
    ):
        r = _cli("summary", str(path))
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("memlens: error: ")
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not marker.exists()
