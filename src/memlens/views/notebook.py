"""A snapshot as static HTML for a notebook cell (`Snapshot._repr_html_`).

What a saved notebook keeps and GitHub renders: the headline figures, the largest call
sites at the peak and the timeline as inline SVG drawn by the report's code
(views/report/timeline.py). No script, no stylesheet, no external resource: the report's
CSS classes are turned into SVG presentation attributes here, because a notebook viewer
drops <style> and the page's CSS never reaches the cell. Every string that comes from the
snapshot (paths, call sites, warnings) is HTML-escaped.
"""

from __future__ import annotations

import re

from memlens.analysis.devices import traced_devices
from memlens.analysis.results import DeviceSummary
from memlens.analysis.summary import device_summary
from memlens.snapshot.model import DeviceTrace, Snapshot
from memlens.units import format_bytes
from memlens.views.report.page import esc
from memlens.views.report.sections.timeline import stage_bands
from memlens.views.report.timeline import downsample, timeline_svg

BINS = 600  # columns of the picture: enough for a cell, small in a saved notebook
MAX_DEVICES = 4  # devices drawn; the others are listed
TOP_SITES = 5
MUTED = "#6b7580"  # readable on light and dark notebook themes

# report.css's rules for the timeline, as SVG attributes (light theme colours)
_STYLE = {
    "reserved-max": 'fill="#f0a23b" fill-opacity=".35" stroke="#f0a23b" stroke-width=".8"',
    "active-max": 'fill="#2f6fd0" fill-opacity=".55" stroke="none"',
    "active-min": 'fill="none" stroke="#1d4f9e" stroke-width=".9"',
    "grid": 'stroke="#d8dde2" stroke-width=".6"',
    "xtick": f'stroke="{MUTED}" stroke-width=".6"',
    "ylab": f'fill="{MUTED}" font-size="11" font-family="sans-serif" text-anchor="end"',
    "xlab": f'fill="{MUTED}" font-size="11" font-family="sans-serif" text-anchor="middle"',
    "peak": 'stroke="#c0392b" stroke-width="1.2" stroke-dasharray="4 3"',
    "stage-tick": 'fill="#2f6fd0" fill-opacity=".35"',
    "stage-band d0": 'fill="#7850c8" fill-opacity=".10"',
    "stage-band d1": 'fill="#1ea078" fill-opacity=".10"',
    "stage-band d2": 'fill="#c87828" fill-opacity=".10"',
    "stage-band d3": 'fill="#2878c8" fill-opacity=".10"',
}
_CLASS = re.compile(r'class="([^"]*)"')
# the viewer page's interactive layers: nothing to hover in a static picture
_END_LABEL = re.compile(r'text-anchor="middle"([^>]*) style="text-anchor:end"')
_INTERACTIVE = re.compile(r'<(?:line|rect) class="(?:cursor|timeline-hit)"[^>]*/>')


def _inline_styles(svg: str) -> str:
    def attrs(m: re.Match[str]) -> str:
        cls = m.group(1)
        style = _STYLE.get(cls) or _STYLE.get(cls.split(" ")[0], "")
        if cls.startswith("stage-tick"):
            style = _STYLE["stage-tick"]
        return f"{m.group(0)} {style}" if style else m.group(0)

    svg = _CLASS.sub(attrs, _INTERACTIVE.sub("", svg))
    # the last x label is end-anchored by a style attribute, which sanitizers may drop
    svg = _END_LABEL.sub(r'text-anchor="end"\1', svg)
    return svg.replace('<svg class="timeline"', '<svg class="timeline" width="100%"', 1)


def timeline_picture(dev: DeviceTrace) -> str:
    """The report's timeline of `dev` (curves, peak, stage bands) as self-styled SVG."""
    if dev.n_events == 0:
        return ""
    try:
        stages = stage_bands(dev)
    except Exception:  # a broken stage analysis must not hide the curves
        stages = []
    svg = timeline_svg(downsample(dev, BINS), stages, svg_id=f"memlens-timeline-{dev.device}")
    return _inline_styles(svg)


_CELL = 'style="padding:2px 10px 2px 0;text-align:left"'
_NUM = 'style="padding:2px 10px 2px 0;text-align:right;font-variant-numeric:tabular-nums"'


def _figures(s: DeviceSummary) -> str:
    span = f"{s['duration_s']:.3f} s" if s["duration_s"] is not None else "untimed"
    rows = [
        ("peak active", format_bytes(s["peak_active_bytes"]),
         f"after event {s['peak_event_index']:,}" if s["peak_event_index"] >= 0 else "before the first event"),
        ("peak reserved", format_bytes(s["peak_reserved_bytes"]), ""),
        ("baseline", format_bytes(s["baseline_bytes"]), "alive before the first event"),
        ("end active", format_bytes(s["end_active_bytes"]), "alive after the last event"),
        ("trace entries", f"{s['trace_entries']:,}", span),
        ("allocations", f"{s['allocations']:,}", f"{s['live_at_peak']:,} live at the peak"),
    ]  # fmt: skip
    body = "".join(
        f"<tr><td {_CELL}>{esc(k)}</td><td {_NUM}><b>{esc(v)}</b></td>"
        f'<td {_CELL}><span style="color:{MUTED}">{esc(note)}</span></td></tr>'
        for k, v, note in rows
    )
    return f'<table style="border-collapse:collapse;margin:4px 0">{body}</table>'


def _sites(s: DeviceSummary) -> str:
    sites = s["top_sites"][:TOP_SITES]
    if not sites:
        return ""
    body = "".join(
        f"<tr><td {_NUM}>{esc(format_bytes(x['bytes']))}</td><td {_NUM}>{x['count']:,}</td>"
        f"<td {_CELL}><code>{esc(x['site'])}</code></td></tr>"
        for x in sites
    )
    head = (
        f"<tr><th {_NUM}>bytes</th><th {_NUM}>count</th><th {_CELL}>call site at the peak</th></tr>"
    )
    return f'<table style="border-collapse:collapse;margin:4px 0">{head}{body}</table>'


def device_html(dev: DeviceTrace, *, heading: bool = True) -> str:
    """One device: figures, timeline, largest call sites at the peak."""
    s = device_summary(dev, top=TOP_SITES)
    title = (
        f'<div style="font-weight:600;margin-top:6px">device {dev.device}</div>' if heading else ""
    )
    legend = (
        f'<div style="color:{MUTED};font-size:12px">blue: active bytes (max and min per '
        "column), orange: reserved, dashed red: the peak; shaded: annotated stages</div>"
    )
    picture = timeline_picture(dev)
    return title + _oom(s) + _figures(s) + (legend + picture if picture else "") + _sites(s)


def _oom(s: DeviceSummary) -> str:
    """The out-of-memory error first: it is why this snapshot was written, most often."""
    ooms = s["ooms"]
    if not ooms:
        return ""
    o = ooms[0]
    more = f" ({len(ooms)} OOMs; the first shown)" if len(ooms) > 1 else ""
    text = (
        f"out of memory at event {o['event']:,}: asked for "
        f"{format_bytes(o['requested_bytes'])} with {format_bytes(o['device_free_bytes'])} "
        f"free on the device{more}; memlens oom explains it"
    )
    return f'<div style="color:#c0392b;font-weight:600;margin:4px 0">{esc(text)}</div>'


def snapshot_html(snap: Snapshot) -> str:
    """The whole snapshot: source, notes, then each device (the longest trace first)."""
    devices = traced_devices(snap)
    if snap.traces:
        first = snap.default_device
        devices = [first] + [d for d in devices if d != first]
    parts = [
        '<div class="memlens-snapshot" style="font-family:sans-serif;font-size:13px">',
        f"<div><b>memlens snapshot</b> <code>{esc(snap.source)}</code> "
        f'<span style="color:{MUTED}">{len(devices)} device(s)</span></div>',
    ]
    for text in [*snap.format_notes, *snap.warnings]:
        parts.append(f'<div style="color:{MUTED}">note: {esc(text)}</div>')
    for d in devices[:MAX_DEVICES]:
        parts.append(device_html(snap.traces[d], heading=len(devices) > 1))
    if len(devices) > MAX_DEVICES:
        rest = ", ".join(map(str, devices[MAX_DEVICES:]))
        parts.append(
            f'<div style="color:{MUTED}">not drawn: devices {esc(rest)} (snap.device(N))</div>'
        )
    parts.append(
        f'<div style="color:{MUTED};font-size:12px">interactive: '
        "<code>import memlens.notebook; memlens.notebook.view(snap)</code></div></div>"
    )
    return "".join(parts)
