"""`memlens export --chrome-trace` read back by Perfetto's trace processor (WASM, in
Chromium; see perfetto.py): the counters peak at `memlens summary --json`'s figures, the
stages are slices, and merged into a real torch.profiler trace they share its time axis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from perfetto import TraceProcessor, serving, web_dist
from test_export import profiler_trace, run, snapshot_in_window, summary_figures

from chromium import BROWSER_MARKS, launch_browser
from memlens.simulation.synthetic import generate_snapshot

pytestmark = [*BROWSER_MARKS, pytest.mark.slow]

COUNTERS = """
select p.name, t.name, max(c.value), count(*) from counter c
join process_counter_track t on c.track_id = t.id join process p using (upid)
group by 1, 2 order by 1, 2"""


def test_perfetto_reads_the_counters_and_stages(tmp_path: Path) -> None:
    ui = web_dist()
    snap = tmp_path / "gen.pickle"
    generate_snapshot(snap, events=3000, devices=2)
    mem = tmp_path / "mem.json"
    run("export", str(snap), "--chrome-trace", str(mem))
    # a real profiler trace, and a snapshot recorded during it merged in, on its clock
    prof = tmp_path / "profile.json"
    profiler_trace(prof)
    window = tmp_path / "window.json"
    kernel, _ = snapshot_in_window(prof, window)
    merged = tmp_path / "merged.json"
    run("export", str(window), "--chrome-trace", str(merged), "--merge", str(prof))
    written = json.loads(mem.read_text())["traceEvents"]
    figures = summary_figures(snap)

    with serving(ui, {"mem.json": mem, "merged.json": merged}) as base:
        for browser in launch_browser():
            tp = TraceProcessor(browser, base, "mem.json")
            rows = tp.query(COUNTERS)
            want = []
            for device, (active, reserved) in sorted(figures.items()):
                pid = f"GPU {device} memory (memlens)"
                n = {k: sum(1 for e in written if e["ph"] == "C" and e["pid"] == 0x6D656D00 + device and e["name"] == k)
                     for k in ("allocated", "reserved")}  # fmt: skip
                want += [[pid, "allocated bytes", active, n["allocated"]],
                         [pid, "reserved bytes", reserved, n["reserved"]]]  # fmt: skip
            assert rows == want
            # every stage is a slice, at its time in nanoseconds
            stages = sorted(
                (e["name"], e["ts"] * 1000, e["dur"] * 1000) for e in written if e["ph"] == "X"
            )
            got = tp.query("select name, ts, dur from slice order by name, ts, dur")
            assert stages and sorted(map(tuple, got)) == stages
            tp.close()

            tp = TraceProcessor(browser, base, "merged.json")
            ((n_thread_slices,),) = tp.query(
                "select count(*) from slice join thread_track t on slice.track_id = t.id"
            )
            assert n_thread_slices > 1  # the profiler's events, and the stage
            pid = "GPU 0 memory (memlens)"
            assert tp.query(COUNTERS) == [
                [pid, "allocated bytes", 1000, 3], [pid, "reserved bytes", 2 << 20, 2]
            ]  # fmt: skip
            # on one time axis: memory's first sample and the profiler's event it was
            # placed at are less than a microsecond apart (the profiler's ts has fractions)
            ((first_sample,),) = tp.query("select min(ts) from counter")
            ((event_ts,),) = tp.query(f"select min(ts) from slice where name = '{kernel['name']}'")
            assert 0 <= event_ts - first_sample < 1000
            tp.close()
