"""The fleet report's page from a hand-made fleet: the heatmap has a cell per rank and
stage, the outliers are marked and tabled, and names from the files are escaped."""

from __future__ import annotations

import re

from memlens.fleet.api import summarize_fleet
from memlens.fleet.record import FAILED, RankRecord
from memlens.views.report.fleet import fleet_report

MIB = 1 << 20
EVIL = "<script>alert(1)</script>"


def rec(rank: int, fwd: int) -> RankRecord:
    return RankRecord(rank=rank, path=f"rank{rank}.pickle", peak_active_bytes=fwd,
                      peak_reserved_bytes=fwd, baseline_bytes=MIB, end_active_bytes=MIB,
                      stage_peaks={"forward": fwd, EVIL: MIB}, fingerprint="f",
                      top_sites=[], category_bytes={})  # fmt: skip


def test_heatmap_outliers_and_escaping():
    records = [rec(i, 100 * MIB) for i in range(9)] + [rec(9, 150 * MIB)]
    records.append(RankRecord(rank=10, path=f"{EVIL}.pickle", status=FAILED, reason=EVIL))
    result = summarize_fleet(records)
    result["executor"], result["rank_source"] = "test", "file name"
    page = fleet_report(result)
    assert [o["rank"] for o in result["outliers"]] == [9]
    found = re.search(r'<svg class="heatmap".*?</svg>', page, re.S)
    assert found is not None
    svg = found.group(0)
    assert svg.count("<rect") == 10 * 2  # 10 ok ranks x 2 stages
    assert svg.count("outlier: rank 9") == 1
    assert "rank 9, forward: 150.00 MiB (+50.0% of the median)" in svg
    assert EVIL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for sid in ("overview", "heatmap", "outliers", "diffs", "groups", "failed"):
        assert f'<section id="{sid}">' in page


def test_progress_bar_counts_files_per_second():
    import io

    from rich.console import Console

    from memlens.execution import progress

    written = io.StringIO()
    console = Console(file=written, force_terminal=True, width=100)
    with progress.progress_bar(3, "ranks", enabled=True, console=console) as bar:
        for _ in range(3):
            bar.advance()
    text = written.getvalue()
    assert "3/3" in text and "files/s" in text
    with progress.progress_bar(3, "ranks", enabled=False) as bar:
        bar.advance()  # no terminal: nothing drawn, nothing fails
