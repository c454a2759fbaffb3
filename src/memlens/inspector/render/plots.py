"""PNG plots, one per tensor (matplotlib, Agg): statistics, norm, histogram and heatmap."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from memlens.inspector.render.colors import COLORS, heat_scale, hist_over_time
from memlens.inspector.store import Run


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
