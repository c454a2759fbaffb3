"""The answers kept beside the column cache (views/web/kept_answers.py): a second start
serves the meta answer's devices and the whole-trace viewports byte for byte as a fresh
computation gives them, without computing them; anything else, a damaged or foreign kept
answer, or one kept by other code, is computed afresh."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from view_fixtures import serving

import memlens
from memlens.simulation.synthetic import generate_snapshot
from memlens.snapshot.store import cache
from memlens.views.layout import DeviceLayout
from memlens.views.web import kept_answers
from memlens.views.web.data import ViewerData

N = 20_000
E1 = 20_121.0  # the generated trace's events
WHOLE: list[dict[str, Any]] = [
    {"width": 854, "height": 410},
    {"width": 854, "height": 410, "e0": 0.0, "e1": E1},  # the page's form
    {"width": 854, "height": 40, "e0": 0.0, "e1": E1, "detail": False},  # overview
    {"width": 97, "height": 50, "split": "stream"},
    {"width": 99_999, "height": 0},  # clamped as always
]
# answers never kept: a part of the trace, the time axis, a find query, a memory zoom, another
# sub-pixel threshold, -0.0 (echoed as such)
NOT_WHOLE: list[dict[str, Any]] = [
    {"width": 854, "height": 410, "e0": 5.0, "e1": E1},
    {"width": 854, "height": 410, "e0": 0.0, "e1": E1 - 1},
    {"width": 854, "height": 410, "e0": -0.0, "e1": E1},
    {"width": 854, "height": 410, "t0": 1.0, "t1": 2.0e15},
    {"width": 854, "height": 410, "q": "forward"},
    {"width": 854, "height": 410, "ymax": 1 << 30},
    {"width": 854, "height": 410, "ymin": 1, "ymax": 1 << 30},
    {"width": 854, "height": 410, "min_px": 1.0},
]


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    path = tmp_path / "g.pickle"
    generate_snapshot(path, events=N, truncate=500)
    return path


def opened(path: Path) -> ViewerData:
    return ViewerData([memlens.load(path, warn=False)])


def fresh_answers(data: ViewerData, requests: list[dict[str, Any]]) -> list[bytes]:
    """What view() gives, encoded as the API encodes it (never a kept answer)."""
    return [kept_answers.json_bytes(data.view(0, 0, **r)) for r in requests]


def kept_sets(data: ViewerData) -> list[str]:
    snap = data.snapshots[0]
    assert snap.cache_key is not None
    folder = cache.cache_root() / snap.cache_key / "derived"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("answer-"))


def test_kept_answers_are_served_byte_for_byte(generated, monkeypatch):
    data = opened(generated)
    assert data.dev(0, 0).n_events == E1
    fresh = fresh_answers(data, WHOLE)
    meta = json.dumps(data.meta())
    assert [data.view_json(0, 0, **r) for r in WHOLE] == fresh
    data.warm()  # keeps them (after the layout indexes)
    fp = kept_answers.fingerprint()
    assert kept_sets(data) == [
        f"answer-{fp}-meta-d0",
        f"answer-{fp}-view-d0-8192x1-stack-1",
        f"answer-{fp}-view-d0-854x40-stack-0",
        f"answer-{fp}-view-d0-854x410-stack-1",
        f"answer-{fp}-view-d0-97x50-stream-1",
    ]
    again = opened(generated)
    monkeypatch.setattr(DeviceLayout, "view", lambda *a, **k: pytest.fail("computed"))
    monkeypatch.setattr("memlens.views.web.data.chart_peak", lambda *a: pytest.fail("computed"))
    assert json.dumps(again.meta()) == meta
    assert [again.view_json(0, 0, **r) for r in WHOLE] == fresh
    assert again._layouts == {}  # nothing restored or built to answer them


def test_other_requests_are_computed_and_never_kept(generated):
    data = opened(generated)
    fresh = fresh_answers(data, NOT_WHOLE)
    assert [data.view_json(0, 0, **r) for r in NOT_WHOLE] == fresh
    data.warm()
    assert [s.split("-", 2)[2] for s in kept_sets(data)] == ["meta-d0"]
    # -0.0 is not 0.0 in the answer's echo of the range
    assert b'"e0":-0.0' in fresh[2] and b'"e0":0.0' not in fresh[2]


def test_answers_computed_after_warm_are_kept_too(generated):
    data = opened(generated)
    data.warm()
    body = data.view_json(0, 0, width=300, height=200)  # kept by a thread of its own
    deadline = time.monotonic() + 30
    while kept_answers.load(data.snapshots[0], "view-d0-300x200-stack-1") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert kept_answers.load(data.snapshots[0], "view-d0-300x200-stack-1") == body


@pytest.mark.parametrize("how", ["bytes", "not json", "parent", "missing", "other code"])
def test_damaged_foreign_or_stale_kept_answers_are_computed_again(generated, monkeypatch, how):
    data = opened(generated)
    fresh = fresh_answers(data, WHOLE[:1])
    meta = json.dumps(data.meta())
    data.view_json(0, 0, **WHOLE[0])
    data.warm()
    snap = data.snapshots[0]
    folder = cache.cache_root() / str(snap.cache_key) / "derived"
    kept = folder / kept_answers.set_name("view-d0-854x410-stack-1")
    if how == "bytes":  # a changed byte: the checksum no longer matches
        body = kept / "body.npy"
        raw = bytearray(body.read_bytes())
        raw[-2] ^= 1
        body.write_bytes(bytes(raw))
    elif how == "not json":  # sound, but not an answer (only JSON objects are kept)
        assert kept_answers.save(snap, "view-d0-854x410-stack-1", b"[1, 2]")
    elif how == "parent":  # kept for another entry
        meta_json = json.loads((kept / "meta.json").read_text())
        meta_json["parent"] = "0" * 32
        (kept / "meta.json").write_text(json.dumps(meta_json))
    elif how == "missing":
        (kept / "body.npy").unlink()
    else:  # memlens edited or upgraded since: another fingerprint
        monkeypatch.setattr(kept_answers, "fingerprint", lambda: "0123456789abcdef")
    again = opened(generated)
    assert json.dumps(again.meta()) == meta
    assert again.view_json(0, 0, **WHOLE[0]) == fresh[0]
    assert again._layouts  # computed
    again.warm()  # ... and kept again, sound this time
    assert kept_answers.load(again.snapshots[0], "view-d0-854x410-stack-1") == fresh[0]
    if how == "other code":  # the answers of the code before are dropped
        assert all(s.startswith("answer-0123456789abcdef-") for s in kept_sets(again))


def test_at_most_max_kept_views_per_snapshot(generated, monkeypatch):
    monkeypatch.setattr(kept_answers, "MAX_KEPT_VIEWS", 3)
    data = opened(generated)
    for width in range(100, 106):
        data.view_json(0, 0, width=width, height=100)
        data._keeper.flush()  # (before warm(): put() only queues)
        time.sleep(0.02)  # (the newest kept last, past the file system's clock steps)
    views = [s.split("-", 2)[2] for s in kept_sets(data) if "-view-" in s]
    assert views == [f"view-d0-{w}x100-stack-1" for w in (103, 104, 105)]


def test_nothing_kept_without_a_cache_entry(generated):
    data = ViewerData([memlens.load(generated, cache=False, warn=False)])
    data.view_json(0, 0, **WHOLE[0])
    data.warm()
    assert data.snapshots[0].cache_key is None
    assert not kept_answers.has_views(data.snapshots[0], 0)


def test_the_fingerprint_follows_the_code(tmp_path, monkeypatch):
    pkg = tmp_path / "memlens"
    (pkg / "views").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "views" / "b.py").write_text("y = 2\n")
    (pkg / "notes.txt").write_text("not code\n")
    monkeypatch.setattr(kept_answers, "PACKAGE", pkg)
    monkeypatch.setattr(kept_answers, "fingerprint", kept_answers.fingerprint.__wrapped__)
    first = kept_answers.fingerprint()
    assert len(first) == 16 and int(first, 16) >= 0
    (pkg / "notes.txt").write_text("other notes\n")
    assert kept_answers.fingerprint() == first  # only modules count
    (pkg / "views" / "b.py").write_text("y = 3\n")
    assert kept_answers.fingerprint() != first
    second = kept_answers.fingerprint()
    monkeypatch.setattr(np, "__version__", "0.0.1")
    assert kept_answers.fingerprint() != second


def test_a_kept_viewport_over_http_is_the_computed_one(generated):
    url_path = "api/d/0/view?snap=0&e0=0&e1=20121&width=854&height=410"
    data = opened(generated)
    with serving(data) as url, urllib.request.urlopen(url + url_path) as r:
        computed = r.read()
    data.warm()
    again = opened(generated)
    with serving(again) as url, urllib.request.urlopen(url + url_path) as r:
        kept = r.read()
        assert r.headers["content-type"] == "application/json"
    assert kept == computed == fresh_answers(data, [{**WHOLE[1]}])[0]
    assert again._layouts == {}
