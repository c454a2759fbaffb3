"""Issue 33 item 8: a cache entry is bounded for text near the 'text' limit. Text is made
from a file's values (a `forward_frames` list joined, here one memo-shared 10,000-character
string named 6,000 times: 60 million characters from a 30 KB file); its entry's meta.json
would hold all of it (63 MB for a value just under the limit). Such a file is read again,
not cached; a file whose text is in proportion to it is cached as before."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import memlens
from memlens.snapshot.store import cache as column_cache
from memlens.snapshot.store.text_bound import json_size_bound


def _snapshot(frame: str, times: int) -> dict[str, Any]:
    entry = {"action": "alloc", "addr": 0x7F00_0000_0000, "size": 512, "stream": 0,
             "time_us": 1, "frames": [], "forward_frames": [frame] * times}  # fmt: skip
    return {"segments": [], "device_traces": [[entry]]}


def _write(tmp_path: Path, frame: str, times: int) -> Path:
    p = tmp_path / f"snap{times}.pickle"
    p.write_bytes(pickle.dumps(_snapshot(frame, times), protocol=4))  # the frame memo-shared
    return p


def _entries() -> list[Path]:
    root = column_cache.cache_root()
    return [e for e in root.iterdir() if (e / "meta.json").is_file()] if root.is_dir() else []


def test_text_past_the_bound_is_not_cached(tmp_path: Path) -> None:
    p = _write(tmp_path, "f" * 10_000, 6_000)
    assert p.stat().st_size < 40_000
    snap = memlens.load(p)
    assert max(map(len, snap.strings)) >= 60_000_000  # the text was made: the file is legal
    assert _entries() == []  # and no 60 MB meta.json was written
    again = memlens.load(p)
    assert not again.from_cache and again.strings == snap.strings


def test_text_in_proportion_to_the_file_is_cached(tmp_path: Path) -> None:
    p = _write(tmp_path, "f" * 100, 60)
    memlens.load(p)
    assert len(_entries()) == 1 and memlens.load(p).from_cache


def test_the_json_bound_is_an_upper_bound() -> None:
    import json

    for value in (
        ["a" * 10, 'q"uote', "back\\slash", "\x1b[31m", "é€😀", ""],
        {"k": [1, 2.5, None]},
    ):
        assert json_size_bound(value, 1 << 30) >= len(json.dumps(value))
    # stops once past `stop`: a walk to the bound, not over all of a huge value
    assert json_size_bound(["x" * 100] * 1_000_000, 1_000) < 2_000
