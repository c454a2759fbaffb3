"""Timeline: active and reserved memory over the trace, the largest allocations as
bands, and the annotated stages."""

from __future__ import annotations

from memlens.analysis.stages import stage_ranges
from memlens.snapshot.model import DeviceTrace
from memlens.views.report.bands import AllocationBands, allocation_bands
from memlens.views.report.context import ReportContext, Section, SectionUnavailable
from memlens.views.report.page import note
from memlens.views.report.timeline import GEOMETRY, StageBand, downsample, make_scale, timeline_svg


def stage_bands(dev: DeviceTrace) -> list[StageBand]:
    """Annotation stages as event ranges, from the stages analysis.

    Only the two outermost levels are drawn, at most MAX_STAGE_BANDS of them (a compiled
    model can have thousands of nested regions; they are all in the stages table)."""
    bands = [
        StageBand(int(f), int(last), str(label), int(depth))
        for f, last, label, depth in stage_ranges(dev)
        if int(depth) < 2
    ]
    return bands[:MAX_STAGE_BANDS]


MAX_STAGE_BANDS = 400


def timeline_section(ctx: ReportContext, *, key: str = "a") -> str:
    dev = ctx.dev if key == "a" else ctx.dev2
    if dev is None or dev.n_events == 0:
        raise SectionUnavailable("this device has no trace entries: there is no timeline to draw")
    curves = downsample(dev)
    scale = make_scale(curves)
    stages: list[StageBand] = []
    try:
        stages = stage_bands(dev)
    except Exception as exc:  # a broken stage analysis must not take the timeline with it
        ctx.problems.append(f"timeline stage bands: {type(exc).__name__}: {exc}")
    bands = AllocationBands("", [], [])
    try:
        bands = allocation_bands(dev, scale, ctx.hide_patterns)
    except Exception as exc:  # nor a broken layout: the curves are drawn anyway
        ctx.problems.append(f"timeline allocation bands: {type(exc).__name__}: {exc}")
    svg_id = f"timeline-{key}"
    ctx.data.setdefault("timelines", []).append(
        {
            "svg": svg_id,
            "curves": curves.to_json(),
            "stages": [[b.first, b.last, b.label] for b in stages],
            "bands": bands.info,
            "bandSites": bands.sites,
        }
    )
    ctx.data["geometry"] = GEOMETRY
    legend = (
        '<div class="legend"><span><i class="l-active"></i>active (max per column)</span>'
        '<span><i class="l-active-min"></i>active (min per column)</span>'
        + ('<span><i class="l-bands"></i>largest allocations</span>' if bands.info else "")
        + '<span><i class="l-reserved"></i>reserved</span><span><i class="l-peak"></i>peak</span>'
        + ('<span><i class="l-stage"></i>annotated stage</span>' if stages else "")
        + "</div>"
    )
    binned = (
        ""
        if len(curves.start) == dev.n_events
        else f" Each column summarizes about {dev.n_events // len(curves.start):,} events."
    )
    svg = timeline_svg(curves, stages, svg_id=svg_id, scale=scale, allocation_bands=bands.svg)
    return (
        legend
        + svg
        + note(
            f"x: event index (0 to {dev.n_events - 1:,}); y: bytes.{binned} Hover for values; hover a band for its allocation."
        )
    )


SECTION = Section("timeline", "Timeline", timeline_section)
