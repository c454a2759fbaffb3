"""The app driven by Textual's pilot on hand-built snapshots: exact checks of what is shown."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import tui_snapshots as hs
from rich.color import Color
from tui_pilot import chart, press, run, shown, wheel

import memlens
from memlens.views.tui import keys
from memlens.views.tui.app import (
    AllocationListScreen,
    AllocationScreen,
    DiffScreen,
    HelpScreen,
    LiveTreeScreen,
    SummaryScreen,
    TimelineScreen,
)

MiB = hs.MiB
SMALL = (50, 10)


@pytest.fixture
def dev():
    return memlens.load(hs.small()).device()


def status(app) -> str:
    return shown(app, "#status0")


def view(app) -> str:
    return shown(app, "#view")


def test_start_summary_chart_cursor_on_peak(dev):
    async def script(app, pilot):
        assert shown(app, "#summary0") == (
            "snap0 · device 0 · 9 events over 0.008 s · peak 14.00 MiB at event 3 · reserved peak 20.00 MiB"
            " · end 5.00 MiB · 4 allocations"
        )
        # 5 rows of 8 eighths for 20 MiB: 2 eighths a MiB; active after each event is
        # 0, 4, 6, 14, 14, 6, 7, 7, 5 MiB, reserved 20 MiB throughout
        assert chart(app) == "\n".join(
            [
                " 20.00 MiB│░░░░░░░░░",
                "          │░░░▄▄░░░░",
                " 10.00 MiB│░░░██░░░░",
                "          │░░▄██▄▆▆▂",
                "       0 B│░████████",
                "          └ ◆ ▲   ◆",
            ]
        )
        assert status(app) == (
            "event 3 alloc 8.00 MiB · t+0.003000 s · active 14.00 MiB · reserved 20.00 MiB"
            " · stage forward"
        )
        assert view(app) == "1 event/column · events 0–8 of 9 shown"

    run([dev], script, size=SMALL)


def test_timeline_moves_markers_floor(dev):
    async def script(app, pilot):
        await press(pilot, "right")
        assert status(app).startswith("event 4 free_requested 8.00 MiB")
        await press(pilot, "left", "left")
        assert status(app).startswith("event 2 alloc 2.00 MiB")
        await press(pilot, "end")
        # the optimizer's END (t=9 ms) comes after event 8 (t=8 ms): still inside it
        assert status(app).startswith("event 8 free_completed")
        assert status(app).endswith("stage optimizer")
        await press(pilot, "home")
        assert status(app).startswith("event 0 segment_alloc 20.00 MiB") and "stage" not in status(
            app
        )
        await press(pilot, "m")  # forward STARTs at t=0, with event 0: its first event is 1
        assert status(app).endswith("stage forward") and "event 1 " in status(app)
        await press(pilot, "m")
        assert status(app).endswith("stage optimizer") and "event 7 " in status(app)
        await press(pilot, "m")  # no marker after: stays
        assert "event 7 " in status(app)
        await press(pilot, "M")
        assert "event 1 " in status(app)
        await press(pilot, "p")
        assert "event 3 " in status(app)
        await press(pilot, "up", "up")
        assert view(app).endswith(" · y floor 2.00 MiB")
        # floor 2 MiB, 5 rows: 40 eighths for 18 MiB; 4 MiB -> ceil(4.44) = ▅, 5 MiB -> ▇
        assert chart(app).splitlines()[-2] == "  2.00 MiB│░▅██████▇"
        await press(pilot, "down")
        assert view(app).endswith(" · y floor 1.00 MiB")
        await press(pilot, "r")
        assert "floor" not in view(app)
        await press(pilot, "shift+right")
        assert "event 8 " in status(app)
        await press(pilot, "R")  # reserved peak: the segment at event 0
        assert "event 0 " in status(app)

    run([dev], script, size=SMALL)


def test_zoom_and_pan_on_a_long_trace():
    dev = memlens.load(hs.long_trace(500)).device()  # 999 events

    async def script(app, pilot):
        # 120 - 11 = 109 chart columns: 10 events a column; cursor on the peak (last event)
        assert status(app).startswith("event 998 alloc 500.00 KiB")
        assert view(app) == "10 events/column · events 0–998 of 999 shown"
        await press(pilot, "minus")
        assert view(app).startswith("10 events/column")  # already fits: zoom out stops
        await press(pilot, "plus")
        assert view(
            app
        ) == "5 events/column · events 455–998 of 999 shown" and "event 998 " in status(app)
        await press(pilot, "left")
        assert "event 994 " in status(app)  # the highest event of the column before
        await press(pilot, "plus", "plus", "plus")
        assert view(app) == "1 event/column · events 887–995 of 999 shown"
        await press(pilot, "pageup")
        assert "event 885 " in status(app)
        assert view(app) == "1 event/column · events 778–886 of 999 shown"
        axis, labels = chart(app).splitlines()[-2:]
        assert axis.index("▲") == 11 + 107  # the cursor keeps its place on screen
        # the x axis's event numbers: every 10th column from a multiple of 10
        assert (
            labels == "     event " + "".join(f"  {e}     " for e in range(780, 890, 10)).rstrip()
        )
        await press(pilot, "0")
        assert view(app).startswith("10 events/column · events 0–998 ")

    run([dev], script)


def test_mouse_click_and_wheel(dev):
    async def script(app, pilot):
        await pilot.click("#chart0", offset=(12, 2))
        await pilot.pause()
        assert status(app).startswith("event 1 alloc 4.00 MiB")
        await pilot.click("#chart0", offset=(3, 2))  # on the axis: nothing
        await pilot.pause()
        assert status(app).startswith("event 1 ")
        await wheel(pilot, "#chart0", 2)  # the wheel steps the cursor
        assert status(app).startswith("event 3 alloc 8.00 MiB")
        await wheel(pilot, "#chart0", -3)
        assert status(app).startswith("event 0 segment_alloc")
        await press(pilot, "p", "enter")
        tree = shown(app, "#tree").splitlines()
        assert tree[2] == "    ▸   12.00 MiB  85.7% forward (model.py:20)  (2)"
        await pilot.click("#tree", offset=(30, 2))  # selects the row
        await pilot.pause()
        assert shown(app, "#status").startswith("row 3/4 · 12.00 MiB")
        await pilot.click("#tree", offset=(30, 2))  # a click on the selected row opens it
        await pilot.pause()
        assert shown(app, "#tree").splitlines()[2].startswith("    ▾   12.00 MiB")
        assert len(shown(app, "#tree").splitlines()) == 5
        await pilot.click("#tree", offset=(30, 2))  # and closes it
        await pilot.pause()
        assert len(shown(app, "#tree").splitlines()) == 4
        await pilot.click("#tree", offset=(30, 8))  # below the last row: nothing
        await pilot.pause()
        assert shown(app, "#status").startswith("row 3/4 ")
        await wheel(pilot, "#tree", 1)  # three rows down, at most to the last
        assert shown(app, "#status").startswith("row 4/4 ")
        await wheel(pilot, "#tree", -1)
        assert shown(app, "#status").startswith("row 1/4 ")

    run([dev], script, size=(60, 12))


def test_detail_tree_navigation_focus_and_hide(dev):
    async def script(app, pilot):
        await press(pilot, "enter")
        assert isinstance(app.screen, LiveTreeScreen)
        assert shown(app, "#title") == (
            "live after event 3 (t+0.003000 s): 14.00 MiB in 3 allocations · "
            "user frames (h: all frames)"
        )
        assert shown(app, "#tree") == "\n".join(
            [
                "▾   14.00 MiB 100.0% all  (3)",
                "  ▾   14.00 MiB 100.0% main (train.py:5)  (3)",
                "    ▸   12.00 MiB  85.7% forward (model.py:20)  (2)",
                "    ·    2.00 MiB  14.3% step (optim.py:7)  (1)",
            ]
        )
        assert shown(app, "#status") == "row 1/4 · 14.00 MiB · 100.0% of 14.00 MiB"
        await press(pilot, "down", "down", "right")
        assert (
            shown(app, "#tree").splitlines()[2]
            == "    ▾   12.00 MiB  85.7% forward (model.py:20)  (2)"
        )
        await press(pilot, "right")
        assert shown(app, "#status").startswith("row 4/5 · 12.00 MiB · 85.7%")
        await press(pilot, "p", "right_square_bracket")
        assert shown(app, "#status").startswith("row 5/5 · 2.00 MiB")
        await press(pilot, "left_square_bracket", "f")
        # heat and % by share of the whole tree (the default), focused or not
        assert shown(app, "#tree") == "\n".join(
            [
                "▾   12.00 MiB  85.7% forward (model.py:20)  (2)",
                "  ·   12.00 MiB  85.7% <inside hidden frames>  (2)",
            ]
        )
        assert shown(app, "#status") == (
            "row 1/2 · 12.00 MiB · 85.7% of 14.00 MiB · 100.0% of 12.00 MiB"
            " · focused on forward (model.py:20) (1 deep, b back)"
        )
        await press(pilot, "b")
        assert shown(app, "#tree").splitlines()[0] == "▾   14.00 MiB 100.0% all  (3)"
        await press(pilot, "h")
        assert shown(app, "#title").endswith("all frames (h: user frames only)")
        assert app.screen.outline.current.label == "forward (model.py:20)"  # stays put
        await press(pilot, "right", "right")
        assert app.screen.outline.current.label == "linear (functional.py:2380)"
        await press(pilot, "h", "h")  # linear is hidden in between: back on its parent
        assert app.screen.outline.current.label == "forward (model.py:20)"
        await press(pilot, "home", "e")
        assert shown(app, "#tree").splitlines()[3:5] == [
            "      ▾   12.00 MiB  85.7% linear (functional.py:2380)  (2)",
            "        ·   12.00 MiB  85.7% at::native::empty_cuda  (2)",
        ]
        await press(pilot, "c")
        assert len(shown(app, "#tree").splitlines()) == 2
        await press(pilot, "q")
        assert isinstance(app.screen, TimelineScreen)

    run([dev], script)


def test_incremental_search(dev):
    async def script(app, pilot):
        await press(pilot, "enter", "h", "slash", "l", "i")
        assert shown(app, "#status") == "/li▏   match 1/1   (n/N next/previous, Esc clears)"
        assert "linear (functional.py:2380)" in shown(app, "#tree")  # opened to show it
        await press(pilot, "backspace")  # "l": all, forward (model.py), linear
        assert shown(app, "#status").startswith("/l▏   match 1/3")
        await press(pilot, "enter")
        assert shown(app, "#status").startswith("/l   match 1/3")
        await press(pilot, "n", "n")
        assert shown(app, "#status").startswith("/l   match 3/3")
        await press(pilot, "n")  # wraps
        assert shown(app, "#status").startswith("/l   match 1/3")
        await press(pilot, "N")
        assert shown(app, "#status").startswith("/l   match 3/3")
        await press(pilot, "slash", "z", "z")
        assert shown(app, "#status").startswith("/zz▏   no match")
        await press(pilot, "escape")
        assert shown(app, "#status").startswith("row ")
        await press(pilot, "slash", "m", "a", "enter", "escape")  # Esc after a search clears it
        assert isinstance(app.screen, LiveTreeScreen) and shown(app, "#status").startswith("row")
        await press(pilot, "escape")
        assert isinstance(app.screen, TimelineScreen)

    run([dev], script)


def test_allocation_list_and_allocation_view(dev):
    async def script(app, pilot):
        await press(pilot, "enter", "down", "down", "a")
        assert isinstance(app.screen, AllocationListScreen)
        rows = shown(app, "#tree").splitlines()
        assert rows[0] == "▾   12.00 MiB 100.0% 2 allocations  (2)"
        assert rows[1] == "  ·    8.00 MiB  66.7% #2 forward (model.py:20) · event 3"
        assert rows[2] == "  ·    4.00 MiB  33.3% #0 forward (model.py:20) · event 1"
        assert shown(app, "#status").startswith("row 2/3 · 8.00 MiB")  # on the largest
        await press(pilot, "enter")
        assert isinstance(app.screen, AllocationScreen)
        text = shown(app, "#text").splitlines()
        assert text[0] == "allocation #2: 8.00 MiB (8,388,608 bytes requested)"
        assert "freed     event 5 (t+0.005000 s)" in text
        assert text[-1] == "  main  /home/u/train.py:5"
        await pilot.resize_terminal(40, 40)
        await pilot.pause()
        # a frame longer than the screen goes on over the next line rather than being cut
        assert shown(app, "#text").splitlines()[-4:-2] == [
            "  linear  /usr/lib/python3.11/site-packa",
            "    ges/torch/nn/functional.py:2380",
        ]
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        await press(pilot, "q", "q", "q")
        assert isinstance(app.screen, TimelineScreen)
        await press(pilot, "a")  # the allocation of the event under the cursor (3: alloc C)
        assert shown(app, "#text").splitlines()[0].startswith("allocation #2: 8.00 MiB")
        await press(pilot, "escape", "home", "a")  # event 0 is a segment_alloc: no allocation
        assert isinstance(app.screen, TimelineScreen)

    run([dev], script)


def test_compare_shared_cursor_and_diff_tree(dev):
    other = memlens.load(hs.small(scale=2, extra_fwd=3 * MiB, fwd_line=23)).device()

    async def script(app, pilot):
        assert shown(app, "#summary0").startswith(
            "A: snap0 · device 0 · 9 events over 0.008 s · peak 14.00"
        )
        assert shown(app, "#summary1").startswith(
            "B: snap1 · device 0 · 10 events over 0.008 s · peak 25.00"
        )
        assert shown(app, "#status0").startswith("event 3 alloc 8.00 MiB")
        assert shown(app, "#status1").startswith("event 3 alloc 16.00 MiB")
        # one y scale for both: B's 25 MiB top
        assert chart(app, 0).splitlines()[0].startswith(" 25.00 MiB│")
        assert chart(app, 1).splitlines()[0].startswith(" 25.00 MiB│")
        # and the same height: the same y-axis labels (40 lines: 2 x (2 summary + 1 status)
        # + view + hint leave 32, 14 rows of bars, the axis row and the event labels each)
        axes = [[line[:11] for line in chart(app, k).splitlines()] for k in (0, 1)]
        assert axes[0] == axes[1] and len(axes[0]) == 16
        assert [a for a in axes[0] if a.strip() not in ("│", "└")] == [
            " 25.00 MiB│",
            " 11.61 MiB│",
            "       0 B│",
            "     event ",
        ]
        await press(pilot, "right")
        assert shown(app, "#status0").startswith("event 4 ")
        assert shown(app, "#status1").startswith("event 4 alloc 3.00 MiB")
        await press(pilot, "enter")
        assert isinstance(app.screen, DiffScreen)
        assert shown(app, "#title") == (
            "diff B - A at A event 4 vs B event 4: +11.00 MiB (14.00 MiB → 25.00 MiB) · "
            "user frames (h: all frames)"
        )
        assert shown(app, "#tree").splitlines()[:4] == [
            "▾   +11.00 MiB   14.00 MiB →  25.00 MiB  all",
            "  ▾   +11.00 MiB   14.00 MiB →  25.00 MiB  main (train.py)",
            "    ▸   +11.00 MiB   12.00 MiB →  23.00 MiB  forward (model.py)",
            "    ·          0 B    2.00 MiB →   2.00 MiB  step (optim.py)",
        ]
        assert (
            shown(app, "#status") == "row 1/4 · +11.00 MiB (14.00 MiB → 25.00 MiB, +1 allocations)"
        )
        await press(pilot, "down", "down", "down")
        assert shown(app, "#status") == "row 4/4 · 0 B (2.00 MiB → 2.00 MiB)"
        await press(pilot, "q", "end", "d")
        assert shown(app, "#title").startswith(
            "diff B - A at the peaks (A event 3, B event 4): +11.00 MiB"
        )
        await press(pilot, "q", "end", "enter")  # A has 9 events: its last one is used
        assert shown(app, "#title").startswith(
            "diff B - A at A event 8 vs B event 9: +3.00 MiB (5.00 MiB → 8.00 MiB)"
        )

    run([dev, other], script)


def test_compare_peaks_summary_and_a_narrow_diff(dev):
    other = memlens.load(hs.small(scale=2, extra_fwd=3 * MiB, fwd_line=23)).device()

    async def script(app, pilot):
        await press(pilot, "home", "p")  # A's peak (event 3)
        assert shown(app, "#status0").startswith("event 3 alloc 8.00 MiB")
        await press(pilot, "p")  # already there: B's peak (event 4, its extra 3 MiB)
        assert shown(app, "#status1").startswith("event 4 alloc 3.00 MiB")
        await press(pilot, "p")
        assert shown(app, "#status0").startswith("event 3 ")
        await press(pilot, "R")  # both reserved peaks are the segment at event 0
        assert shown(app, "#status0").startswith("event 0 segment_alloc")
        await press(pilot, "s")
        text = app.screen.text_lines  # all of it, not only what fits on screen
        assert text[0] == "summary of A: snap0"
        assert "summary of B: snap1" in text
        assert "  peak         25.00 MiB at event 4" in text
        await press(pilot, "q", "d")
        # 50 columns: only the change, not both sizes
        assert shown(app, "#tree").splitlines()[:2] == [
            "▾   +11.00 MiB  all",
            "  ▾   +11.00 MiB  main (train.py)",
        ]

    run([dev, other], script, size=(50, 16))


def test_compare_allocations_under_a_diff_row(dev):
    other = memlens.load(hs.small(scale=2, extra_fwd=3 * MiB, fwd_line=23)).device()

    async def script(app, pilot):
        # event 4 of both: A holds its 4, 2 and 8 MiB; B its 4, 2, 16 and the extra 3 MiB
        await press(pilot, "right", "enter", "down", "down", "a")
        assert isinstance(app.screen, AllocationListScreen)
        assert shown(app, "#title") == (
            "allocations under forward (model.py) (largest first; Enter: details)"
        )
        # forward moved from line 20 (A) to 23 (B): one row of the diff, both lists
        assert shown(app, "#tree").splitlines() == [
            "▾   35.00 MiB 100.0% allocations of both snapshots  (5)",
            "  ▾   23.00 MiB  65.7% B: 3 allocations  (3)",
            "    ·   16.00 MiB  45.7% #2 forward (model.py:23) · event 3",
            "    ·    4.00 MiB  11.4% #0 forward (model.py:23) · event 1",
            "    ·    3.00 MiB   8.6% #3 forward (model.py:23) · event 4",
            "  ▾   12.00 MiB  34.3% A: 2 allocations  (2)",
            "    ·    8.00 MiB  22.9% #2 forward (model.py:20) · event 3",
            "    ·    4.00 MiB  11.4% #0 forward (model.py:20) · event 1",
        ]
        assert shown(app, "#status").startswith("row 3/8 · 16.00 MiB")
        await press(pilot, "enter")  # B's allocation #2, not A's
        assert shown(app, "#text").splitlines()[0] == (
            "allocation #2: 16.00 MiB (16,777,216 bytes requested)"
        )
        await press(pilot, "q", "end", "enter")
        assert shown(app, "#text").splitlines()[0] == (
            "allocation #0: 4.00 MiB (4,194,304 bytes requested)"
        )
        assert "  forward  /home/u/model.py:20" in shown(app, "#text").splitlines()  # A's
        await press(pilot, "q", "q", "home", "a")  # the root: everything live in both
        assert [r for r in shown(app, "#tree").splitlines() if ": " in r] == [
            "  ▾   25.00 MiB  64.1% B: 4 allocations  (4)",
            "  ▾   14.00 MiB  35.9% A: 3 allocations  (3)",
        ]

    run([dev, other], script)


def test_compare_in_a_tiny_terminal_draws_both_charts(dev):
    async def script(app, pilot):
        # 10 lines: two summaries, two status lines, view and hint leave 2 + 2 for the charts:
        # one row of 8 eighths for 20 MiB, active 0, 4, 6, 14, 14, 6, 7, 7, 5 MiB
        for k in (0, 1):
            assert chart(app, k).splitlines() == [" 20.00 MiB│░▂▃▆▆▃▃▃▂", "          └ ◆ ▲   ◆"]

    run([dev, dev], script, size=(40, 10))


def test_summary_screen(dev):
    async def script(app, pilot):
        await press(pilot, "s")
        assert isinstance(app.screen, SummaryScreen)
        text = shown(app, "#text").splitlines()
        assert text[:4] == [
            "summary of snap0",
            "",
            "devices        0 (showing device 0)",
            "events         9 over 0.008000 s",
        ]
        await press(pilot, "end")
        assert shown(app, "#text").splitlines()[-1] == (
            "  cumulative   15.00 MiB allocated in the trace"
        )
        await press(pilot, "home")
        assert shown(app, "#text").splitlines()[0] == "summary of snap0"
        await press(pilot, "q")
        assert isinstance(app.screen, TimelineScreen)

    run([dev], script, size=(60, 12))


def test_help_lists_every_key(dev):
    async def script(app, pilot):
        await press(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = shown(app, "#text")
        assert (
            text.splitlines()[0]
            == "memlens tui: keys (arrows, PgUp/PgDn scroll; any other key closes this help)"
        )
        await press(pilot, "pagedown", "pagedown", "pagedown")
        later = shown(app, "#text")
        everything = text + "\n" + later
        for _, table in keys.SECTIONS:
            for k in table:
                assert k.help in "\n".join(keys.help_lines())
        assert "Mouse: click a column" in everything
        await press(pilot, "x")
        assert isinstance(app.screen, TimelineScreen)
        await press(pilot, "enter", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await press(pilot, "space")
        assert isinstance(app.screen, LiveTreeScreen)

    run([dev], script, size=(100, 30))


def test_tiny_terminal_still_works(dev):
    async def script(app, pilot):
        assert chart(app).startswith("(too small: ")
        await press(pilot, "right", "plus", "enter", "e", "q", "minus")
        assert isinstance(app.screen, TimelineScreen)
        assert status(app).startswith("event 4 ")

    run([dev], script, size=(24, 6))


def test_no_color(dev, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = None

    def colours(selector: str) -> set[Color]:
        assert app is not None
        w = app.screen.query_one(selector)
        rows = w.provider(*w.size)
        return {
            c
            for row in rows
            for span in row.spans
            if not isinstance(span.style, str)
            for c in (span.style.color, span.style.bgcolor)
            if c is not None
        }

    async def script(app_, pilot):
        nonlocal app
        app = app_
        assert app.no_color
        assert chart(app).splitlines()[-1] == "          └ ◆ ▲   ◆"
        assert colours("#chart0") == set()
        await press(pilot, "enter")
        assert "85.7% forward (model.py:20)" in shown(app, "#tree")
        assert colours("#tree") == set()

    run([dev], script, size=SMALL)


def test_cli_errors_are_one_line(tmp_path):
    missing = tmp_path / "nope.pickle"
    p = subprocess.run(
        [sys.executable, "-m", "memlens", "tui", str(missing)], capture_output=True, text=True
    )
    assert p.returncode == 2
    assert p.stderr.strip() == f"memlens: error: no such snapshot file: {missing}"
    empty = tmp_path / "empty.pickle"
    empty.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    p = subprocess.run(
        [sys.executable, "-m", "memlens", "tui", str(empty), "--no-cache"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "has no trace events" in p.stderr
    good = tmp_path / "small.pickle"
    good.write_bytes(pickle.dumps(hs.small()))
    p = subprocess.run(
        [sys.executable, "-m", "memlens", "tui", str(good), "--device", "3"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert p.stderr.strip() == "memlens: error: device 3 is not in this snapshot (devices: 0)"


def test_oom_entries_are_marked_and_o_jumps_to_them():
    """hs.small() plus an `oom` entry (event 9): a 64 MiB request with 1 MiB free."""
    raw = hs.small()
    raw["device_traces"][0].append(
        {
            "action": "oom",
            "device_free": MiB,
            "size": 64 * MiB,
            "stream": 0,
            "time_us": 1_009_000,
            "frames": [hs.MAIN],
        }  # fmt: skip
    )
    oom_dev = memlens.load(raw, cache=False).device()

    async def script(app, pilot):
        assert chart(app).splitlines()[-1] == "          └ ◆ ▲   ◆ ✕"
        await press(pilot, "o")
        assert status(app).startswith(
            "event 9 oom 64.00 MiB requested, 1.00 MiB free on the device · t+0.009000 s"
        )
        assert chart(app).splitlines()[-1] == "          └ ◆     ◆ ▲"  # the cursor covers it
        await press(pilot, "home", "o")  # from the start, the first (and only) one again
        assert status(app).startswith("event 9 oom")

    run([oom_dev], script, size=(60, 10))

    async def none(app, pilot):
        await press(pilot, "o")
        assert status(app).startswith("event 3 ")  # stays on the peak, with a notice

    run([memlens.load(hs.small()).device()], none, size=SMALL)
