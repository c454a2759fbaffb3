"""Assemble the report: run each section under a guard, then render one HTML document."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from memlens.snapshot.model import Snapshot
from memlens.views.report.context import ReportContext, Section, guarded
from memlens.views.report.page import esc, render_page
from memlens.views.report.sections import devices, overview, settings, timeline

# the page, in order: each id is a report-only section (these) or the section an analysis
# declares (memlens.analysis.registry); a registered section not named here goes before
# the allocator settings
PAGE = [
    "overview",
    "diff",
    "devices",
    "timeline",
    "peak",
    "advise",
    "stages",
    "categories",
    "rules",
    "leaks",
    "oom",
    "anomalies",
    "allocator",
    "settings",
]
REPORT_ONLY = [overview.SECTION, devices.SECTION, timeline.SECTION, settings.SECTION]


def sections() -> list[Section]:
    """Every section of the page, in page order."""
    from memlens.analysis import registry

    found = {s.id: s for s in REPORT_ONLY}
    for analysis in registry.all():
        section = analysis.report_section
        if section is not None:
            found[section.id] = section
    ordered = [found.pop(i) for i in PAGE if i in found]
    return [*ordered[:-1], *found.values(), ordered[-1]]


def _wanted(section: Section, ctx: ReportContext) -> bool:
    try:
        return bool(section.when(ctx))
    except Exception as exc:  # a broken predicate leaves its section out, and is reported
        ctx.problems.append(f"{section.title}: {type(exc).__name__}: {exc}")
        return False


def run_section(section: Section, ctx: ReportContext) -> str | None:
    """The section's HTML; a note instead when it is unavailable or fails (never raises)."""
    return guarded(ctx, section.title, section.fn)


def build_report(
    snap: Snapshot,
    snap2: Snapshot | None = None,
    *,
    device: int | None = None,
    rules_path: str | None = None,
    hide_patterns: Sequence[str] | None = None,
    names: tuple[str, str | None] | None = None,
) -> tuple[str, list[str]]:
    """The report as one HTML string, and the problems met (sections that failed).

    `names` are how A and B are called in the page (default: their Snapshot.source).
    """
    dev = snap.device(device)
    dev2 = None
    if snap2 is not None:
        dev2 = snap2.device(device if device is not None and device in snap2.traces else None)
    a_name = names[0] if names and names[0] else snap.source
    b_name = names[1] if names and names[1] else (snap2.source if snap2 is not None else "")
    ctx = ReportContext(snap, dev, hide_patterns, rules_path, snap2, dev2, names=(a_name, b_name))
    parts, nav = [], []
    for section in sections():
        if not _wanted(section, ctx):
            continue
        body = run_section(section, ctx)
        if body is None:
            continue
        # with two snapshots, say which one a section describes (all but the diff: A)
        heading = section.title + (" (A)" if dev2 is not None and section.id != "diff" else "")
        nav.append((section.id, heading))
        parts.append(f'<section id="{esc(section.id)}"><h2>{esc(heading)}</h2>{body}</section>')
    title = f"memlens report: {Path(a_name).name}" + (
        f" vs {Path(b_name).name}" if snap2 is not None else ""
    )
    header = (
        f'<h1>{esc(title)}</h1><div class="source">{"A: " if dev2 is not None else ""}'
        f"{esc(a_name)} &middot; device {dev.device}"
    )
    if dev2 is not None:
        header += f" &nbsp;|&nbsp; B: {esc(b_name)} &middot; device {dev2.device}"
    header += "</div>"
    html_text = render_page(
        title=title, header_html=header, nav=nav, body_html="".join(parts), data=ctx.data
    )
    return html_text, ctx.problems


def write_report(
    snapshot_path: str | Path,
    html_path: str | Path | None = None,
    *,
    device: int | None = None,
    snapshot2: str | Path | None = None,
    rules_path: str | Path | None = None,
    hide_patterns: Sequence[str] | None = None,
    cache: bool = True,
) -> Path:
    """Write the self-contained HTML report of `snapshot_path` (and the diff against
    `snapshot2` when given) to `html_path` (default: the snapshot's path with .html).

    Returns the path written. Sections that cannot be built show a short note instead.
    """
    from memlens.snapshot.loader import load

    snapshot_path = Path(snapshot_path)
    out = Path(html_path) if html_path is not None else default_output(snapshot_path)
    snap = load(str(snapshot_path), cache=cache)
    snap2 = load(str(snapshot2), cache=cache) if snapshot2 is not None else None
    text, _ = build_report(
        snap,
        snap2,
        device=device,
        rules_path=str(rules_path) if rules_path else None,
        hide_patterns=hide_patterns,
    )
    out.write_text(text, encoding="utf-8")
    return out


def default_output(snapshot_path: str | Path) -> Path:
    """SNAP.pickle -> SNAP.html (beside the snapshot); a .gz suffix is dropped too."""
    p = Path(snapshot_path)
    if p.suffix == ".gz":
        p = p.with_suffix("")
    return p.with_suffix(".html")
