"""The column cache's checksum: CRC-32C from the compiled helper (hardware where the CPU
has it, a table otherwise), zlib's CRC-32 for entries written without the helper, and
every byte of a file touched since it was written checked either way (issue 25: the
warm start's check, 4x cheaper; issue 37: files their writer left untouched are not read)."""

from __future__ import annotations

import json
import os
import warnings
import zlib

import pytest

import memlens
from memlens.snapshot.store import cache as column_cache

_checksum = pytest.importorskip("memlens.snapshot.store._checksum")


def test_crc32c_check_values():
    # RFC 3720 (iSCSI) B.4 and the usual "123456789" check value
    assert _checksum.crc32c(b"123456789") == 0xE3069283
    assert _checksum.crc32c(bytes(32)) == 0x8A9136AA
    assert _checksum.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert _checksum.crc32c(bytes(range(32))) == 0x46DD794E
    assert _checksum.crc32c(b"") == 0


def test_hardware_and_table_agree_at_every_alignment_and_chain():
    data = os.urandom(4096 + 13)
    for start in range(9):  # unaligned starts and tails, both paths
        for end in (len(data), len(data) - 3, start + 7):
            chunk = memoryview(data)[start:end]
            assert _checksum.crc32c(chunk) == _checksum._software(chunk)
    # three blocks of 4096 side by side, then one stream: lengths around those edges
    big = os.urandom(5 * 3 * 4096 + 29)
    for n in (3 * 4096 - 1, 3 * 4096, 3 * 4096 + 1, 3 * 4096 + 8, 6 * 4096 + 7, len(big)):
        for start in (0, 3):
            chunk = memoryview(big)[start : start + n]
            assert _checksum.crc32c(chunk) == _checksum._software(chunk), (n, start)
    # chained like zlib.crc32
    assert _checksum.crc32c(data[100:], _checksum.crc32c(data[:100])) == _checksum.crc32c(data)


def test_entries_carry_crc32c_and_a_flipped_byte_is_caught(hand_file):
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    meta = json.loads((entry / "meta.json").read_text())
    col = meta["columns"]["d0.size"]
    path = entry / "d0.size.npy"
    assert col["crc32c"] == _checksum.crc32c(path.read_bytes()) and "crc32" not in col
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x10  # inside the last value (the header holds the front of the file)
    path.write_bytes(bytes(data))
    with pytest.raises(memlens.CacheError, match="d0.size was changed"):
        column_cache.load(hand_file)


def test_an_entry_of_zlib_crc32_is_still_checked(hand_file):
    """Entries written without the helper (or before it) carry zlib's CRC-32: read and
    checked with it, byte for byte."""
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    meta = json.loads((entry / "meta.json").read_text())
    for name, col in meta["columns"].items():
        del col["crc32c"]
        col["crc32"] = zlib.crc32((entry / f"{name}.npy").read_bytes())
    (entry / "meta.json").write_text(json.dumps(meta))
    assert column_cache.load(hand_file) is not None
    path = entry / "d0.addr.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(memlens.CacheError, match="d0.addr was changed"):
        column_cache.load(hand_file)


def test_without_the_helper_a_crc32c_entry_is_rewritten_with_crc32(hand_file, monkeypatch):
    truth = memlens.load(hand_file).device(0).active_after.tolist()  # a CRC-32C entry
    monkeypatch.setattr(column_cache, "_checksum", None)
    # untouched files need no checksum; one touched since it was written cannot be checked
    assert column_cache.load(hand_file) is not None
    entry, _ = column_cache.entry_dir(hand_file)
    os.utime(entry / "d0.active_after.npy")
    with pytest.raises(memlens.CacheError, match="needs the compiled helper"):
        column_cache.load(hand_file)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "cache entry unusable, rebuilding"
        again = memlens.load(hand_file)
    assert again.device(0).active_after.tolist() == truth
    entry, _ = column_cache.entry_dir(hand_file)
    meta = json.loads((entry / "meta.json").read_text())
    assert all("crc32" in c and "crc32c" not in c for c in meta["columns"].values())
    assert memlens.load(hand_file).from_cache
