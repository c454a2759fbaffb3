"""The fleet report (`memlens fleet --report`): a rank x stage heatmap, the outlier table,
each outlier's diff against the median rank, the groups, the stages and the failed rows.

It renders a `memlens fleet` result (memlens.fleet.api.fleet) with the report's page and
tables; it computes no figure of its own. Sections take the result, not a ReportContext:
a fleet has no one snapshot to open (the workers read them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memlens.views.report import page
from memlens.views.text.fleet import figure_label, rank_ranges

if TYPE_CHECKING:  # views never import the fleet package; the result is only its type
    from memlens.fleet.results import FleetResult

STATUS = {"both": "", "only_a": "only in the median rank", "only_b": "only in this rank"}
HEAT_WIDTH = 960  # px of the heatmap's cells, whatever the rank count
ROW_HEIGHT = 18


def overview(r: FleetResult) -> str:
    by_rank = {row["rank"]: row for row in r["table"]}
    base = r["median_rank"]
    peak = page.fmt_bytes(by_rank[base]["peak_active_bytes"]) if base is not None else "&ndash;"
    return page.figures([
        ("ranks", page.fmt_int(r["ranks_total"]), f"{r['ranks_ok']:,} read, {r['ranks_failed']:,} failed"),
        ("outliers", page.fmt_int(len(r["outliers"])), f"|robust z| > {r['threshold_z']:g}"),
        ("groups", page.fmt_int(len(r["groups"])), f"same call sites, within {r['tolerance']:.0%}"),
        ("median rank", page.esc(base if base is not None else "-"), "the most typical rank"),
        ("its peak", peak, "active bytes"),
    ]) + page.note(f"Read by {r['executor']}; rank ids from {r['rank_source']}.")  # fmt: skip


def _heat_colour(ratio: float) -> str:
    """Stage peak / the stage's median: 1.0 grey, above red, below blue (saturating at
    +-50%). A computed rgb() string: nothing from the snapshot reaches the attribute."""
    t = max(-1.0, min(1.0, (ratio - 1.0) / 0.5))
    if t >= 0:
        r, g, b = 215, round(215 - 150 * t), round(215 - 165 * t)
    else:
        r, g, b = round(215 + 170 * t), round(215 + 90 * t), 225
    return f"rgb({r},{g},{b})"


def heatmap(r: FleetResult) -> str:
    """Ranks across, stages down; each cell the rank's stage peak against the stage's
    median over the ranks (a native tooltip gives the bytes)."""
    stages = [s["stage"] for s in r["stages"]]
    rows = [row for row in r["table"] if row["status"] == "ok"]
    if not stages or not rows:
        return page.note("No stages: the snapshots have no annotations (record_function).")
    medians = {s["stage"]: s["median_bytes"] for s in r["stages"]}
    flagged = {o["rank"] for o in r["outliers"]}
    cell = max(1.0, min(14.0, HEAT_WIDTH / len(rows)))
    label_w = 8 * min(40, max(len(s) for s in stages)) + 12
    width = label_w + cell * len(rows)
    height = ROW_HEIGHT * (len(stages) + 1)
    parts = [
        f'<svg class="heatmap" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.1f} {height}" role="img">'
    ]
    for y, stage in enumerate(stages):
        parts.append(
            f'<text x="0" y="{y * ROW_HEIGHT + 13}" font-size="11" fill="currentColor">'
            f"{page.esc(stage[:40])}</text>"
        )
        for x, row in enumerate(rows):
            value = row["stage_peaks"].get(stage)
            if value is None:
                continue
            med = medians[stage] or 1
            tip = page.esc(
                f"rank {row['rank']}, {stage}: {page.bytes_text(value)} "
                f"({100 * (value - med) / med:+.1f}% of the median)"
            )
            parts.append(
                f'<rect x="{label_w + x * cell:.2f}" y="{y * ROW_HEIGHT}" width="{cell:.2f}" '
                f'height="{ROW_HEIGHT - 2}" fill="{_heat_colour(value / med)}">'
                f"<title>{tip}</title></rect>"
            )
    # outliers marked under their column
    for x, row in enumerate(rows):
        if row["rank"] in flagged:
            cx = label_w + (x + 0.5) * cell
            y0 = len(stages) * ROW_HEIGHT + 2
            parts.append(
                f'<path d="M{cx:.2f} {y0} l4 8 h-8 z" fill="rgb(192,57,43)">'
                f"<title>outlier: rank {row['rank']}</title></path>"
            )
    parts.append("</svg>")
    return (
        page.note(
            f"{len(rows):,} ranks (in rank order, left to right) x {len(stages)} stages: each "
            "cell is the rank's peak in that stage against the stage's median (red above, "
            "blue below, saturating at +-50%); triangles mark the outliers."
        )
        + '<div class="tablewrap">'
        + "".join(parts)
        + "</div>"
    )


def outlier_table(r: FleetResult) -> str:
    if not r["outliers"]:
        return page.note(f"No rank has a figure with |robust z| > {r['threshold_z']:g}.")
    rows = []
    for o in r["outliers"]:
        for k, f in enumerate(o["figures"]):
            pct = "" if f["change_pct"] is None else f"{f['change_pct']:+.1f}%"
            rows.append(
                [
                    o["rank"] if k == 0 else "",
                    figure_label(f["name"]),
                    page.num(page.fmt_bytes(f["value"])),
                    page.num(page.fmt_bytes(int(f["median"]))),
                    page.num(page.esc(pct)),
                    page.num(f"{f['z']:+.1f}"),
                ]
            )
    return page.note(
        "Robust z = (value - median) / (1.4826 x MAD), the MAD floored at 1% of the median; "
        "the flagged figures of each rank, largest |z| first."
    ) + page.table(["rank", "figure", "value", "median", "change", "z"], rows, numeric=(2, 3, 4, 5))


def outlier_diffs(r: FleetResult) -> str:
    parts = []
    for o in r["outliers"]:
        d = o["diff"]
        if d is None:
            continue
        parts.append(
            f"<h3>Rank {page.esc(o['rank'])} against the median rank "
            f"{page.esc(r['median_rank'])}</h3>"
        )
        if d["error"] is not None:
            parts.append(page.note(f"No diff: {d['error']}"))
            continue
        rows = [
            [
                page.Cell(page.site_code(s["site"])),
                page.num(page.fmt_bytes(s["a_bytes"])),
                page.num(page.fmt_bytes(s["b_bytes"])),
                page.num(page.fmt_delta(s["change"])),
                STATUS.get(s["status"], s["status"]),
            ]
            for s in d["sites"]
            if s["change"]
        ]
        parts.append(
            page.table(
                ["call site", "median rank", f"rank {o['rank']}", "change", ""],
                rows,
                numeric=(1, 2, 3),
                empty="no call site differs at the peak",
            )
        )
    if not parts:
        return page.note("No outlier diffs (no outliers, or --diffs 0).")
    return page.note(
        "Call sites alive at each one's peak (memlens diff), largest change first."
    ) + "".join(parts)


def groups_and_stages(r: FleetResult) -> str:
    groups = page.table(
        ["group", "ranks", "which", "peak of its first rank", "call sites"],
        [
            [
                g["group"],
                page.num(page.fmt_int(g["count"])),
                rank_ranges(g["ranks"]),
                page.num(page.fmt_bytes(g["peak_active_bytes"])),
                page.Cell(f"<code>{page.esc(g['fingerprint'])}</code>"),
            ]
            for g in r["groups"]
        ],
        numeric=(1, 3),
    )
    stages = page.table(
        ["stage", "min", "median", "max", "max rank", "max / median"],
        [
            [
                s["stage"],
                page.num(page.fmt_bytes(s["min_bytes"])),
                page.num(page.fmt_bytes(int(s["median_bytes"]))),
                page.num(page.fmt_bytes(s["max_bytes"])),
                page.num(page.fmt_int(s["max_rank"])),
                page.num(
                    "&ndash;" if s["max_over_median"] is None else f"{s['max_over_median']:.3f}"
                ),
            ]
            for s in r["stages"]
        ],
        numeric=(1, 2, 3, 4, 5),
        empty="no stages (no annotations)",
    )
    return f"<h3>Groups</h3>{groups}<h3>Stages, most imbalanced first</h3>{stages}"


def failed(r: FleetResult) -> str | None:
    if not r["failed"]:
        return None
    return page.table(
        ["rank", "file", "reason"],
        [[f["rank"], page.Cell(page.site_code(f["path"])), f["reason"]] for f in r["failed"]],
    )


SECTIONS: list[tuple[str, str, Callable[[FleetResult], str | None]]] = [
    ("overview", "Overview", overview),
    ("heatmap", "Ranks x stages", heatmap),
    ("outliers", "Outliers", outlier_table),
    ("diffs", "Outliers against the median rank", outlier_diffs),
    ("groups", "Groups and stages", groups_and_stages),
    ("failed", "Failed ranks", failed),
]


def fleet_report(result: FleetResult, title: str = "memlens fleet report") -> str:
    """The whole self-contained HTML page."""
    header = (
        f'<h1>{page.esc(title)}</h1><div class="source">{result["ranks_total"]:,} ranks '
        f"&middot; {page.esc(result['executor'])}</div>"
    )
    return page.sectioned_page(title, header, SECTIONS, result)
