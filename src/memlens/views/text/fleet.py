"""Text of `memlens fleet`: the outliers and why (their diff against the median rank),
the groups, the imbalance per stage and the failed rows. Every rank's row is in --json
and in the Parquet table (--out); printing thousands of rows would bury the answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memlens.units import format_bytes as fb
from memlens.views.text.lines import signed_bytes, table_lines

FIGURES_PER_OUTLIER = 4
TEXT_ROWS = 20  # groups or failed rows printed; --json and --out have them all


def _more(n: int, what: str) -> list[str]:
    return [f"  ... {n - TEXT_ROWS:,} more {what} (--json, --out)"] if n > TEXT_ROWS else []


def rank_ranges(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 4, 7, 8] -> "0-2, 4, 7-8"."""
    out: list[str] = []
    ordered = sorted(ranks)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def figure_label(name: str) -> str:
    """ "stage:forward" -> "stage forward"; "peak_active_bytes" -> "peak active"."""
    kind, _, rest = name.partition(":")
    if rest:
        return f"{kind} {rest}"
    return name.removesuffix("_bytes").replace("_", " ")


def render_fleet(r: Mapping[str, Any]) -> str:
    lines = [
        f"memlens fleet: {r['ranks_total']:,} ranks ({r['ranks_ok']:,} ok, "
        f"{r['ranks_failed']:,} failed) on {r['executor']}; rank ids from {r['rank_source']}"
    ]
    by_rank = {row["rank"]: row for row in r["table"]}
    base = r["median_rank"]
    if base is not None:
        m = by_rank[base]
        lines.append(
            f"median rank {base}: peak active {fb(m['peak_active_bytes'])}, peak reserved "
            f"{fb(m['peak_reserved_bytes'])}, end active {fb(m['end_active_bytes'])}"
        )
    lines += ["", *outlier_lines(r, by_rank)]
    if r["groups"]:
        lines += ["", f"groups (same call sites, headline figures within {r['tolerance']:.0%}):"]
        for g in r["groups"][:TEXT_ROWS]:
            n = g["count"]
            lines.append(
                f"  group {g['group']}: {n:,} rank{'s' if n != 1 else ''} "
                f"({rank_ranges(g['ranks'])}), peak {fb(g['peak_active_bytes'])}, "
                f"call sites {g['fingerprint']}"
            )
        lines += _more(len(r["groups"]), "groups")
    if r["stages"]:
        lines += ["", "stages (each stage's peak across the ranks, most imbalanced first):"]
        lines += table_lines(
            ["stage", "min", "median", "max", "max rank", "max/median"],
            [
                [
                    s["stage"][:60],
                    fb(s["min_bytes"]),
                    fb(int(s["median_bytes"])),
                    fb(s["max_bytes"]),
                    s["max_rank"],
                    "" if s["max_over_median"] is None else f"{s['max_over_median']:.3f}",
                ]
                for s in r["stages"]
            ],
        )
    if r["failed"]:
        lines += ["", f"failed ({len(r['failed']):,}), by reason:"]
        lines += [
            f"  {f['ranks']:>7,} ranks  {f['reason']}  (first: rank {f['first_rank']})"
            for f in r["failure_reasons"][:TEXT_ROWS]
        ]
        lines += ["", "failed ranks:"]
        lines += [f"  rank {f['rank']}  {f['reason']}" for f in r["failed"][:TEXT_ROWS]]
        lines += _more(len(r["failed"]), "failed ranks")
    return "\n".join(lines)


def failure_warning(r: Mapping[str, Any]) -> str | None:
    """The stderr line when ranks failed (None when none did): an error when every rank
    did, so a script cannot take an empty comparison for "no outliers"."""
    failed, total = r["ranks_failed"], r["ranks_total"]
    if not failed:
        return None
    top = r["failure_reasons"][0]
    why = f"{top['reason']} ({top['ranks']:,} ranks)"
    more = len(r["failure_reasons"]) - 1
    why += f" and {more} other reason{'s' if more > 1 else ''}" if more else ""
    if failed == total:
        return f"memlens: error: every rank failed ({total:,} of {total:,}): {why}"
    return f"memlens: warning: {failed:,} of {total:,} ranks failed and are left out: {why}"


def outlier_lines(r: Mapping[str, Any], by_rank: dict[int, dict[str, Any]]) -> list[str]:
    found = r["outliers"]
    if not r["ranks_ok"]:
        return ["no rank could be read: nothing to compare (see failed below)"]
    if not found:
        return [f"no outliers (no figure has |robust z| > {r['threshold_z']:g})"]
    lines = [
        f"outliers ({len(found)}; |robust z| > {r['threshold_z']:g}, median/MAD over the ok ranks):"
    ]
    rows = []
    for o in found:
        for k, f in enumerate(o["figures"][:FIGURES_PER_OUTLIER]):
            pct = "" if f["change_pct"] is None else f"{f['change_pct']:+.1f}%"
            rows.append(
                [
                    o["rank"] if k == 0 else "",
                    figure_label(f["name"]),
                    fb(f["value"]),
                    fb(int(f["median"])),
                    pct,
                    f"{f['z']:+.1f}",
                ]
            )
    lines += table_lines(["rank", "figure", "value", "median", "change", "z"], rows)
    for o in found:
        d = o.get("diff")
        if not d:
            continue
        lines += [
            "",
            f"rank {o['rank']} vs median rank {r['median_rank']} "
            f"({o['path']}), call sites at the peak:",
        ]
        if d["error"] is not None:  # the key is always there (OutlierDiff): None = a diff
            lines.append(f"  (no diff: {d['error']})")
            continue
        changed = [s for s in d["sites"] if s["change"]]
        for s in changed[:5]:
            only = {
                "only_a": "  (only in the median rank)",
                "only_b": f"  (only in rank {o['rank']})",
            }
            lines.append(
                f"  {signed_bytes(s['change']):>12}  {s['site']}{only.get(s['status'], '')}"
            )
        if not changed:
            lines.append("  (no call site differs at the peak)")
    return lines
