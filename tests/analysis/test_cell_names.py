"""Notebook cells named as cells in every label (analysis.cells), from the running kernel's
map of cell files to In numbers, or by their hash without one."""

from __future__ import annotations

import sys
import types

import memlens
from memlens.analysis.cells import cell_name
from memlens.analysis.sites import top_sites
from memlens.analysis.tree import build_stack_tree
from snapshot_builders import block, ev, segment

CELL_FILE = "/tmp/ipykernel_4679/843182234.py"


def test_cell_names_from_the_map_the_hash_or_old_ipython():
    assert cell_name(CELL_FILE, {CELL_FILE: 3}) == "cell In [3]"
    assert cell_name(CELL_FILE, {}) == "notebook cell 843182234"
    assert cell_name("<ipython-input-7-0a1b2c3d4e5f>", {}) == "cell In [7]"
    assert cell_name("/home/u/model.py", {CELL_FILE: 3}) is None


def test_sites_and_trees_read_the_running_kernels_map(monkeypatch):
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(_filename_map={CELL_FILE: 3}))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    frames = [{"filename": CELL_FILE, "line": 6, "name": "<module>"}]
    S = 0x100000
    raw = {
        "segments": [segment(S, [block(S, 2 << 20, 512, "active_allocated", frames)])],
        "device_traces": [[ev("alloc", S, 512, 1, frames=frames)]],
    }
    dev = memlens.load(raw).device(0)
    rows = dev.live_at(0)
    assert [s["site"] for s in top_sites(dev, rows)] == ["<module> (cell In [3], line 6)"]
    tree = build_stack_tree(dev.snapshot, dev.alloc_stack[rows], dev.alloc_size[rows])
    assert [c.label for c in tree.sorted_children()] == ["<module> (cell In [3], line 6)"]
