"""The report's content on a hand-built snapshot: exact figures, curves, tree and sites."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from report_snapshots import MiB, step_snapshot, write

import memlens
from memlens.views.report import build_report, default_output, write_report
from memlens.views.report.icicle import compact, peak_trees
from memlens.views.report.timeline import minmax_bins, nice_byte_step, nice_count_step

ISLAND = re.compile(r'<script type="application/json" id="memlens-data">(.*?)</script>', re.S)


def _island_text(html_text: str) -> str:
    found = ISLAND.search(html_text)
    assert found is not None, "no data island"
    return found.group(1)


def island(html_text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_island_text(html_text))
    return data


@pytest.fixture(scope="module")
def report():
    snap = memlens.load(step_snapshot(evil=False), cache=False)
    text, problems = build_report(snap)
    return text, island(text), problems


def test_timeline_curves_exact_when_every_event_fits(report):
    _, data, _ = report
    (tl,) = data["timelines"]
    c = tl["curves"]
    assert c["n"] == 9
    assert c["start"] == list(range(9))
    mib6 = 6 * MiB
    assert c["amax"] == [
        0,
        MiB,
        3 * MiB,
        mib6,
        mib6,
        5 * MiB,
        5 * MiB + 512,
        5 * MiB + 512,
        2 * MiB + 512,
    ]
    assert c["amin"] == c["amax"]
    assert c["rmax"] == [8 * MiB] * 9
    assert c["peak"] == 3
    assert c["t"] == [1000 + i for i in range(9)]


def test_peak_tree_python_view(report):
    _, data, _ = report
    trees = data["trees"]["peak"]
    assert trees["event"] == 3
    root = trees["python"]
    assert (root["n"], root["b"], root["c"]) == ("all", 6 * MiB, 3)
    (train,) = root["k"]
    assert train["n"] == "train_step (train.py:10)" and train["b"] == 6 * MiB
    assert train["f"] == "/home/u/train.py:10"
    kids = [(k["n"], k["b"], k["c"]) for k in train["k"]]
    assert kids == [("forward (model.py:20)", 4 * MiB, 2), ("backward (model.py:40)", 2 * MiB, 1)]
    # the torch frame (linear) is internal: left out of the Python view, as in `memlens
    # peak` (analysis.tree.internal_frame_mask); the all-frames view keeps it
    fwd = train["k"][0]
    assert "k" not in fwd
    (all_train,) = [k for k in trees["all"]["k"] if k["n"] == "train_step (train.py:10)"]
    assert "linear (functional.py:2380)" in [k["n"] for k in all_train["k"][0]["k"]]


def test_overview_and_sites(report):
    text, _, problems = report
    assert problems == []
    assert "6.00 MiB" in text  # peak active
    assert "8.00 MiB" in text  # peak reserved
    assert "after event 3" in text
    # top sites at the peak: first user frame (torch hidden), largest first
    # sites wrap at "/" only (<wbr> after each slash)
    plain = text.replace("/<wbr>", "/")
    assert "/<wbr>home/<wbr>u/<wbr>model.py:20" in text
    sites = re.findall(r"<tr><td><code>([^<]*)</code></td><td class=\"num\">([^<]*)</td>", plain)
    assert sites[:2] == [
        ("forward (/home/u/model.py:20)", "4.00 MiB"),
        ("backward (/home/u/model.py:40)", "2.00 MiB"),
    ]


def test_settings_section_marks_changed(report):
    text, _, _ = report
    section = text.split('<section id="settings">')[1].split("</section>")[0]
    assert "PYTORCH_CUDA_ALLOC_CONF *" in section
    assert "expandable_segments:False" in section


def test_minmax_bins_keeps_extremes():
    v = np.array([5, 1, 9, 3, 3, 7, 0, 2, 8, 4], dtype=np.int64)
    start, lo, hi = minmax_bins(v, 4)
    assert start.tolist() == [0, 2, 5, 7]
    assert lo.tolist() == [1, 3, 0, 2]
    assert hi.tolist() == [5, 9, 7, 8]
    start, lo, hi = minmax_bins(v, 100)
    assert start.tolist() == list(range(10)) and lo.tolist() == hi.tolist() == v.tolist()


def test_minmax_bins_large_is_bounded_and_exact_at_peak():
    rng = np.random.default_rng(0)
    v = rng.integers(0, 10**12, size=1_000_003)
    start, lo, hi = minmax_bins(v, 1000)
    assert len(start) == 1000 and start[0] == 0
    assert hi.max() == v.max() and lo.min() == v.min()
    k = int(np.searchsorted(start, int(np.argmax(v)), side="right")) - 1
    assert hi[k] == v.max()


def test_nice_steps():
    assert nice_byte_step(6.3 * MiB) == 2 * MiB
    assert nice_byte_step(51 * 1024**3) == 20 * 1024**3
    assert nice_byte_step(900) == 200
    assert nice_count_step(20128) == 5000
    assert nice_count_step(9) == 2
    assert nice_count_step(1_000_000) == 200_000


def test_compact_rekeys_the_pruned_tree():
    tree = {
        "label": "all", "bytes": 10_000, "count": 7, "children": [
            {"label": "big (a.py:1)", "bytes": 9_000, "count": 3,
             "frame": {"filename": "/x/a.py", "line": 1, "name": "big", "kind": "python"},
             "children": [{"label": "<other>", "bytes": 5, "count": 2, "children": []}]},
            {"label": "mid", "bytes": 1_000, "count": 4, "children": []},
        ],
    }  # fmt: skip
    assert compact(tree) == {
        "n": "all", "b": 10_000, "c": 7,
        "k": [
            {"n": "big (a.py:1)", "b": 9_000, "c": 3, "f": "/x/a.py:1",
             "k": [{"n": "<other>", "b": 5, "c": 2, "o": 1}]},
            {"n": "mid", "b": 1_000, "c": 4},
        ],
    }  # fmt: skip


def test_peak_tree_folds_small_nodes(tmp_path):
    # 1000 allocations of 1 B under distinct frames beside one of 10 MB: all folded
    raw = step_snapshot(evil=False)
    trace = raw["device_traces"][0]
    t = trace[-1]["time_us"]
    for i in range(1000):
        fr = [{"filename": f"/home/u/f{i}.py", "line": i, "name": f"f{i}"}]
        trace.append(
            {
                "action": "alloc",
                "addr": 0x9000000 + 16 * i,
                "size": 1,
                "stream": 0,
                "time_us": t,
                "frames": fr,
            }
        )
    dev = memlens.load(raw, cache=False).device()
    trees = peak_trees(dev, dev.n_events - 1)
    root = trees["python"]
    assert root["b"] == 2 * MiB + 512 + 1000
    others = [k for k in root["k"] if k.get("o")]
    assert others == [{"n": "<other>", "b": 1000, "c": 1000, "o": 1}]


def test_write_report_default_path(tmp_path):
    snap_path = write(step_snapshot(), tmp_path / "step.pickle")
    out = write_report(snap_path)
    assert out == tmp_path / "step.html" == default_output(snap_path)
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert default_output("a/b.pickle.gz").as_posix() == "a/b.html"


def test_empty_trace_degrades(tmp_path):
    snap = memlens.load({"segments": [], "device_traces": [[]]}, cache=False)
    text, problems = build_report(snap)
    assert problems == []
    assert "Not available: this device has no trace entries" in text


def test_report_is_deterministic():
    snap = memlens.load(step_snapshot(evil=False), cache=False)
    assert build_report(snap)[0] == build_report(snap)[0]


def test_every_section_module_is_on_the_page():
    # one module per section (named as its id): a report-only one in build.REPORT_ONLY, or
    # the section an analysis declares (memlens.analysis.registry)
    import importlib
    import pkgutil

    from memlens.views.report import build, sections

    names = {m.name for m in pkgutil.iter_modules(sections.__path__)} - {"common"}
    page = build.sections()
    assert [s.id for s in page] == [
        "overview", "diff", "devices", "timeline", "peak", "stages", "categories", "rules",
        "leaks", "oom", "anomalies", "allocator", "settings",
    ]  # fmt: skip
    assert {s.id for s in page} == names
    for name in names:
        module = importlib.import_module(f"memlens.views.report.sections.{name}")
        assert module.SECTION in page
