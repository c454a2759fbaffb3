"""Issue 27 item 1: "billion laughs" in text. One 1 MiB string, kept once in the pickle's
memo and referenced a thousand times (a few bytes a reference), is a 1 MB file that made
memlens build a GB of text (a join, a json.dumps, a str()) in any of five places. The
limits must count characters made, not values: each case stops at the 'text' limit, in
either reader, in a thread, within the child's address space and time."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from bounded_child import load_in_thread

from memlens.snapshot.assemble.interning import TEXT_CAP, as_text
from memlens.snapshot.limits import Budget, LimitExceeded, limits_for
from memlens.snapshot.native import built

MiB = 1 << 20
REFS = 1000
BIG = "x" * MiB
LAUGHS = [BIG] * REFS  # one string object: pickled once, then memo references


def _entry(**extra: Any) -> dict[str, Any]:
    return {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "frames": [], **extra}


def _snapshot(place: str) -> dict[str, Any]:
    snap: dict[str, Any] = {"segments": [], "device_traces": [[_entry()]]}
    if place == "forward_frames":
        snap["device_traces"] = [[_entry(forward_frames=LAUGHS) for _ in range(3)]]
    elif place == "user_metadata":
        snap["device_traces"] = [[_entry(user_metadata={"k": LAUGHS})]]
    elif place == "annotation name":
        snap["external_annotations"] = [
            {"name": LAUGHS, "stage": "START", "device": 0, "time_us": 1}
        ]
    elif place == "frame filename":
        frame = {"filename": LAUGHS, "line": 1, "name": "f"}
        snap["device_traces"] = [[_entry(frames=[frame])]]
    elif place == "allocator_settings":
        snap["allocator_settings"] = {"k": LAUGHS}
    return snap


PLACES = ["forward_frames", "user_metadata", "annotation name", "frame filename",
          "allocator_settings"]  # fmt: skip
READERS = ["python", "auto"] if built() is not None else ["python"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("place", PLACES)
def test_text_laughs_stop_at_the_text_limit(tmp_path: Path, place: str, reader: str) -> None:
    p = tmp_path / "laughs.pickle"
    data = pickle.dumps(_snapshot(place), protocol=4)
    assert len(data) < MiB + 10 * REFS  # a 1 MB file ...
    p.write_bytes(data)
    got = load_in_thread(p, reader, address_space=2 << 30, timeout=60)
    # ... that asks for a GB of text: refused, with the limit's name and how to raise it
    assert got["result"] == "limit text", got
    assert "67,108,864 characters of text made from the snapshot's values" in got["message"]
    assert "--limit text=" in got["message"]


def test_text_from_a_non_string_is_capped() -> None:
    budget = Budget(limits_for(1 << 30))
    text = as_text({"k": ["y" * 100] * 100}, budget, "a name")
    assert len(text) <= TEXT_CAP and text.endswith("... (10,407 characters)")
    assert budget.text_used >= 10_407  # charged the whole JSON before making it


def test_text_limit_counts_each_reference() -> None:
    budget = Budget(limits_for(0))  # 64 MiB of text
    with pytest.raises(LimitExceeded) as info:
        as_text([BIG] * 65, budget, "a name")
    assert info.value.name == "text"
