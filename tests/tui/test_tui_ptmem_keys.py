"""Issue 17's TUI fixes, driven by Textual's pilot: the help closes only itself, heat by
share of the total (share of the parent as an option), the keys a ptmem user reaches for,
x-axis event labels, the breadcrumb and independent panes in compare."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import tui_snapshots as hs
from click.testing import CliRunner
from rich.text import Text
from textual.pilot import Pilot
from textual.screen import Screen
from tui_pilot import chart, press, run, shown

import memlens
from memlens.views.tui.app import (
    AllocationListScreen,
    AllocationScreen,
    HelpScreen,
    LiveTreeScreen,
    TimelineScreen,
    TuiApp,
)
from memlens.views.tui.outline import HEAT
from snapshot_builders import MiB, ev

RED, GREEN = HEAT[-1][1].color.name, HEAT[1][1].color.name  # type: ignore[union-attr]  # "#ff3030", "#5fd75f"


@pytest.fixture
def dev():
    return memlens.load(hs.small()).device()


@pytest.fixture
def heat_dev():
    """90 MiB under big(), 10 MiB under outer() -> inner(): inner is an only child."""
    big = {"filename": "/home/u/a.py", "line": 1, "name": "big"}
    outer = {"filename": "/home/u/a.py", "line": 2, "name": "outer"}
    inner = {"filename": "/home/u/a.py", "line": 3, "name": "inner"}
    trace = [
        ev("alloc", 0x1000000, 90 * MiB, 0, frames=[big]),
        ev("alloc", 0x8000000, 10 * MiB, 1, frames=[inner, outer]),
    ]
    return memlens.load({"segments": [], "device_traces": [trace]}).device()


def _closes_only_the_help(
    app_screen_type: type[Screen[None]],
) -> Callable[[TuiApp, Pilot[None], str], Awaitable[None]]:
    async def check(app: TuiApp, pilot: Pilot[None], key: str) -> None:
        below = app.screen
        await press(pilot, "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await press(pilot, key)
        assert app.screen is below and isinstance(below, app_screen_type)
        assert app.is_running

    return check


@pytest.mark.parametrize("key", ["q", "escape", "Q", "x"])
def test_help_closes_only_itself_from_the_timeline_and_a_tree(dev, key):
    async def script(app, pilot):
        await _closes_only_the_help(TimelineScreen)(app, pilot, key)
        assert "█" in chart(app)  # the timeline is drawn, not a blank screen
        await press(pilot, "enter", "down", "down")
        tree, cursor = app.screen.outline, app.screen.outline.cursor
        await _closes_only_the_help(LiveTreeScreen)(app, pilot, key)
        # the same tree, where it was
        assert app.screen.outline is tree and tree.cursor == cursor
        assert shown(app, "#tree").splitlines()[2].startswith("    ▸   12.00 MiB")

    run([dev], script)


def _row_colours(app) -> dict[str, str | None]:
    """Per tree row's label: the colour of its bytes and % (the heat)."""
    text = app.screen.query_one("#tree").render()
    assert isinstance(text, Text)
    out = {}
    for line in text.split("\n"):
        label = line.plain.split("% ", 1)[1].split("  (")[0]
        styled = [s for s in line.spans if s.style and getattr(s.style, "color", None)]
        out[label] = styled[0].style.color.name if styled else None  # type: ignore[union-attr]
    return out


def test_heat_is_share_of_the_total_by_default_and_of_the_parent_on_percent(heat_dev):
    async def script(app, pilot):
        await press(pilot, "enter")
        app.screen.outline.expand_all()
        await press(pilot, "home")
        rows = shown(app, "#tree").splitlines()
        assert rows == [
            "▾  100.00 MiB 100.0% all  (2)",
            "  ·   90.00 MiB  90.0% big (a.py:1)  (1)",
            "  ▾   10.00 MiB  10.0% outer (a.py:2)  (1)",
            "    ·   10.00 MiB  10.0% inner (a.py:3)  (1)",
        ]
        colours = _row_colours(app)
        assert colours["big (a.py:1)"] == RED and colours["inner (a.py:3)"] == GREEN
        await press(pilot, "percent_sign")  # share of the parent: inner is all of outer
        assert shown(app, "#tree").splitlines()[3] == "    ·   10.00 MiB 100.0% inner (a.py:3)  (1)"
        assert _row_colours(app)["inner (a.py:3)"] == RED
        # the choice holds for the next tree; % again goes back to the total
        await press(pilot, "q", "enter")
        app.screen.outline.expand_all()
        await press(pilot, "end")
        assert shown(app, "#tree").splitlines()[3].startswith("    ·   10.00 MiB 100.0%")
        await press(pilot, "percent_sign")
        assert _row_colours(app)["inner (a.py:3)"] == GREEN

    run([heat_dev], script)


def test_heat_parent_from_the_command_line(tmp_path, monkeypatch):
    import pickle

    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(hs.small()))
    seen = []
    monkeypatch.setattr(TuiApp, "run", lambda self: seen.append(self.settings.heat))
    from memlens.cli.main import cli

    assert CliRunner().invoke(cli, ["tui", str(path), "--heat", "parent"]).exit_code == 0
    assert CliRunner().invoke(cli, ["tui", str(path)]).exit_code == 0
    assert seen == ["parent", "total"]


def test_enter_on_a_tree_row_expands_and_collapses(dev):
    async def script(app, pilot):
        await press(pilot, "enter", "down", "down")
        assert shown(app, "#tree").splitlines()[2] == (
            "    ▸   12.00 MiB  85.7% forward (model.py:20)  (2)"
        )
        await press(pilot, "enter")
        assert shown(app, "#tree").splitlines()[2:4] == [
            "    ▾   12.00 MiB  85.7% forward (model.py:20)  (2)",
            "      ·   12.00 MiB  85.7% <inside hidden frames>  (2)",
        ]
        await press(pilot, "enter")
        assert len(shown(app, "#tree").splitlines()) == 4
        assert isinstance(app.screen, LiveTreeScreen)
        # in an allocation list, Enter opens the allocation (its rows have no children)
        await press(pilot, "a")
        assert isinstance(app.screen, AllocationListScreen)
        await press(pilot, "enter")
        assert isinstance(app.screen, AllocationScreen)

    run([dev], script)


def test_q_backs_out_of_a_focus_first_and_capital_q_quits(dev):
    async def script(app, pilot):
        await press(pilot, "enter", "down", "down", "f")
        assert app.screen.outline.focus_stack
        await press(pilot, "q")  # ptmem: q pops the focus first
        assert isinstance(app.screen, LiveTreeScreen) and not app.screen.outline.focus_stack
        await press(pilot, "q")
        assert isinstance(app.screen, TimelineScreen)
        await press(pilot, "enter", "Q")  # from a tree: quits at once
        assert not app.is_running

    run([dev], script)


def test_b_f_and_brackets_move_the_timeline_cursor():
    long = memlens.load(hs.long_trace(500)).device()  # 999 events, 10 a column on 109

    async def script(app, pilot):
        tl = app.screen.primary.timeline

        def column() -> int:
            return int(app.screen.view.cursor_column)

        assert column() == 99  # the peak, the last event
        await press(pilot, "b")
        assert column() == 84 and app.screen.view.cursor == tl.peak_in(840, 849)
        await press(pilot, "f")
        assert column() == 99
        await press(pilot, "left_square_bracket")  # a quarter of 109 columns: 27
        assert column() == 72
        await press(pilot, "right_square_bracket")
        assert column() == 99
        assert shown(app, "#status0").startswith(f"event {tl.peak_in(990, 998)} ")

    run([long], script)


def test_x_axis_event_labels(dev):
    long = memlens.load(hs.long_trace(500)).device()

    async def script(app, pilot):
        rows = chart(app).splitlines()
        assert rows[-2].startswith("          └")  # the axis row, then the labels
        assert rows[-1] == (
            "     event 0         100       200       300       400       500       600"
            "       700       800       900"
        )

    run([long], script)


def test_breadcrumb_of_the_selected_row(dev):
    async def script(app, pilot):
        await press(pilot, "enter")
        assert shown(app, "#crumb") == "all"
        await press(pilot, "down", "down", "enter", "down")
        assert shown(app, "#crumb") == (
            "all › main (train.py:5) › forward (model.py:20) › <inside hidden frames>"
        )

    run([dev], script)
    # too narrow for the whole path: the outer frames give way
    run([dev], _narrow_crumb, size=(40, 20))


async def _narrow_crumb(app, pilot):
    await press(pilot, "enter", "down", "down", "enter", "down")
    crumb = shown(app, "#crumb")
    assert crumb.startswith("…") and crumb.endswith("› <inside hidden frames>")
    assert len(crumb) == 40


def test_compare_panes_move_alone_after_tab_and_together_after_l(dev):
    other = memlens.load(hs.small(scale=2, extra_fwd=3 * MiB, fwd_line=23)).device()

    async def script(app, pilot):
        def events() -> list[str]:
            return [shown(app, f"#status{k}").split(" ", 2)[1] for k in (0, 1)]

        assert events() == ["3", "3"]
        await press(pilot, "right")
        assert events() == ["4", "4"]  # linked: one cursor
        await press(pilot, "tab", "right", "right")
        assert events() == ["4", "6"]  # B alone
        assert shown(app, "#summary1").startswith("▶ B: snap1")
        assert shown(app, "#summary0").startswith("A: snap0")
        assert shown(app, "#view").startswith("B moves alone (Tab: switch, l: link)")
        assert _dimmed(app, 0) and not _dimmed(app, 1)  # A, which the keys skip, is dimmed
        await press(pilot, "right_curly_bracket", "left")  # } : to A, which moves alone
        assert events() == ["3", "6"]
        await press(pilot, "enter")  # each pane at its own cursor
        assert shown(app, "#title").startswith("diff B - A at A event 3 vs B event 6")
        await press(pilot, "q", "p")  # unlinked: the active pane's own peak (A: 3)
        assert events() == ["3", "6"]
        await press(pilot, "l", "right")
        assert events() == ["4", "4"]  # linked again, following A
        assert shown(app, "#summary0").startswith("A: snap0")
        assert not _dimmed(app, 0) and not _dimmed(app, 1)

    run([dev, other], script)


def _dimmed(app, k: int) -> bool:
    """Is every row of pane k's chart drawn dim?"""
    text = app.screen.query_one(f"#chart{k}").render()
    return all(
        any(
            s.start == 0 and s.end == len(row) and getattr(s.style, "dim", False) for s in row.spans
        )
        for row in text.split("\n")
    )
