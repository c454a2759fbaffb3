"""Across ranks on hand-made records: exact z-scores, outliers, groups, stage imbalance."""

from __future__ import annotations

import pytest

from memlens.fleet.aggregate import fleet_stats, groups, median_rank, outliers, stage_imbalance
from memlens.fleet.api import summarize_fleet
from memlens.fleet.record import FAILED, RankRecord

MIB = 1 << 20


def rec(rank: int, peak: int, *, end: int = 10 * MIB, fp: str = "f", fwd: int = 50 * MIB,
        **kw) -> RankRecord:  # fmt: skip
    return RankRecord(rank=rank, path=f"rank{rank}.pickle", peak_active_bytes=peak,
                      peak_reserved_bytes=2 * peak, baseline_bytes=MIB, end_active_bytes=end,
                      stage_peaks={"forward": fwd}, category_bytes={"activation": fwd - MIB},
                      fingerprint=fp, **kw)  # fmt: skip


def test_robust_z_uses_median_and_mad():
    # peaks 100, 101, 102, 103 MiB and one at 150: median 102, MAD 1 MiB
    records = [rec(i, (100 + i) * MIB) for i in range(4)] + [rec(4, 150 * MIB)]
    stats, z = fleet_stats(records)
    s = stats["peak_active_bytes"]
    assert s["median"] == 102 * MIB and s["mad"] == MIB
    # scale: max(1.4826 MiB, 1% of 102 MiB = 1.02 MiB, 0.2% of the median peak)
    assert s["scale"] == pytest.approx(1.4826 * MIB)
    assert z[4]["peak_active_bytes"] == round(48 / 1.4826, 3)
    assert z[0]["peak_active_bytes"] == round(-2 / 1.4826, 3)
    found = outliers(records, stats, z)
    assert [o["rank"] for o in found] == [4]
    # peak and reserved (2x peak) are off by the same z; peak comes first (headline order)
    assert [f["name"] for f in found[0]["figures"]] == ["peak_active_bytes", "peak_reserved_bytes"]
    assert found[0]["figures"][0]["change_pct"] == round(100 * 48 / 102, 2)


def test_identical_ranks_need_a_few_percent_to_be_outliers():
    # MAD 0: the floor (1% of the median) decides; 3% off is not an outlier, 4% is
    records = [rec(i, 100 * MIB) for i in range(9)] + [rec(9, 103 * MIB), rec(10, 104 * MIB)]
    stats, z = fleet_stats(records)
    assert stats["peak_active_bytes"]["mad"] == 0
    assert z[9]["peak_active_bytes"] == 3.0 and z[10]["peak_active_bytes"] == 4.0
    assert [o["rank"] for o in outliers(records, stats, z)] == [10]


def test_failed_rows_take_no_part():
    records = [rec(i, 100 * MIB) for i in range(3)]
    records.append(RankRecord(rank=3, path="rank3.pickle", status=FAILED, reason="bad"))
    r = summarize_fleet(records)
    assert (r["ranks_total"], r["ranks_ok"], r["ranks_failed"]) == (4, 3, 1)
    assert r["failed"] == [{"rank": 3, "path": "rank3.pickle", "reason": "bad"}]
    assert r["figures"]["peak_active_bytes"]["ranks"] == 3
    assert r["outliers"] == [] and r["table"][3]["z"] == {} and r["table"][3]["group"] is None


def test_groups_need_the_same_call_sites_and_close_figures():
    records = [rec(0, 100 * MIB), rec(1, 104 * MIB), rec(2, 100 * MIB, fp="g"),
               rec(3, 130 * MIB), rec(4, 101 * MIB)]  # fmt: skip
    stats, _ = fleet_stats(records)
    got = [(g["ranks"], g["fingerprint"]) for g in groups(records, stats, tolerance=0.05)]
    assert got == [([0, 1, 4], "f"), ([2], "g"), ([3], "f")]


def test_median_rank_is_the_most_typical():
    records = [rec(0, 90 * MIB), rec(1, 100 * MIB), rec(2, 101 * MIB), rec(3, 150 * MIB)]
    stats, z = fleet_stats(records)
    assert median_rank(records, z) == 1  # 1 and 2 tie on |z|: the lower rank


def test_stage_imbalance():
    records = [rec(0, MIB, fwd=40 * MIB), rec(1, MIB, fwd=50 * MIB), rec(2, MIB, fwd=80 * MIB),
               rec(3, MIB, fwd=80 * MIB)]  # fmt: skip
    (s,) = stage_imbalance(records)
    assert s == {"stage": "forward", "ranks": 4, "min_bytes": 40 * MIB, "min_rank": 0,
                 "median_bytes": 65.0 * MIB, "max_bytes": 80 * MIB, "max_rank": 2,
                 "spread_bytes": 40 * MIB, "max_over_median": round(80 / 65, 4)}  # fmt: skip


def test_a_fleet_where_every_rank_failed():
    records = [RankRecord(rank=i, path=f"rank{i}.pickle", status=FAILED, reason="bad")
               for i in range(3)]  # fmt: skip
    r = summarize_fleet(records)
    assert (r["ranks_ok"], r["ranks_failed"], r["median_rank"]) == (0, 3, None)
    assert r["figures"] == {} and r["outliers"] == [] and r["groups"] == [] == r["stages"]
    from memlens.views.text.fleet import render_fleet

    r["executor"], r["rank_source"] = "test", "order"
    text = render_fleet(r)
    assert "3 ranks (0 ok, 3 failed)" in text and text.count("  rank ") == 3


def test_text_lists_at_most_twenty_groups_and_failures():
    from memlens.views.text.fleet import render_fleet

    records = [rec(i, (100 + 10 * i) * MIB, fp=str(i)) for i in range(25)]
    records += [RankRecord(rank=25 + i, path="x", status=FAILED, reason="bad") for i in range(22)]
    r = summarize_fleet(records)
    r["executor"], r["rank_source"] = "test", "order"
    text = render_fleet(r)
    assert len(r["groups"]) == 25 and text.count("  group ") == 20
    assert "  ... 5 more groups (--json, --out)" in text
    assert "  ... 2 more failed ranks (--json, --out)" in text
