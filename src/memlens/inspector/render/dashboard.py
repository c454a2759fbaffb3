"""The dashboard: one self-contained HTML file per run (inline SVG and PNG, no network).

The page skeleton, its CSS and its script are package data in ``templates/`` (read with
importlib.resources, as the report's are); this module fills in the run's figures.
"""

from __future__ import annotations

import functools
import html
import string
from importlib import resources
from pathlib import Path

import numpy as np

from memlens.inspector import store
from memlens.inspector.render.colors import COLORS, colorize, data_uri, heat_scale, hist_over_time
from memlens.inspector.render.svg import fmt_value, svg_bars, svg_chart
from memlens.inspector.store import Run, TensorSeries


@functools.cache
def template(name: str) -> str:
    """A file from templates/ (page skeleton, CSS, script), read once."""
    return (resources.files("memlens.inspector.render") / "templates" / name).read_text("utf-8")


def _media_links(root: Path, s: TensorSeries) -> str:
    name = s.dir.name
    links = []
    png = root / "plots" / f"{name}.png"
    if png.exists():
        links.append(f'<a href="plots/{html.escape(name)}.png">PNG plot</a>')
    for ext in ("mp4", "gif"):
        if (root / "videos" / f"{name}.{ext}").exists():
            links.append(f'<a href="videos/{html.escape(name)}.{ext}">video ({ext.upper()})</a>')
    return " · ".join(links)


def _card(root: Path, s: TensorSeries) -> str:
    x = s.steps
    st = s.stats
    last = -1
    parts = [
        f'<div class="card" data-key="{html.escape(s.key)}" id="t-{html.escape(s.dir.name)}">',
        f"<h3>{html.escape(s.key)}</h3>",
        f'<div class="meta">shape {html.escape(str(tuple(s.shapes[last])))} · {html.escape(s.dtypes[last])} · '
        f"{len(s)} samples (steps {int(x[0])}–{int(x[-1])}) · last: mean {fmt_value(st['mean'][last])}, "
        f"std {fmt_value(st['std'][last])}, norm {fmt_value(st['norm'][last])}, "
        f"zeros {100 * st['frac_zeros'][last]:.1f}%, NaN {int(st['nan'][last])}, Inf {int(st['inf'][last])}"
        f" {_media_links(root, s)}</div>",
        '<div class="row">',
        svg_chart(
            x,
            [
                ("mean", st["mean"], COLORS["mean"]),
                ("min", st["min"], COLORS["min"]),
                ("max", st["max"], COLORS["max"]),
            ],
            title="mean ± std, min, max",
            band=(st["mean"] - st["std"], st["mean"] + st["std"]),
        ),
        svg_chart(
            x,
            [("norm", st["norm"], COLORS["norm"])],
            title="L2 norm (log)",
            log=bool(np.nanmin(st["norm"]) > 0) if np.isfinite(st["norm"]).any() else False,
        ),
        svg_chart(
            x,
            [
                ("zeros", st["frac_zeros"], COLORS["frac_zeros"]),
                ("NaN", st["nan"], COLORS["nan"]),
                ("Inf", st["inf"], COLORS["inf"]),
            ],
            title="fraction zero; NaN, Inf counts",
        ),
    ]
    img, lo, hi, _ = hist_over_time(s)
    if img.size:
        rgb = colorize(img, 0.0, float(img.max()) or 1.0, "magma")
        parts.append(
            f'<figure><img class="px" alt="histogram over time" width="300" height="128" '
            f'src="{data_uri(rgb)}"><figcaption>histogram over steps; values {fmt_value(lo)} … {fmt_value(hi)} '
            "(bottom to top)</figcaption></figure>"
        )
    heats = s.heatmaps() if s.has_heatmaps else []
    if heats:
        step, hm = heats[-1]
        vmin, vmax, cmap = heat_scale([hm])
        rgb = colorize(hm, vmin, vmax, cmap)
        scale = max(1, 128 // max(hm.shape))
        parts.append(
            f'<figure><img class="px" alt="heatmap" width="{hm.shape[1] * scale}" '
            f'height="{hm.shape[0] * scale}" src="{data_uri(rgb)}"><figcaption>heatmap at step {step} '
            f"({fmt_value(vmin)} … {fmt_value(vmax)})</figcaption></figure>"
        )
    parts.append("</div></div>")
    return "".join(parts)


def _alerts_html(run: Run) -> list[str]:
    if not run.alerts:
        return ['<p class="ok">No alerts.</p>']
    rows = [
        "<table><tr><th>step</th><th>alert</th><th>module</th><th>tensor</th><th>detail</th></tr>"
    ]
    for a in run.alerts:
        key = str(a.get("key"))
        rows.append(
            f'<tr class="alert"><td class="n">{a.get("step")}</td><td>{html.escape(str(a.get("rule")))}</td>'
            f'<td>{html.escape(str(a.get("module")))}</td><td><a href="#t-{html.escape(store.tensor_dir_name(key))}">'
            f"{html.escape(key)}</a></td><td>{html.escape(str(a.get('detail')))}</td></tr>"
        )
    rows.append("</table>")
    return rows


def _memory_html(run: Run) -> list[str]:
    if not run.activation_bytes:
        return ["<p>No module outputs recorded.</p>"]
    last = run.activation_bytes[-1]
    items = sorted(last.get("modules", {}).items(), key=lambda kv: -kv[1])[:40]
    steps = np.array([r["step"] for r in run.activation_bytes], dtype=np.float64)
    totals = np.array(
        [sum(r.get("modules", {}).values()) for r in run.activation_bytes], dtype=np.float64
    )
    return [
        svg_bars(items, title=f"bytes of module outputs at step {last.get('step')}"),
        svg_chart(
            steps,
            [("total", totals, COLORS["mean"])],
            title="total activation bytes per sampled step",
            width=640,
        ),
        "<p>Also in <code>annotations.json</code> for memlens memory views.</p>",
    ]


def dashboard_html(run: Run) -> str:
    m = run.meta
    title = html.escape(f"memlens inspect — {m.get('model', run.path.name)}")
    status = m.get("status", "unknown")
    dropped = m.get("dropped", 0) or 0
    head = (
        f"model {html.escape(str(m.get('model', '?')))} · status <b>{html.escape(str(status))}</b> · "
        f"started {html.escape(str(m.get('started', '?')))} · last step {m.get('last_step', '?')} · "
        f"{len(run.tensors)} tensors · {sum(len(s) for s in run.tensors.values())} samples · "
        f"dropped {dropped} · sampling every {m.get('every')} steps"
        + (f", at most {m.get('max_per_second')}/s" if m.get("max_per_second") else "")
    )
    page = string.Template(template("dashboard.html").removesuffix("\n"))
    return page.substitute(
        title=title,
        head=head,
        css=template("dashboard.css"),
        js=template("dashboard.js"),
        alerts="\n".join(_alerts_html(run)),
        memory="\n".join(_memory_html(run)),
        cards="".join(_card(run.path, run.tensors[key]) + "\n" for key in sorted(run.tensors)),
    )


def write_dashboard(run: Run) -> Path:
    path = run.path / "dashboard.html"
    store.atomic_write_text(path, dashboard_html(run))
    return path
