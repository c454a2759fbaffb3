"""The TUI's pure parts (chart, viewport, trees, outline, texts) on hand-built snapshots."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import tui_snapshots as hs
from rich.color import Color
from rich.style import Style
from rich.text import Text

import memlens
from memlens.analysis.stages import stage_table
from memlens.units import format_bytes
from memlens.views.tui import keys
from memlens.views.tui.base import wrap_lines
from memlens.views.tui.chart import Timeline, Viewport, column_at, render_chart
from memlens.views.tui.describe import (
    current_stage,
    cursor_line,
    describe_allocation,
    summary_figures,
    summary_parts,
    time_weighted_average,
    view_line,
    wrap_parts,
)
from memlens.views.tui.outline import Outline, heat_style, plain
from memlens.views.tui.trees import diff_tree, live_stack_tree, rows_under

MiB = hs.MiB
DOCS = Path(__file__).resolve().parents[2] / "docs" / "tui.md"


@pytest.fixture
def dev():
    return memlens.load(hs.small()).device()


def test_chart_draws_max_per_column_with_reserved_above(dev):
    tl = Timeline.of_device(dev)
    view = Viewport(dev.n_events, width=29)
    view.goto_event(3)
    assert plain(render_chart(tl, view, 40, 6)) == "\n".join(
        [
            " 20.00 MiB│░░░░░░░░░",
            "          │░░░▄▄░░░░",
            " 10.00 MiB│░░░██░░░░",
            "          │░░▄██▄▆▆▂",
            "       0 B│░████████",
            "          └ ◆ ▲   ◆",
        ]
    )


def test_bucket_maxima_never_hide_a_one_event_peak():
    dev = memlens.load(hs.long_trace(500)).device()
    tl = Timeline.of_device(dev)
    active, reserved = tl.columns(20)
    assert len(active) == 50
    # each column's height is the max of its 20 events (here the odd, still-allocated ones)
    expected = [int(dev.active_after[k * 20 : k * 20 + 20].max()) for k in range(50)]
    assert active.tolist() == expected
    # a window of columns: the same maxima (the chart asks only for the visible ones)
    part = tl.columns(20, 47, 10)
    assert part[0].tolist() == expected[47:] and part[1].tolist() == reserved[47:].tolist()
    assert tl.peak_in(0, tl.n_events - 1) == int(np.argmax(dev.active_after))
    assert tl.peak_in(100, 119) == 100 + int(np.argmax(dev.active_after[100:120]))
    spike = np.zeros(1000, dtype=np.int64)
    spike[537] = 10**9
    t2 = Timeline(spike, spike)
    assert t2.columns(100)[0][5] == 10**9


def test_viewport_zoom_pan_step_keep_the_cursor():
    tl = Timeline(np.arange(1000, dtype=np.int64), np.arange(1000, dtype=np.int64))
    v = Viewport(1000, width=50)
    assert (v.bucket, v.n_columns) == (20, 50)
    v.goto_column(10, tl)
    assert v.cursor == 219  # the highest event of column 10
    v.zoom(0.5)
    assert (v.bucket, v.cursor_column, v.cursor) == (10, 21, 219)
    assert v.cursor_column - v.start == 10  # same place on screen
    v.zoom(0.5)
    v.zoom(0.5)
    v.zoom(0.5)
    v.zoom(0.5)
    v.zoom(0.5)
    assert v.bucket == 1 and v.cursor == 219
    v.step(1, tl)
    assert v.cursor == 220
    v.pan(50, tl)
    assert v.cursor == 270 and v.start == v.cursor_column - 11
    v.zoom(1000)
    assert v.bucket == 20  # never wider than fits
    v.zoom_fit()
    assert v.start == 0
    v.goto_event(999)
    assert v.cursor_column == 49
    v.step(5, tl)
    assert v.cursor == 999  # clamped
    assert column_at(3, v) is None and column_at(11, v) == 0


def test_floor_moves_in_steps_and_never_reaches_the_top():
    v = Viewport(10, width=50)
    v.raise_floor(1000, 3)
    assert v.floor == 150
    v.raise_floor(1000, 100)
    assert v.floor == 950
    v.raise_floor(1000, -100)
    assert v.floor == 0


def test_tiny_area_says_so(dev):
    tl = Timeline.of_device(dev)
    assert plain(render_chart(tl, Viewport(9), 20, 2)) == "(too small: 20x2)"


def test_stage_markers_and_current_stage(dev):
    tl = Timeline.of_device(dev)
    # each marker at the first event after its time; events at t = 0, 1, ..., 8 ms; forward
    # 0..5.5 ms, optimizer 6..9 ms: as `memlens stages` counts them, forward holds events
    # 1..5 (event 0 is stamped with its START, so before it) and optimizer 7..8
    assert [(m.event, m.name, m.start) for m in tl.markers] == [
        (1, "forward", True),
        (6, "forward", False),
        (7, "optimizer", True),
        (9, "optimizer", False),
    ]
    assert [current_stage(tl, e) for e in range(9)] == [""] + ["forward"] * 5 + [
        "",
        "optimizer",
        "optimizer",
    ]
    rows = stage_table(dev, top=0)["stages"]
    assert [(r["name"], r["first_event"], r["last_event"]) for r in rows] == [
        ("forward", 1, 5),
        ("optimizer", 7, 8),
    ]


def test_cursor_line(dev):
    tl = Timeline.of_device(dev)
    v = Viewport(dev.n_events, width=50)
    v.goto_event(3)
    assert cursor_line(dev, tl, v) == (
        "event 3 alloc 8.00 MiB · t+0.003000 s · active 14.00 MiB · reserved 20.00 MiB"
        " · stage forward"
    )
    assert view_line(v) == "1 event/column · events 0–8 of 9 shown"
    long = Viewport(1000, width=10)
    long.zoom(0.25)  # 100 -> 25 events a column, cursor (event 0) still first
    long.raise_floor(2 * MiB, 1)
    assert view_line(long) == "25 events/column · events 0–249 of 1,000 shown · y floor 102.40 KiB"
    long.goto_event(999)
    assert (
        view_line(long) == "25 events/column · events 750–999 of 1,000 shown · y floor 102.40 KiB"
    )


def test_summary_wraps_between_parts_only(dev):
    parts = summary_parts("s.pickle", dev)
    line = " · ".join(parts)
    assert line == (
        "s.pickle · device 0 · 9 events over 0.008 s · peak 14.00 MiB at event 3"
        " · reserved peak 20.00 MiB · end 5.00 MiB · 4 allocations"
    )
    assert wrap_parts(parts, 80, 2) == [
        "s.pickle · device 0 · 9 events over 0.008 s · peak 14.00 MiB at event 3",
        "reserved peak 20.00 MiB · end 5.00 MiB · 4 allocations",
    ]
    assert wrap_parts(parts, 40, 2) == [
        "s.pickle · device 0",
        "9 events over 0.008 s · peak 14.00 MiB at event 3 · reserved peak 20.00 MiB"
        " · end 5.00 MiB · 4 allocations",
    ]  # the last line takes the rest (cut on screen)
    assert wrap_parts(parts, 40, 3) == [
        "s.pickle · device 0",
        "9 events over 0.008 s",
        "peak 14.00 MiB at event 3 · reserved peak 20.00 MiB · end 5.00 MiB · 4 allocations",
    ]
    assert wrap_parts(parts, 200, 2) == [line]
    assert wrap_parts(["a" * 50, "b"], 10, 3) == ["a" * 50, "b"]


def test_snapshot_summary_figures(dev, tmp_path):
    path = tmp_path / "small.pickle"
    path.write_bytes(pickle.dumps(hs.small()))
    snap = memlens.load(path, cache=False)
    lines = summary_figures(snap.device())
    size = path.stat().st_size
    # active after events 0..8: 0, 4, 6, 14, 14, 6, 7, 7, 5 MiB, one event a millisecond:
    # each value holds 1 ms, the last one none -> (4+6+14+14+6+7+7) / 8 = 7.25 MiB
    assert lines == [
        f"file           {format_bytes(size)} ({size:,} bytes), parsed from the pickle",
        "devices        0 (showing device 0)",
        "events         9 over 0.008000 s",
        "annotations    4",
        "",
        "active memory (bytes requested by live tensors)",
        "  initial      0 B (before the first event)",
        "  minimum      0 B",
        "  average      7.25 MiB (over time)",
        "  peak         14.00 MiB at event 3",
        "  final        5.00 MiB",
        "reserved memory (segments held from CUDA)",
        "  initial      0 B",
        "  peak         20.00 MiB",
        "  final        20.00 MiB",
        "",
        "allocations    4 (4 made in the trace, 0 before it)",
        "  live at end  2 (5.00 MiB)",
        "  smallest     1.00 MiB",
        "  largest      8.00 MiB",
        "  mean         3.75 MiB",
        "  median       3.00 MiB",
        "  cumulative   15.00 MiB allocated in the trace",
    ]
    assert time_weighted_average(dev) == (7.25 * MiB, "over time")
    untimed = hs.small()
    for ev in untimed["device_traces"][0]:
        del ev["time_us"]
    u = memlens.load(untimed).device()
    # no timestamps: the mean over the 9 events, 63 MiB / 9 = 7 MiB
    assert time_weighted_average(u) == (7 * MiB, "over events")


def test_live_tree_user_frames_and_all_frames(dev):
    o = Outline(live_stack_tree(dev, 3, hide_internals=True))
    o.expand_all()
    # the % (and the heat colour) is the row's share of the whole tree by default...
    assert plain(o.render(100, 20)) == "\n".join(
        [
            "▾   14.00 MiB 100.0% all  (3)",
            "  ▾   14.00 MiB 100.0% main (train.py:5)  (3)",
            "    ▾   12.00 MiB  85.7% forward (model.py:20)  (2)",
            "      ·   12.00 MiB  85.7% <inside hidden frames>  (2)",
            "    ·    2.00 MiB  14.3% step (optim.py:7)  (1)",
        ]
    )
    # ... or of its parent's bytes
    assert plain(o.render(100, 20, heat="parent")).splitlines()[3] == (
        "      ·   12.00 MiB 100.0% <inside hidden frames>  (2)"
    )
    o = Outline(live_stack_tree(dev, 3, hide_internals=False))
    o.expand_all()
    assert plain(o.render(100, 20)).splitlines()[3:5] == [
        "      ▾   12.00 MiB  85.7% linear (functional.py:2380)  (2)",
        "        ·   12.00 MiB  85.7% at::native::empty_cuda  (2)",
    ]


def test_outline_navigation_focus_and_search(dev):
    o = Outline(live_stack_tree(dev, 3, hide_internals=False), auto_expand=False)
    assert [n.label for n, _ in o.rows] == ["all", "main (train.py:5)"]  # the root is open
    o.expand()  # open already: go to the first child
    assert o.current.label == "main (train.py:5)"
    o.expand()
    assert [n.label for n, _ in o.rows][2:] == ["forward (model.py:20)", "step (optim.py:7)"]
    o.first_child()
    assert o.current.label == "forward (model.py:20)"
    o.sibling(1)
    assert o.current.label == "step (optim.py:7)"
    o.sibling(1)  # no next sibling: stays
    assert o.current.label == "step (optim.py:7)"
    o.sibling(-1)
    o.focus()
    assert o.root.label == "forward (model.py:20)" and o.cursor == 0
    assert len(o.rows) == 2  # forward and its (closed) child
    o.back()
    assert o.root.label == "all" and o.current.label == "forward (model.py:20)"
    o.collapse()
    o.collapse()  # closed already: to the parent
    assert o.current.label == "main (train.py:5)"
    o.search("EMPTY")
    assert o.current.label == "at::native::empty_cuda" and o.match_position() == (1, 1)
    o.search("o")  # main? no: forward, optim, functional... in tree order
    found = [m.label for m in o.matches]
    assert found == ["forward (model.py:20)", "linear (functional.py:2380)", "step (optim.py:7)"]
    o.next_match(1)
    o.next_match(1)
    assert o.current.label == "step (optim.py:7)"
    o.next_match(1)  # wraps
    assert o.current.label == "forward (model.py:20)"
    o.next_match(-1)
    assert o.current.label == "step (optim.py:7)"
    o.clear_search()
    assert o.matches == []


def test_collapse_all_and_expand_all(dev):
    o = Outline(live_stack_tree(dev, 3, hide_internals=False))
    o.expand_all()
    assert len(o.rows) == 6
    o.collapse_all()
    assert len(o.rows) == 2  # the root stays open at the top
    o.home()
    o.move(1)
    o.toggle()
    assert len(o.rows) == 4


def test_rows_under_a_node(dev):
    live = dev.live_at(3)
    for hide in (True, False):
        o = Outline(live_stack_tree(dev, 3, hide_internals=hide))
        o.expand_all()
        assert o.rows  # the loop below must check something
        for node, _ in o.rows:
            rows = rows_under(dev, live, node.path(), hide_internals=hide)
            assert int(dev.alloc_size[rows].sum()) == node.value, node.label
            assert len(rows) == node.count


def test_diff_tree_matches_by_call_path():
    a = memlens.load(hs.small()).device()
    b = memlens.load(hs.small(scale=2, extra_fwd=3 * MiB, fwd_line=23)).device()
    d = diff_tree(
        live_stack_tree(a, a.peak_event_index, hide_internals=True),
        live_stack_tree(b, b.peak_event_index, hide_internals=True),
    )
    assert (d.before, d.after, d.value) == (14 * MiB, 25 * MiB, 11 * MiB)
    o = Outline(d, diff=True)
    o.expand_all()
    assert plain(o.render(120, 10)) == "\n".join(
        [
            "▾   +11.00 MiB   14.00 MiB →  25.00 MiB  all",
            "  ▾   +11.00 MiB   14.00 MiB →  25.00 MiB  main (train.py)",
            "    ▾   +11.00 MiB   12.00 MiB →  23.00 MiB  forward (model.py)",
            "      ·   +11.00 MiB   12.00 MiB →  23.00 MiB  <inside hidden frames>",
            "    ·          0 B    2.00 MiB →   2.00 MiB  step (optim.py)",
        ]
    )


def test_describe_allocation(dev):
    row = int(dev.alloc_row[3])
    lines = describe_allocation(dev, row)
    assert lines[0] == f"allocation #{row}: 8.00 MiB (8,388,608 bytes requested)"
    assert lines[2:6] == [
        "allocated event 3 (t+0.003000 s)",
        "free req. event 4 (t+0.004000 s)",
        "freed     event 5 (t+0.005000 s)",
        "lifetime  2 events, 0.002000 s",
    ]
    assert lines[-4:] == [
        "  [C++] at::native::empty_cuda",
        "  linear  /usr/lib/python3.11/site-packages/torch/nn/functional.py:2380",
        "  forward  /home/u/model.py:20",
        "  main  /home/u/train.py:5",
    ]
    alive = describe_allocation(dev, int(dev.alloc_row[1]))
    assert "freed     never: alive at the end of the trace" in alive
    assert "lifetime  7 events, 0.007000 s (at least)" in alive


def test_every_key_is_documented():
    text = DOCS.read_text()
    for _, table in keys.SECTIONS:
        for k in table:
            assert re.search(rf"\|\s*`?{re.escape(k.shown)}`?\s*\|", text), k.shown
            assert k.help in text, k.help
    help_text = "\n".join(keys.help_lines())
    assert all(k.help in help_text for _, t in keys.SECTIONS for k in t)


def test_key_lookup_by_name_and_character():
    assert keys.lookup(keys.TIMELINE, "plus", "+") == "zoom_in"
    assert keys.lookup(keys.TIMELINE, "left", None) == "step(-1)"
    assert keys.lookup(keys.TREE, "N", "N") == "match(-1)"
    assert keys.lookup(keys.TREE, "x", "x") is None


def test_diff_matches_a_function_whose_line_moved():
    from memlens.views.tui.trees import Node, diff_key

    assert diff_key("forward (model.py:20)") == "forward (model.py)"
    assert diff_key("at::native::empty_cuda") == "at::native::empty_cuda"

    def tree(children: list[tuple[str, int]]) -> Node:
        root = Node("all", sum(v for _, v in children))
        root.children = [Node(lab, v, 1, parent=root) for lab, v in children]
        return root

    d = diff_tree(tree([("f (a.py:1)", 10), ("g (a.py:5)", 4)]), tree([("f (a.py:3)", 12)]))
    assert [(c.label, c.before, c.after, c.value) for c in d.children] == [
        ("g (a.py)", 4, 0, -4),
        ("f (a.py)", 10, 12, 2),
    ]
    # two lines of one function in the same snapshot are one row of the diff
    d = diff_tree(tree([("f (a.py:1)", 10), ("f (a.py:2)", 5)]), tree([("f (a.py:1)", 15)]))
    assert [(c.label, c.before, c.after) for c in d.children] == [("f (a.py)", 15, 15)]


def _colours(lines: list[Text]) -> set[Color]:
    """Every colour used in these rows (foreground and background)."""
    out = set()
    for line in lines:
        for span in [*line.spans, type("S", (), {"style": line.style})()]:
            style = span.style
            if isinstance(style, Style):
                out |= {c for c in (style.color, style.bgcolor) if c is not None}
    return out


def test_no_colour_chart_marks_the_cursor_by_glyph():
    tl = Timeline(np.array([8, 16, 4, 8]), np.array([8, 16, 16, 8]))
    view = Viewport(4, width=19)
    view.goto_event(2)
    mono = render_chart(tl, view, 30, 3, mono=True)
    # 2 rows of 8 eighths for 16 bytes: one eighth a byte; the cursor's column shows ┊
    # where it is empty, and reserved ░ above active as always
    assert plain(mono) == "\n".join(["      16 B│ █░", "       0 B│██▄█", "          └  ▲"])
    assert _colours(mono) == set()
    view.goto_event(3)
    assert plain(render_chart(tl, view, 30, 3, mono=True)).splitlines()[0] == "      16 B│ █░┊"
    coloured = render_chart(tl, view, 30, 3)
    assert plain(coloured).splitlines()[0] == "      16 B│ █░"  # the colour marks it instead
    # RGB colours: Textual passes them through, where it remaps the 16 ANSI ones
    assert _colours(coloured) and all(c.triplet is not None for c in _colours(coloured))


def test_heat_colours_differ_and_no_colour_uses_weight():
    shares = (0.01, 0.1, 0.3, 0.5, 0.9)
    colours = [heat_style(x).color for x in shares]
    assert colours[0] is None and len(set(colours[1:])) == 4
    assert all(c is not None and c.triplet is not None for c in colours[1:])
    mono = [heat_style(x, mono=True) for x in shares]
    assert [m.color for m in mono] == [None] * 5
    assert [bool(m.dim) for m in mono] == [True, False, False, False, False]
    assert [bool(m.bold) for m in mono] == [False, False, False, True, True]


def test_outline_without_colour(dev):
    o = Outline(live_stack_tree(dev, 3, hide_internals=True))
    assert _colours(o.render(100, 20)) != set()
    assert _colours(o.render(100, 20, mono=True)) == set()
    d = Outline(diff_tree(o.tree_root, live_stack_tree(dev, 6, hide_internals=True)), diff=True)
    assert _colours(d.render(100, 20, mono=True)) == set()
    assert (
        plain(d.render(100, 20)).splitlines()[0] == "▾    -7.00 MiB   14.00 MiB →   7.00 MiB  all"
    )
    assert plain(d.render(60, 20)).splitlines()[0] == "▾    -7.00 MiB  all"


def test_long_text_lines_go_on_over_the_next_lines():
    lines = ["short", "x" * 25, ""]
    assert wrap_lines(lines, 10) == ["short", "x" * 10, "    xxxxxx", "    xxxxxx", "    xxx", ""]
    assert wrap_lines(lines, 4) == lines  # no room for an indent: left to the ellipsis
    # between words where the next one fits
    assert wrap_lines(["  f  /a/b.py:1 and more"], 13) == ["  f", "    /a/b.py:1", "    and more"]


def test_summary_figures_name_the_pools_at_the_peak_when_one_is_private():
    from snapshot_builders import pool_snapshot

    # A (1000 bytes, the CUDA graph's pool (1, 0)) is all that is live at the peak
    lines = summary_figures(memlens.load(pool_snapshot()).device(0))
    assert [x for x in lines if x.startswith("pools")] == ["pools at peak  (1, 0) 1000 B"]
    # the default pool alone: no line, as in `memlens summary`
    lines = summary_figures(memlens.load(hs.small()).device(0))
    assert not [x for x in lines if x.startswith("pools")]
