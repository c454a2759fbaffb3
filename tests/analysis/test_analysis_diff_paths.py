"""diff across machines: call sites match by their machine-independent key (function, path
inside its package or project, line), whatever the install and project prefixes."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from analysis_snapshots import training_snapshot

import memlens
from memlens.analysis.diff import diff
from memlens.analysis.matching import relative_source
from snapshot_builders import MiB, block, ev, segment


def _rewrite(obj: Any, old: str, new: str, seen: set[int] | None = None) -> Any:
    """Every frame's filename with the prefix `old` replaced by `new` (in place; frames
    shared between entries, as in PyTorch's pickles, are rewritten once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return obj
    seen.add(id(obj))
    if isinstance(obj, dict):
        f = obj.get("filename")
        if isinstance(f, str) and f.startswith(old):
            obj["filename"] = new + f[len(old) :]
        for v in obj.values():
            if isinstance(v, (dict, list)):
                _rewrite(v, old, new, seen)
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)):
                _rewrite(v, old, new, seen)
    return obj


def _moved(snap: dict[str, Any], *prefixes: tuple[str, str]) -> dict[str, Any]:
    out = copy.deepcopy(snap)
    for old, new in prefixes:
        _rewrite(out, old, new)
    return out


def _assert_no_change(a: dict[str, Any], b: dict[str, Any]) -> None:
    r = diff(memlens.load(a).device(0), memlens.load(b).device(0), top=None)
    assert r["sites"] and r["sites_total"] == len(r["sites"])
    assert {s["status"] for s in r["sites"]} == {"both"}
    assert [s["change"] for s in r["sites"]] == [0] * len(r["sites"])
    assert {f["name"] for f in r["figures"] if f["change"]} == set()


def test_relative_source():
    assert relative_source("/home/u/.venv/lib/python3.12/site-packages/einops/_backends.py") == (
        "einops/_backends.py"
    )
    assert relative_source("/opt/conda/envs/x/lib/python3.11/site-packages/torch/nn/f.py") == (
        "torch/nn/f.py"
    )
    assert relative_source("/usr/lib/python3/dist-packages/torch/optim/adam.py") == (
        "torch/optim/adam.py"
    )
    assert relative_source("/usr/lib/python3.11/threading.py") == "threading.py"
    assert relative_source("/home/lin/a/scripts/../sys/run.py", "/home/lin/a/") == "sys/run.py"
    assert relative_source("/home/lin/elsewhere/x.py", "/home/lin/a/") == "elsewhere/x.py"
    assert relative_source("C:\\Users\\bo\\proj\\m.py") == "proj/m.py"
    assert relative_source("<frozen runpy>") == "<frozen runpy>"


def test_hand_built_snapshot_under_two_prefixes_diffs_to_zero():
    snap = training_snapshot()
    a = _moved(snap, ("/home/u/", "/home/alice/work/proj/"))
    b = _moved(
        snap,
        ("/home/u/", "/scratch/ci/job-7/src/"),
        ("/usr/lib/python3.11/site-packages/", "/opt/conda/envs/t/lib/python3.12/site-packages/"),
    )
    _assert_no_change(a, b)
    r = diff(memlens.load(a).device(0), memlens.load(b).device(0), top=None)
    by_key = {s["key"]: s for s in r["sites"]}
    # the exact paths stay: A's filename, next to the normalized key
    assert by_key["forward (model.py:20)"]["filename"] == "/home/alice/work/proj/model.py"


def _site_snapshot(frames: list[dict[str, Any]], size: int = MiB) -> dict[str, Any]:
    """One live allocation of `size` per frame (each frame alone in its stack)."""
    base = 0x100000
    trace = [ev("alloc", base + i * size, size, i, frames=[f]) for i, f in enumerate(frames)]
    blocks = [block(base + i * size, size, size, "active_allocated") for i in range(len(frames))]
    return {"segments": [segment(base, blocks)], "device_traces": [trace]}


def _frame(path: str, line: int = 10, name: str = "forward") -> dict[str, Any]:
    return {"filename": path, "line": line, "name": name}


def test_same_basename_in_two_packages_is_not_merged():
    both = [_frame("/home/u/proj/a/model.py"), _frame("/home/u/proj/b/model.py")]
    moved = [_frame("/srv/x/a/model.py"), _frame("/srv/x/b/model.py")]
    r = diff(memlens.load(_site_snapshot(both)).device(0),
             memlens.load(_site_snapshot(moved)).device(0), top=None)  # fmt: skip
    assert sorted((s["key"], s["status"], s["change"]) for s in r["sites"]) == [
        ("forward (a/model.py:10)", "both", 0),
        ("forward (b/model.py:10)", "both", 0),
    ]
    # A allocates in a/model.py, B in b/model.py: two sites, not one
    a = _site_snapshot([_frame("/home/u/proj/a/model.py"), _frame("/home/u/proj/main.py", 1)])
    b = _site_snapshot([_frame("/srv/x/b/model.py"), _frame("/srv/x/main.py", 1)])
    r = diff(memlens.load(a).device(0), memlens.load(b).device(0), top=None)
    assert sorted((s["key"], s["status"], s["change"]) for s in r["sites"]) == [
        ("forward (a/model.py:10)", "only_a", -MiB),
        ("forward (b/model.py:10)", "only_b", MiB),
        ("forward (main.py:1)", "both", 0),
    ]


def test_project_roots_cut_at_different_depths_still_match():
    # the real run's checkout has the package one directory deeper than the copy the
    # simulation ran in: "cs336-basics/cs336_basics/optimizer.py" vs "cs336_basics/..."
    a = _site_snapshot([_frame("/home/lin/repo/cs336-basics/cs336_basics/optimizer.py", 76, "step"),
                        _frame("/home/lin/repo/cs336_systems/run.py", 5, "main")])  # fmt: skip
    b = _site_snapshot([_frame("/tmp/w/cs336_basics/optimizer.py", 76, "step"),
                        _frame("/tmp/w/cs336_systems/run.py", 5, "main")])  # fmt: skip
    r = diff(memlens.load(a).device(0), memlens.load(b).device(0), top=None)
    assert sorted((s["key"], s["status"]) for s in r["sites"]) == [
        ("main (cs336_systems/run.py:5)", "both"),
        ("step (cs336_basics/optimizer.py:76)", "both"),
    ]


def test_real_snapshot_under_two_prefixes_diffs_to_zero(shared_snapshots_dir):
    path = shared_snapshots_dir / "wedson_medium_128_training.pickle"
    if not path.exists():
        pytest.skip(f"{path.name} is absent")
    with open(path, "rb") as fh:
        raw = pickle.load(fh)  # the shared, trusted recording: plain dicts and lists
    home = "/home/lin/cs336/assignment2-systems/"
    venv = home + ".venv/lib/python3.12/site-packages/"
    b = _moved(raw, (venv, "/opt/conda/lib/python3.12/site-packages/"),
               (home, "/mnt/runs/cs336/"))  # fmt: skip
    _assert_no_change(raw, b)


def test_tui_compare_and_fleet_fingerprint_use_the_same_key():
    from memlens.fleet.record import stack_fingerprint
    from memlens.views.tui.trees import diff_tree, live_stack_tree

    snap = training_snapshot()
    a = memlens.load(_moved(snap, ("/home/u/", "/home/alice/proj/"))).device(0)
    b = memlens.load(_moved(snap, ("/home/u/", "/srv/ci/src/"))).device(0)
    ta = live_stack_tree(a, a.peak_event_index, hide_internals=False)
    tb = live_stack_tree(b, b.peak_event_index, hide_internals=False)
    tree = diff_tree(ta, tb, a.snapshot, b.snapshot)
    assert tree.children and all(n.value == 0 and n.before == n.after for n in tree.walk())
    assert stack_fingerprint(a) == stack_fingerprint(b)


def test_project_root_of_unrelated_directories_is_none():
    from memlens.analysis.matching import project_root

    snap = memlens.load(_site_snapshot([_frame("/home/u/proj/m.py"), _frame("/tmp/cell_1.py")]))
    assert project_root(snap) == ""
    moved = memlens.load(_site_snapshot([_frame("/home/u/proj/m.py")]))
    assert project_root(moved) == "/home/u/proj/"
