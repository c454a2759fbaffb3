"""Every real snapshot of ../shared/snapshots through the app: figures shown match the
independently computed expected.json, and a walk through every screen ends where it began."""

from __future__ import annotations

import pytest
from tui_pilot import press, run, shown

import memlens
from memlens.units import format_bytes
from memlens.views.tui.app import TimelineScreen
from shared_data import real_snapshot_names

# with ../shared absent the list is empty and the one placeholder case skips (fixture)
NAMES = real_snapshot_names() or ["<none>"]

WALK = [
    "right", "plus", "m", "M", "a", "escape", "p", "enter", "e", "h", "e", "slash", "a",
    "enter", "n", "a", "enter", "escape", "escape", "escape", "q", "end", "enter", "q",
    "home", "enter", "q", "question_mark", "x",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_real_snapshot_walk(name, shared_snapshots_dir, expected_figures):
    exp = expected_figures[name]
    dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])

    async def script(app, pilot):
        peak_at = exp["peak_event_index"]
        times = dev.time_us
        span = f" over {(times.max() - times[0]) / 1e6:.3f} s" if times[0] >= 0 else ""
        where = f"event {peak_at:,}" if peak_at >= 0 else "before the trace"
        # two lines when it does not fit in one (parts are never split)
        assert (
            shown(app, "#summary0")
            .replace("\n", " · ")
            .startswith(
                f"snap0 · device {exp['device']} · {exp['trace_entries']:,} events{span} · "
                f"peak {format_bytes(exp['peak_active_bytes'])} at {where} · "
                f"reserved peak {format_bytes(exp['peak_reserved_bytes'])} · "
                f"end {format_bytes(exp['end_active_bytes'])}"
            )
        )
        if peak_at >= 0:
            assert shown(app, "#status0").startswith(f"event {peak_at:,} ")
        assert shown(app, "#view").endswith(f" of {exp['trace_entries']:,} shown")
        await press(pilot, "s")
        text = shown(app, "#text")
        for line in (
            f"  initial      {format_bytes(exp['baseline_bytes'])} (before the first event)",
            f"  peak         {format_bytes(exp['peak_active_bytes'])} at {where}",
            f"  final        {format_bytes(exp['end_active_bytes'])}",
            f"  initial      {format_bytes(exp['reserved_start_bytes'])}",
            f"  peak         {format_bytes(exp['peak_reserved_bytes'])}",
            f"  final        {format_bytes(exp['end_reserved_bytes'])}",
        ):
            assert line in text.splitlines()
        await press(pilot, "q", *WALK)
        assert isinstance(app.screen, TimelineScreen)

    run([dev], script, size=(100, 30))
