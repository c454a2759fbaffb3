"""Rendering a run directory: the HTML dashboard, PNG plots and one video per tensor.

Everything is built from the saved files alone (``store.load_run``), so the background
process and ``memlens inspect-report`` share this code. Every output is written to a
temporary name and renamed into place, so an interrupted render never leaves a broken file.

The dashboard is one self-contained HTML file: charts are inline SVG, images are inline
base64 PNG, and there is no external script, style sheet or font.
"""

from __future__ import annotations

import base64
import contextlib
import html
import importlib.util
import io
import math
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from memlens.inspector import store
from memlens.inspector.store import Run, TensorSeries

FRAME_W, FRAME_H = 320, 352
HEADER_H, HEAT_H = 24, 256
MAX_FRAMES = 300
MAX_POINTS = 400
MAX_COLUMNS = 400
COLORS = {
    "mean": "#1f77b4",
    "min": "#2ca02c",
    "max": "#d62728",
    "norm": "#9467bd",
    "frac_zeros": "#7f7f7f",
    "nan": "#e377c2",
    "inf": "#ff7f0e",
}


# -- colour and images ------------------------------------------------------------------------
_LUTS: dict[str, np.ndarray] = {}


def lut(name: str) -> np.ndarray:
    if name not in _LUTS:
        import matplotlib

        cmap = matplotlib.colormaps[name]
        _LUTS[name] = (cmap(np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)
    return _LUTS[name]


def colorize(a: np.ndarray, vmin: float, vmax: float, cmap: str) -> np.ndarray:
    """uint8 RGB image of a 2-D array; non-finite cells are drawn black."""
    a = np.asarray(a, dtype=np.float64)
    span = vmax - vmin if vmax > vmin else 1.0
    idx = np.clip(
        (np.nan_to_num(a, nan=vmin, posinf=vmax, neginf=vmin) - vmin) / span * 255, 0, 255
    )
    rgb = lut(cmap)[idx.astype(np.uint8)]
    rgb[~np.isfinite(a)] = 0
    return rgb


def heat_scale(arrays: list[np.ndarray]) -> tuple[float, float, str]:
    vals = np.concatenate([a[np.isfinite(a)].ravel() for a in arrays]) if arrays else np.zeros(0)
    if vals.size == 0:
        return 0.0, 1.0, "viridis"
    lo, hi = np.percentile(vals, [0.5, 99.5])
    if lo < 0 < hi:
        m = max(-lo, hi)
        return -m, m, "RdBu_r"
    return float(lo), float(hi if hi > lo else lo + 1), "viridis"


def png_bytes(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def data_uri(rgb: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")


def pick(n: int, limit: int) -> np.ndarray:
    return (
        np.arange(n) if n <= limit else np.unique(np.linspace(0, n - 1, limit).round().astype(int))
    )


def hist_over_time(s: TensorSeries, rows: int = 64) -> tuple[np.ndarray, float, float, np.ndarray]:
    """Histograms re-binned onto one value axis: (rows, samples) densities, lo, hi, columns."""
    cols = pick(len(s), MAX_COLUMNS)
    lo_all = np.nanmin(s.hist_lo[cols]) if np.isfinite(s.hist_lo[cols]).any() else 0.0
    hi_all = np.nanmax(s.hist_hi[cols]) if np.isfinite(s.hist_hi[cols]).any() else 1.0
    if not hi_all > lo_all:
        hi_all = lo_all + 1.0
    img = np.zeros((rows, len(cols)))
    for j, i in enumerate(cols):
        counts = s.hist[i].astype(np.float64)
        lo, hi = s.hist_lo[i], s.hist_hi[i]
        if not (math.isfinite(lo) and math.isfinite(hi)) or counts.sum() == 0:
            continue
        nb = counts.size
        centers = lo + (np.arange(nb) + 0.5) * ((hi - lo) / nb) if hi > lo else np.full(nb, lo)
        col, _ = np.histogram(centers, bins=rows, range=(lo_all, hi_all), weights=counts)
        img[:, j] = col / col.sum() if col.sum() else 0
    return np.log1p(img * 100)[::-1], float(lo_all), float(hi_all), cols


# -- SVG charts -------------------------------------------------------------------------------
def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    return f"{v:.3g}"


def svg_chart(
    x: np.ndarray,
    series: list[tuple[str, np.ndarray, str]],
    *,
    title: str,
    width: int = 300,
    height: int = 150,
    log: bool = False,
    band: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """A small line chart; NaN points break the line."""
    pad_l, pad_r, pad_t, pad_b = 58, 8, 18, 18
    idx = pick(len(x), MAX_POINTS)
    x = np.asarray(x, dtype=np.float64)[idx]
    ys = [(name, np.asarray(v, dtype=np.float64)[idx], c) for name, v, c in series]
    if band is not None:
        band = (
            np.asarray(band[0], dtype=np.float64)[idx],
            np.asarray(band[1], dtype=np.float64)[idx],
        )

    def tr(v: np.ndarray) -> np.ndarray:
        if not log:
            return v
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(v > 0, np.log10(np.where(v > 0, v, 1)), np.nan)

    allv = [tr(v) for _, v, _ in ys] + ([tr(band[0]), tr(band[1])] if band is not None else [])
    finite = np.concatenate([v[np.isfinite(v)] for v in allv]) if allv else np.zeros(0)
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{html.escape(title)}</title>',
        f'<text x="{pad_l}" y="12" class="ct">{html.escape(title)}</text>',
    ]
    if finite.size == 0 or len(x) == 0:
        out.append(f'<text x="{pad_l}" y="{height // 2}" class="ax">no finite values</text></svg>')
        return "".join(out)
    y0, y1 = float(finite.min()), float(finite.max())
    if y1 <= y0:
        y0, y1 = y0 - 0.5 * (abs(y0) or 1), y1 + 0.5 * (abs(y1) or 1)
    x0, x1 = float(x.min()), float(x.max())
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def px(v):
        return pad_l + (v - x0) / (x1 - x0) * pw

    def py(v):
        return pad_t + ph - (v - y0) / (y1 - y0) * ph

    lab = (lambda v: _fmt(10**v)) if log else _fmt
    out.append(
        f'<rect x="{pad_l}" y="{pad_t}" width="{pw}" height="{ph}" class="plot"/>'
        f'<text x="{pad_l - 3}" y="{pad_t + 8}" class="ax" text-anchor="end">{lab(y1)}</text>'
        f'<text x="{pad_l - 3}" y="{pad_t + ph}" class="ax" text-anchor="end">{lab(y0)}</text>'
        f'<text x="{pad_l}" y="{height - 4}" class="ax">step {int(x0)}</text>'
        f'<text x="{width - pad_r}" y="{height - 4}" class="ax" text-anchor="end">{int(x1)}</text>'
    )
    if band is not None:
        lo, hi = tr(band[0]), tr(band[1])
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            pts = [f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x[ok], hi[ok], strict=True)]
            pts += [
                f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x[ok][::-1], lo[ok][::-1], strict=True)
            ]
            out.append(f'<polygon points="{" ".join(pts)}" class="band"/>')
    for _name, v, color in ys:
        tv = tr(v)
        seg: list[str] = []
        segs: list[list[str]] = []
        for a, b in zip(x, tv, strict=True):
            if math.isfinite(b):
                seg.append(f"{px(a):.1f},{py(b):.1f}")
            elif seg:
                segs.append(seg)
                seg = []
        if seg:
            segs.append(seg)
        for sg in segs:
            if len(sg) == 1:
                cx, cy = sg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(
                    f'<polyline points="{" ".join(sg)}" fill="none" stroke="{color}" stroke-width="1.5"/>'
                )
    lx = pad_l + 4
    for name, _, color in ys:
        out.append(
            f'<text x="{lx}" y="{pad_t + 10}" class="lg" fill="{color}">{html.escape(name)}</text>'
        )
        lx += 7 * len(name) + 10
    out.append("</svg>")
    return "".join(out)


def svg_bars(items: list[tuple[str, float]], *, title: str, width: int = 640) -> str:
    row = 16
    height = 22 + row * max(len(items), 1)
    label_w = 260
    vmax = max((v for _, v in items), default=0) or 1
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{html.escape(title)}</title>'
        f'<text x="4" y="12" class="ct">{html.escape(title)}</text>'
    ]
    for i, (name, v) in enumerate(items):
        y = 20 + i * row
        w = (width - label_w - 90) * v / vmax
        short = name if len(name) <= 40 else "…" + name[-39:]
        out.append(
            f'<text x="{label_w - 4}" y="{y + 11}" class="ax" text-anchor="end">{html.escape(short)}</text>'
            f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" fill="#1f77b4"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 11}" class="ax">{fmt_bytes(v)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def fmt_bytes(n: float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# -- the dashboard ----------------------------------------------------------------------------
CSS = """
body{font:13px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:12px 20px}header h1{margin:0;font-size:18px}
header p{margin:4px 0 0;color:#cfd8dc}main{padding:12px 20px}
section{margin-bottom:20px}h2{font-size:15px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.card{background:#fff;border:1px solid #ddd;border-radius:4px;padding:8px 10px;margin:10px 0}
.card h3{margin:0 0 4px;font-size:14px;font-family:ui-monospace,monospace}
.card .meta{color:#666;margin-bottom:6px}.row{display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start}
.chart{background:#fff}.chart .plot{fill:#fcfcfc;stroke:#ccc}.chart .ax{font-size:10px;fill:#555}
.chart .ct{font-size:11px;font-weight:600;fill:#333}.chart .lg{font-size:10px}
.chart .band{fill:#1f77b4;fill-opacity:.15}
figure{margin:0}figcaption{font-size:11px;color:#555}img.px{image-rendering:pixelated;border:1px solid #ccc}
.alert{color:#b71c1c}.ok{color:#2e7d32}#filter{padding:4px 8px;width:320px}
.hidden{display:none}
"""

JS = """
(function(){var f=document.getElementById('filter');if(!f)return;
f.addEventListener('input',function(){var q=f.value.toLowerCase();
document.querySelectorAll('.card').forEach(function(c){
c.classList.toggle('hidden',q&&c.dataset.key.toLowerCase().indexOf(q)<0);});});})();
"""


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
        f"{len(s)} samples (steps {int(x[0])}–{int(x[-1])}) · last: mean {_fmt(st['mean'][last])}, "
        f"std {_fmt(st['std'][last])}, norm {_fmt(st['norm'][last])}, "
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
            f'src="{data_uri(rgb)}"><figcaption>histogram over steps; values {_fmt(lo)} … {_fmt(hi)} '
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
            f"({_fmt(vmin)} … {_fmt(vmax)})</figcaption></figure>"
        )
    parts.append("</div></div>")
    return "".join(parts)


def dashboard_html(run: Run) -> str:
    m = run.meta
    title = f"memlens inspect — {m.get('model', run.path.name)}"
    status = m.get("status", "unknown")
    dropped = m.get("dropped", 0) or 0
    head = (
        f"model {html.escape(str(m.get('model', '?')))} · status <b>{html.escape(str(status))}</b> · "
        f"started {html.escape(str(m.get('started', '?')))} · last step {m.get('last_step', '?')} · "
        f"{len(run.tensors)} tensors · {sum(len(s) for s in run.tensors.values())} samples · "
        f"dropped {dropped} · sampling every {m.get('every')} steps"
        + (f", at most {m.get('max_per_second')}/s" if m.get("max_per_second") else "")
    )
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<header><h1>{html.escape(title)}</h1><p>{head}</p></header><main>",
        '<section id="alerts"><h2>Alerts</h2>',
    ]
    if run.alerts:
        body.append(
            "<table><tr><th>step</th><th>alert</th><th>module</th><th>tensor</th><th>detail</th></tr>"
        )
        for a in run.alerts:
            body.append(
                f'<tr class="alert"><td class="n">{a.get("step")}</td><td>{html.escape(str(a.get("rule")))}</td>'
                f'<td>{html.escape(str(a.get("module")))}</td><td><a href="#t-{html.escape(store.tensor_dir_name(str(a.get("key"))))}">'
                f"{html.escape(str(a.get('key')))}</a></td><td>{html.escape(str(a.get('detail')))}</td></tr>"
            )
        body.append("</table>")
    else:
        body.append('<p class="ok">No alerts.</p>')
    body.append("</section>")
    body.append('<section id="memory"><h2>Activation bytes per module</h2>')
    if run.activation_bytes:
        last = run.activation_bytes[-1]
        items = sorted(last.get("modules", {}).items(), key=lambda kv: -kv[1])[:40]
        body.append(svg_bars(items, title=f"bytes of module outputs at step {last.get('step')}"))
        steps = np.array([r["step"] for r in run.activation_bytes], dtype=np.float64)
        totals = np.array(
            [sum(r.get("modules", {}).values()) for r in run.activation_bytes], dtype=np.float64
        )
        body.append(
            svg_chart(
                steps,
                [("total", totals, "#1f77b4")],
                title="total activation bytes per sampled step",
                width=640,
            )
        )
        body.append("<p>Also in <code>annotations.json</code> for memlens memory views.</p>")
    else:
        body.append("<p>No module outputs recorded.</p>")
    body.append("</section>")
    body.append('<section id="tensors"><h2>Tensors</h2>')
    body.append('<input id="filter" type="search" placeholder="filter by module or tensor name">')
    for key in sorted(run.tensors):
        body.append(_card(run.path, run.tensors[key]))
    body.append("</section></main>")
    body.append(f"<script>{JS}</script></body></html>")
    return "\n".join(body)


def write_dashboard(run: Run) -> Path:
    path = run.path / "dashboard.html"
    store.atomic_write_text(path, dashboard_html(run))
    return path


# -- PNG plots (matplotlib, Agg) --------------------------------------------------------------
def write_plots(run: Run) -> list[Path]:
    # A bare Figure renders with Agg on savefig and never touches pyplot or the user's
    # backend (this also runs inside notebooks, through memlens.inspector.render_run).
    from matplotlib.figure import Figure

    out_dir = run.path / "plots"
    out_dir.mkdir(exist_ok=True)
    fig = Figure(figsize=(10, 6), dpi=80)
    fig.subplots_adjust(left=0.07, right=0.97, bottom=0.07, top=0.9, hspace=0.3, wspace=0.2)
    written = []
    for key in sorted(run.tensors):
        s = run.tensors[key]
        fig.clf()
        axs = fig.subplots(2, 2)
        x, st = s.steps, s.stats
        ax = axs[0, 0]
        ax.fill_between(x, st["mean"] - st["std"], st["mean"] + st["std"], alpha=0.2, label="±std")
        ax.plot(x, st["mean"], label="mean")
        ax.plot(x, st["min"], label="min", lw=0.8)
        ax.plot(x, st["max"], label="max", lw=0.8)
        ax.set_title("value statistics", fontsize=9, y=1.0)
        ax.legend(fontsize=7)
        ax = axs[0, 1]
        ax.plot(x, st["norm"], color=COLORS["norm"])
        if np.isfinite(st["norm"]).any() and np.nanmin(st["norm"]) > 0:
            ax.set_yscale("log")
        ax.set_title("L2 norm", fontsize=9, y=1.0)
        ax = axs[1, 0]
        img, lo, hi, cols = hist_over_time(s)
        if img.size:
            c = x[cols]
            ax.imshow(
                img, aspect="auto", cmap="magma", extent=(c[0], c[-1] + (c[-1] == c[0]), lo, hi)
            )
        ax.set_title("histogram over steps", fontsize=9, y=1.0)
        ax = axs[1, 1]
        heats = s.heatmaps() if s.has_heatmaps else []
        if heats:
            step, hm = heats[-1]
            vmin, vmax, cmap = heat_scale([hm])
            im = ax.imshow(
                hm, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest", aspect="auto"
            )
            fig.colorbar(im, ax=ax)
            ax.set_title(f"heatmap at step {step}", fontsize=9, y=1.0)
        else:
            ax.plot(x, st["frac_zeros"], label="fraction zero")
            ax.plot(x, st["nan"], label="NaN")
            ax.plot(x, st["inf"], label="Inf")
            ax.legend(fontsize=7)
            ax.set_title("zeros, NaN, Inf", fontsize=9, y=1.0)
        for a in axs.flat:  # (explicit title y and few ticks: layout is most of the time)
            a.tick_params(labelsize=7)
            if a.get_yscale() == "linear":
                a.locator_params(axis="y", nbins=4)
            a.locator_params(axis="x", nbins=5)
        fig.suptitle(key, fontsize=10)
        path = out_dir / f"{s.dir.name}.png"
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
        written.append(path)
    return written


# -- videos -----------------------------------------------------------------------------------
def _text(draw, xy, text, fill=(20, 20, 20)) -> None:
    draw.text(xy, text, fill=fill)


def _hist_panel(
    draw, counts: np.ndarray, lo: float, hi: float, box: tuple[int, int, int, int]
) -> None:
    x0, y0, x1, y1 = box
    draw.rectangle(box, outline=(200, 200, 200))
    total = counts.max() if counts.size else 0
    if total > 0:
        n = counts.size
        w = (x1 - x0 - 2) / n
        for i, c in enumerate(counts):
            if c <= 0:
                continue
            h = (y1 - y0 - 14) * math.sqrt(c / total)
            draw.rectangle(
                (x0 + 1 + i * w, y1 - 12 - h, x0 + 1 + (i + 1) * w - 1, y1 - 12),
                fill=(31, 119, 180),
            )
    _text(draw, (x0 + 2, y1 - 11), _fmt(lo))
    _text(draw, (x1 - 6 * len(_fmt(hi)) - 2, y1 - 11), _fmt(hi))


def frames(s: TensorSeries, max_frames: int = MAX_FRAMES) -> Iterator[np.ndarray]:
    """One RGB frame (FRAME_H x FRAME_W) per sample: heatmap (if any) over the histogram."""
    from PIL import Image, ImageDraw

    heats = dict(s.heatmaps()) if s.has_heatmaps else {}
    vmin, vmax, cmap = heat_scale(list(heats.values()))
    for i in pick(len(s), max_frames):
        step = int(s.steps[i])
        im = Image.new("RGB", (FRAME_W, FRAME_H), (255, 255, 255))
        draw = ImageDraw.Draw(im)
        label = s.key if len(s.key) <= 40 else "…" + s.key[-39:]
        _text(draw, (4, 2), label)
        _text(draw, (4, 12), f"step {step}  norm {_fmt(s.stats['norm'][i])}")
        hm = heats.get(step)
        if hm is not None:
            rgb = Image.fromarray(colorize(hm, vmin, vmax, cmap))
            h, w = hm.shape
            k = min((FRAME_W - 8) / w, (HEAT_H - 4) / h)
            size = (max(1, int(w * k)), max(1, int(h * k)))
            rgb = rgb.resize(size, Image.NEAREST)
            im.paste(rgb, ((FRAME_W - size[0]) // 2, HEADER_H + (HEAT_H - size[1]) // 2))
            box = (4, HEADER_H + HEAT_H + 2, FRAME_W - 5, FRAME_H - 3)
        else:
            box = (4, HEADER_H + 2, FRAME_W - 5, FRAME_H - 3)
        _hist_panel(draw, s.hist[i], s.hist_lo[i], s.hist_hi[i], box)
        yield np.asarray(im)


def mp4_encoder() -> str | None:
    """What can write MP4 here: 'pyav', 'imageio-ffmpeg', 'ffmpeg' (the binary), or None."""
    if importlib.util.find_spec("av") is not None:
        return "pyav"
    if importlib.util.find_spec("imageio_ffmpeg") is not None:
        return "imageio-ffmpeg"
    if shutil.which("ffmpeg"):
        return "ffmpeg"
    return None


def _write_mp4(frame_iter: Iterator[np.ndarray], tmp: Path, fps: int, encoder: str) -> None:
    if encoder == "ffmpeg":
        cmd = [
            shutil.which("ffmpeg") or "ffmpeg",
            "-y",
            "-loglevel",
            "error",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-s",
            f"{FRAME_W}x{FRAME_H}",
            "-r",
            str(fps),
            "-i",
            "-",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+faststart",
            "-f",
            "mp4",
            str(tmp),
        ]
        # A session of its own: Ctrl-C in the terminal must not kill the encoder mid-file.
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            for f in frame_iter:
                proc.stdin.write(np.ascontiguousarray(f).tobytes())
            proc.stdin.close()
            err = proc.stderr.read()
            if proc.wait(timeout=120) != 0:
                raise RuntimeError(f"ffmpeg failed: {err.decode(errors='replace')[-400:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        return
    import imageio.v3 as iio

    plugin = "pyav" if encoder == "pyav" else "FFMPEG"
    kwargs = (
        {"codec": "libx264", "fps": fps} if plugin == "pyav" else {"fps": fps, "codec": "libx264"}
    )
    with iio.imopen(tmp, "w", plugin=plugin, extension=".mp4") as out:
        if plugin == "pyav":
            out.init_video_stream("libx264", fps=fps)
            for f in frame_iter:
                out.write_frame(f)
        else:
            out.write(list(frame_iter), **kwargs)


def _write_gif(frame_iter: Iterator[np.ndarray], tmp: Path, fps: int) -> None:
    from PIL import Image

    imgs = [
        Image.fromarray(f).quantize(colors=255, method=Image.Quantize.MEDIANCUT) for f in frame_iter
    ]
    if not imgs:
        raise ValueError("no frames")
    imgs[0].save(
        tmp, format="GIF", save_all=True, append_images=imgs[1:], duration=int(1000 / fps), loop=0
    )


def write_video(
    s: TensorSeries, out_dir: Path, *, video_format: str = "auto", fps: int = 8
) -> Path:
    """Write one tensor's video; MP4 when an encoder is available (or asked for), else GIF."""
    out_dir.mkdir(exist_ok=True)
    encoder = mp4_encoder() if video_format in ("auto", "mp4") else None
    if video_format == "mp4" and encoder is None:
        raise RuntimeError("no MP4 encoder (install 'av' or 'imageio-ffmpeg', or ffmpeg)")
    name = s.dir.name
    if encoder is not None:
        path = out_dir / f"{name}.mp4"
        tmp = path.with_name(f".{path.name}.tmp.mp4")
        try:
            _write_mp4(frames(s), tmp, fps, encoder)
            os.replace(tmp, path)
            with contextlib.suppress(FileNotFoundError):
                (out_dir / f"{name}.gif").unlink()
            return path
        except Exception:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            if video_format == "mp4":
                raise
    path = out_dir / f"{name}.gif"
    tmp = path.with_name(f".{path.name}.tmp.gif")
    try:
        _write_gif(frames(s), tmp, fps)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path


def write_annotations(run: Run) -> Path | None:
    if not run.activation_bytes:
        return None
    path = run.path / "annotations.json"
    store.atomic_write_json(path, store.annotations_document(run.activation_bytes, run.meta))
    return path


def render_run(
    root: str | os.PathLike,
    *,
    videos: bool = True,
    plots: bool = True,
    video_format: str = "auto",
    fps: int = 8,
) -> dict:
    """Rebuild everything from the saved files. Returns what was written."""
    t0 = time.monotonic()
    run = store.load_run(root)
    result: dict = {"dashboard": None, "plots": [], "videos": [], "annotations": None}
    result["annotations"] = write_annotations(run)
    result["dashboard"] = write_dashboard(run)
    if plots:
        result["plots"] = write_plots(run)
    if videos:
        for key in sorted(run.tensors):
            result["videos"].append(
                write_video(
                    run.tensors[key], run.path / "videos", video_format=video_format, fps=fps
                )
            )
    if plots or videos:  # again, now with links to the files just made
        result["dashboard"] = write_dashboard(run)
    result["seconds"] = time.monotonic() - t0
    return result
