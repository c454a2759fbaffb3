"""The plan page (`memlens plan --html FILE`): the memory assumed usable, one row per point,
the fitted curve against the card's usable memory, the largest fitting value, the
bisection and the knob table.

It renders a `memlens plan` result (memlens.planning.plan) with the report's page and
tables, self-contained (inline SVG, the report's inline CSS and JS, nothing fetched). The
only arithmetic of its own is the fitted polynomial evaluated along the chart's x axis.
Every string from the user (arguments, environment, knob settings, errors, call sites)
goes through `esc`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from memlens.units import format_bytes
from memlens.views.report.page import (
    Cell,
    bytes_text,
    esc,
    figures,
    fmt_bytes,
    fmt_delta,
    note,
    num,
    sectioned_page,
    site_code,
    table,
)
from memlens.views.text.plan import fits_text, values_text

if TYPE_CHECKING:  # views never import the planning package; the result is only its type
    from memlens.planning.results import PlanFit, PlanPoint, PlanResult

W, H = 720, 320  # the chart's viewBox
PAD_L, PAD_R, PAD_T, PAD_B = 84, 16, 14, 40
CURVE_STEPS = 96
# The chart's x axis reaches the fit's largest fitting value (where the curve meets the
# usable line) when it is within this many times the largest swept value.
REACH = 8.0
COLOURS = ("var(--reserved)", "var(--active)", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2")


def exact(n: int | float | None) -> Cell:
    """Bytes as the report writes them, with the exact count as a tooltip."""
    if n is None:
        return num("&ndash;")
    return num(f'<span title="{int(n):,} bytes">{fmt_bytes(n)}</span>')


def overview(r: PlanResult) -> str:
    usable = r["usable_bytes"]
    best = r["largest_fitting"]
    found = r["find_max"]
    items = [
        ("card", esc(r["gpu"]), "memory" if r["capacity_bytes"] is None else bytes_text(r["capacity_bytes"])),
        ("usable by PyTorch", fmt_bytes(usable), f"minus {bytes_text(r['reserve_bytes'])} assumed (--reserve)"),
        ("points", f"{len(r['points']) + len(found['probes'] if found else []):,}",
         f"{r['simulations']:,} simulations run"),
    ]  # fmt: skip
    if best:
        items.append(("largest fitting", esc(values_text(best)), "of the swept points"))
    if found is not None:
        answer = "none" if found["largest_fitting"] is None else str(found["largest_fitting"])
        items.append(
            (f"find-max {found['arg']}", esc(answer), f"in [{found['lo']}, {found['hi']}]")
        )
    text = (
        "No capacity given (--gpu or --device-memory): nothing is said to fit."
        if usable is None
        else f"Usable = the card's {bytes_text(r['capacity_bytes'])} minus "
        f"{bytes_text(r['reserve_bytes'])} assumed for the CUDA context and library handles "
        "(an assumption: measure yours and pass --reserve)."
    )
    return figures(items) + note(f"{text} Script {r['script']}; points run on {r['executor']}.")


def points_table(r: PlanResult) -> str:
    rows = []
    for p in r["points"]:
        env = " ".join(f"{k}={v}" for k, v in p["env"].items())
        rows.append(
            [
                values_text(p["values"]),
                Cell(f"<code>{esc(' '.join(p['argv']))}</code>"),
                Cell(f"<code>{esc(env)}</code>"),
                exact(p["peak_active_bytes"]),
                exact(p["peak_reserved_bytes"]),
                fits_text(p) + (" (cached)" if p["cached"] else ""),
                p["error"] or "",
            ]
        )
    return table(
        ["point", "arguments", "environment", "peak active", "peak reserved", "fits", "error"],
        rows,
        numeric=(3, 4),
    )


def _curve(fit: PlanFit, x: float) -> float:
    return fit["constant_bytes"] + fit["linear_bytes"][0] * x + fit["quadratic_bytes"][0] * x * x


def chart(
    series: Sequence[tuple[str, PlanFit | None, list[tuple[float, int, bool]]]],
    arg: str,
    usable: int | None,
) -> str:
    """Peak reserved against one swept argument: each series' points (a cross where it
    ran out of memory: its peak is up to the OOM), its fitted curve (over the points that
    ran to the end; dashed where it extrapolates) and the usable line."""
    xs = [x for _, _, pts in series for x, _, _ in pts]
    if not xs:
        return ""
    x0, x1 = min(xs), max(xs)
    reach = [
        f["largest_fitting"]
        for _, f, _ in series
        if f is not None and f["largest_fitting"] is not None
    ]
    beyond = [x for x in reach if x1 < x <= REACH * x1]
    if beyond:  # show where the curve crosses the usable line
        x1 = max(beyond) + 1
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    ys = [float(y) for _, _, pts in series for _, y, _ in pts] + [float(usable or 0)]
    for _, f, _ in series:
        if f is not None:
            ys += [_curve(f, x0), _curve(f, x1)]
    y1 = max(ys) * 1.05 or 1.0

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def sy(y: float) -> float:
        return H - PAD_B - max(0.0, y) / y1 * (H - PAD_T - PAD_B)

    out = [f'<svg class="plan-chart" viewBox="0 0 {W} {H}" width="100%" role="img">']
    style = 'font-size="11" fill="currentColor" font-family="system-ui, sans-serif"'
    for k in range(5):  # y grid: 0, 1/4 ... of the axis
        y = y1 * k / 4
        out.append(
            f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" '
            f'stroke="var(--line)" stroke-width=".6"/>'
            f'<text x="{PAD_L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end" {style}>'
            f"{esc(format_bytes(int(y)))}</text>"
        )
    for x in sorted(set(xs) | {x1}):
        out.append(
            f'<text x="{sx(x):.1f}" y="{H - PAD_B + 16}" text-anchor="middle" {style}>{x:g}</text>'
        )
    for label, f, _ in series:  # where the fit says the card fills up
        best = None if f is None else f["largest_fitting"]
        if best is not None and x0 <= best <= x1:
            tip = esc(f"{label}the fit's largest fitting {arg}: {best:g}")
            out.append(
                f'<line class="largest" x1="{sx(best):.1f}" x2="{sx(best):.1f}" y1="{PAD_T}" '
                f'y2="{H - PAD_B}" stroke="var(--muted)" stroke-dasharray="2 3">'
                f"<title>{tip}</title></line>"
                f'<text x="{sx(best) - 4:.1f}" y="{PAD_T + 24}" text-anchor="end" {style}>'
                f"largest fitting {best:g}</text>"
            )
    out.append(
        f'<text x="{(PAD_L + W - PAD_R) / 2:.1f}" y="{H - 6}" text-anchor="middle" {style}>'
        f"{esc(arg)}</text>"
    )
    if usable is not None and usable <= y1:
        out.append(
            f'<line class="usable" x1="{PAD_L}" x2="{W - PAD_R}" y1="{sy(usable):.1f}" '
            f'y2="{sy(usable):.1f}" stroke="var(--up)" stroke-width="1.2" stroke-dasharray="6 3">'
            f"<title>usable: {esc(bytes_text(usable))}</title></line>"
            f'<text x="{W - PAD_R}" y="{sy(usable) - 4:.1f}" text-anchor="end" {style}>'
            f"usable {esc(bytes_text(usable))}</text>"
        )
    for n, (label, f, pts) in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        if f is not None:
            ran = [x for x, _, ok in pts if ok] or [x for x, _, _ in pts]  # the fit's points
            lo, hi = min(ran), max(ran)
            for dashed, a, b in ((False, lo, hi), (True, x0, lo), (True, hi, x1)):
                if b <= a:
                    continue
                line = " ".join(
                    f"{sx(a + (b - a) * i / CURVE_STEPS):.1f},"
                    f"{sy(_curve(f, a + (b - a) * i / CURVE_STEPS)):.1f}"
                    for i in range(CURVE_STEPS + 1)
                )
                dash = ' stroke-dasharray="4 3"' if dashed else ""
                out.append(
                    f'<polyline class="fit" points="{line}" fill="none" stroke="{colour}" '
                    f'stroke-width="1.5"{dash}/>'
                )
        for x, y, ok in pts:
            tip = esc(f"{label}{arg}={x:g}: {bytes_text(y)} reserved ({y:,} bytes)")
            shape = (
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{colour}">'
                if ok
                else f'<path d="M{sx(x) - 4:.1f} {sy(y) - 4:.1f} l8 8 m0 -8 l-8 8" '
                f'stroke="var(--up)" stroke-width="2">'
            )
            out.append(f"{shape}<title>{tip}</title>{'</circle>' if ok else '</path>'}")
    out.append("</svg>")
    return '<div class="tablewrap">' + "".join(out) + "</div>"


def _series(points: list[PlanPoint], arg: str) -> list[tuple[float, int, bool]]:
    out = []
    for p in points:
        try:
            x = float(p["values"][arg])
        except (KeyError, ValueError):
            continue
        if p["error"] is None:
            out.append((x, p["peak_reserved_bytes"], not p["oom"]))
    return out


def fit_text(f: PlanFit) -> str:
    terms = [bytes_text(round(f["constant_bytes"]))]
    for arg, lin, quad in zip(f["args"], f["linear_bytes"], f["quadratic_bytes"], strict=True):
        terms += [f"{bytes_text(round(lin))} x {arg}", f"{bytes_text(round(quad))} x {arg}^2"]
    line = (
        f"Fit of peak reserved over {f['points']} points: {' + '.join(terms)} "
        f"(largest residual {bytes_text(round(f['max_residual_bytes']))})."
    )
    if f["largest_fitting"] is not None:
        line += f" The fit's largest fitting {f['args'][0]}: {f['largest_fitting']:g}."
    return line


def fit_section(r: PlanResult) -> str | None:
    """The chart for one numeric swept argument (the whole sweep, or one per group of a
    non-numeric one), the fits' terms, the predictions."""
    parts = []
    fit = r["fit"]
    if fit is not None and len(fit["args"]) == 1:
        arg = fit["args"][0]
        parts.append(chart([("", fit, _series(r["points"], arg))], arg, r["usable_bytes"]))
    groups = [g for g in r["groups"] if g["fit"] is not None and len(g["fit"]["args"]) == 1]
    if groups:
        arg = groups[0]["fit"]["args"][0]  # type: ignore[index]  # filtered just above
        series = []
        for g in groups:
            mine = [
                p for p in r["points"] if all(p["values"][k] == v for k, v in g["values"].items())
            ]
            series.append((values_text(g["values"]) + ", ", g["fit"], _series(mine, arg)))
        parts.append(chart(series, arg, r["usable_bytes"]))
        legend = ", ".join(
            f'<span style="color:{COLOURS[n % len(COLOURS)]}">&#9679;</span> {esc(s[0][:-2])}'
            for n, s in enumerate(series)
        )
        parts.append(f'<p class="note">{legend}</p>')
    if fit is not None:
        parts.append(note(fit_text(fit)))
    for g in r["groups"]:
        if g["fit"] is not None:
            parts.append(note(f"{values_text(g['values'])}: {fit_text(g['fit'])}"))
    if r["predictions"]:
        parts.append(
            table(
                ["predicted at", "peak reserved", "peak active", ""],
                [
                    [
                        values_text(p["values"]),
                        exact(p["peak_reserved_bytes"]),
                        exact(p["peak_active_bytes"]),
                        "extrapolated" if p["extrapolated"] else "",
                    ]
                    for p in r["predictions"]
                ],
                numeric=(1, 2),
            )
        )
    if not parts:
        return None
    return note(
        "Dots: simulated peak reserved (a cross: ran out of memory); line: the least-squares "
        "fit, dashed outside the swept range; red dashes: the usable memory."
    ) + "".join(parts)


def find_max_section(r: PlanResult) -> str | None:
    found = r["find_max"]
    if found is None:
        return None
    rows = [
        [p["values"][found["arg"]], exact(p["peak_reserved_bytes"]), fits_text(p)]
        for p in found["probes"]
    ]
    best = found["largest_fitting"]
    answer = f"{found['arg']}={best}" if best is not None else f"none (not even {found['lo']})"
    drawn = chart(
        [("", found["fit"], _series(found["probes"], found["arg"]))],
        found["arg"],
        r["usable_bytes"],
    )
    how = "interpolated replays, confirmed by simulation" if found["interpolated"] else "bisection"
    return (
        note(
            f"The largest {found['arg']} in [{found['lo']}, {found['hi']}] ({how}): {answer}, "
            f"{found['simulations']} simulations. Every probe (a cross: it does not fit) and "
            "the fit of peak reserved over them:"
        )
        + drawn
        + table([found["arg"], "peak reserved", "fits"], rows, numeric=(1,))
    )


def _saving(saved: int, pct: float | None) -> Cell:
    text = f'<span title="{saved:,} bytes">{fmt_bytes(saved)}</span>'
    return num(text + ("" if pct is None else f" ({pct:.1f}%)"))


def knob_section(r: PlanResult) -> str | None:
    t = r["knob_table"]
    if t is None:
        return None
    rows = []
    for n, k in enumerate(t["rows"], 1):
        detail = [esc(a) for a in k["applied"]]
        detail += [
            f"alone {esc(p['setting'])}: "
            + (
                f"failed ({esc(p['error'])})"
                if p["error"] is not None
                else f"saves {fmt_bytes(p['reserved_saving_bytes'])} reserved, "
                f"{fmt_bytes(p['active_saving_bytes'])} active"
            )
            for p in k["parts"]
        ]
        detail += [f"{fmt_delta(s['change'])} {site_code(s['site'])}" for s in k["sites"]]
        rows.append(
            [
                num(str(n)),
                Cell(f"<code>{esc(k['setting'])}</code>"),
                k["kind"],
                _saving(k["reserved_saving_bytes"], k["reserved_saving_pct"]),
                _saving(k["active_saving_bytes"], k["active_saving_pct"]),
                exact(k["peak_reserved_bytes"]),
                fits_text(k) + (f": {k['error']}" if k["error"] else ""),
                Cell("<br>".join(detail)),
            ]
        )
    head = note(
        f"At {values_text(t['values'])} (baseline {bytes_text(t['baseline_peak_reserved_bytes'])} "
        f"reserved, {bytes_text(t['baseline_peak_active_bytes'])} active), ranked by the peak "
        "reserved saved."
    )
    body = table(
        ["#", "what-if", "kind", "reserved saved", "active saved", "now reserved", "fits",
         "what it covered, alone, the call sites that moved"],
        rows,
        numeric=(0, 3, 4, 5),
    )  # fmt: skip
    per_point = table(
        ["what-if", "point", "peak reserved change", "peak active change", "now reserved", "fits"],
        [
            [w["setting"], values_text(p["values"]), num(fmt_delta(dr)), num(fmt_delta(da)),
             exact(p["peak_reserved_bytes"]), fits_text(p)]
            for w in r["what_ifs"]
            for p, da, dr in zip(w["points"], w["active_change_bytes"], w["reserved_change_bytes"],
                                 strict=True)
        ],
    )  # fmt: skip
    return head + body + "<h3>Every point</h3>" + per_point


# (id, heading, section): a section with nothing to show (no fit, no --what-if) is left out
PAGE: list[tuple[str, str, Callable[[PlanResult], str | None]]] = [
    ("overview", "Overview", overview), ("points", "Points", points_table),
    ("fit", "Fitted model", fit_section), ("find-max", "Largest fitting value", find_max_section),
    ("what-if", "What-ifs", knob_section),
]  # fmt: skip


def plan_report(result: PlanResult, title: str = "memlens plan") -> str:
    """The page, self-contained; its header names the script and the card."""
    source = f"{esc(result['script'])} &middot; {esc(result['gpu'])}"
    header = f'<h1>{esc(title)}</h1><div class="source">{source}</div>'
    return sectioned_page(title, header, PAGE, result)
