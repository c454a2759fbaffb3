// @ts-check
// Drawing a pane: the viewport's bands rendered once to an offscreen canvas, then the
// chart (that image under the current range, highlights, peak and OOM markers, cursor),
// its axes, the stage strip and the overview. Functions of a Pane (pane.js).
import { col, context2d, dpr } from "../dom.js";
import { fmtBytes, fmtEventCount, fmtTick } from "../format.js";
import { state } from "../state.js";
import { siteColor } from "./colour.js";
import { hexRgb, rasterBands } from "./raster.js";

const PREEXISTING = 1; // a band's flag (snapshot/model.py): allocated before the trace
import { lowerBound, ML, MR, MT, xTickStep, yTicks } from "./geometry.js";

// diagonal hatches, one 6x6 tile per colour pair and theme: the aggregate band's ("/", in
// --small) and the ghosts' ("\\", in --ghost: allocations made before the trace began or
// whose entries the ring buffer dropped, known only from the final segments or their free)
const TILE = 6;
/** @type {Map<string, HTMLCanvasElement>} */
const tiles = new Map();
/** @type {Map<string, Uint8ClampedArray>} */
const tilePixels = new Map();
/**
 * @param {string} fill  CSS variable of the ground
 * @param {string} line  CSS variable of the hatch
 * @param {boolean} mirror  "\\" instead of "/"
 */
function hatchTile(fill, line, mirror) {
  const key = `${fill} ${line} ${mirror}`;
  let tile = tiles.get(key);
  if (!tile) {
    tile = document.createElement("canvas");
    tile.width = tile.height = TILE;
    const t = context2d(tile);
    t.fillStyle = col(fill);
    t.fillRect(0, 0, TILE, TILE);
    if (mirror) t.setTransform(-1, 0, 0, 1, TILE, 0);
    t.strokeStyle = col(line);
    t.lineWidth = 1.5;
    t.beginPath();
    t.moveTo(-1, 7);
    t.lineTo(7, -1);
    t.moveTo(-1, 1);
    t.lineTo(1, -1);
    t.moveTo(5, 7);
    t.lineTo(7, 5);
    t.stroke();
    tiles.set(key, tile);
  }
  return tile;
}
/**
 * @param {CanvasRenderingContext2D} ctx
 * @param {string} fill
 * @param {string} line
 * @param {boolean} mirror
 */
function hatch(ctx, fill, line, mirror) {
  return ctx.createPattern(hatchTile(fill, line, mirror), "repeat") || col(fill); // (null: a 0-size tile)
}
/** A hatch tile's RGBA pixels, for bands drawn as pixels (raster.js)
 * @param {string} fill
 * @param {string} line
 * @param {boolean} mirror
 */
function hatchPixels(fill, line, mirror) {
  const key = `${fill} ${line} ${mirror}`;
  let px = tilePixels.get(key);
  if (!px) {
    px = context2d(hatchTile(fill, line, mirror)).getImageData(0, 0, TILE, TILE).data;
    tilePixels.set(key, px);
  }
  return px;
}
/** @param {CanvasRenderingContext2D} ctx */
const smallPattern = (ctx) => hatch(ctx, "--small", "--small-hatch", false);
// the theme changed: draw the hatches again in its colours
export function forgetPatterns() {
  tiles.clear();
  tilePixels.clear();
}

// The polygon of band k: bottom edge along its runs, then the top edge back, added to
// `path` (a Path2D of many bands: one new Path2D per band and its copy into its colour's
// path took a quarter of the first paint's drawing at 10,000 bands). Closed by a line
// back to its first point, not closePath(), which takes time in the number of points
// already in the path (Chromium's Skia): quadratic in the bands of one colour
/**
 * @param {Path2D} path
 * @param {import("../types.js").ChartAnswer} v
 * @param {number} k
 * @param {(bytes: number) => number} y
 * @param {(c: number) => number} colX
 */
export function traceBand(path, v, k, y, colX) {
  const b = v.bands,
    size = b.size[k],
    r0 = b.run_start[k],
    r1 = b.run_start[k + 1],
    c1 = b.c1[k];
  if (r1 === r0 + 1) {
    // one run (most bands): a rectangle, one call instead of five (the first paint makes
    // tens of thousands of these calls before the JIT has warmed up)
    const x0 = colX(b.run_col[r0]),
      top = y(b.run_off[r0] + size);
    path.rect(x0, top, colX(c1) - x0, y(b.run_off[r0]) - top);
    return;
  }
  for (let i = r0; i < r1; i++) {
    const cs = b.run_col[i],
      ce = i + 1 < r1 ? b.run_col[i + 1] : c1,
      yy = y(b.run_off[i]);
    if (i === r0) path.moveTo(colX(cs), yy);
    else path.lineTo(colX(cs), yy);
    path.lineTo(colX(ce), yy);
  }
  for (let i = r1 - 1; i >= r0; i--) {
    const cs = b.run_col[i],
      ce = i + 1 < r1 ? b.run_col[i + 1] : c1,
      yy = y(b.run_off[i] + size);
    path.lineTo(colX(ce), yy);
    path.lineTo(colX(cs), yy);
  }
  if (r1 > r0) path.lineTo(colX(b.run_col[r0]), y(b.run_off[r0]));
}

// band k's polygon alone
/**
 * @param {import("../types.js").ChartAnswer} v
 * @param {number} k
 * @param {(bytes: number) => number} y
 * @param {(c: number) => number} colX
 */
export function bandPath(v, k, y, colX) {
  const path = new Path2D();
  traceBand(path, v, k, y, colX);
  return path;
}

/** @param {import("./pane.js").Pane} p */
export function renderOff(p) {
  const v = p.view;
  if (!v) return; // (called once a view is in)
  const W = v.width,
    H = p.plotH,
    r = dpr();
  const off = p.off;
  off.width = Math.round(W * r);
  off.height = Math.round(H * r);
  const ctx = context2d(off);
  ctx.setTransform(r, 0, 0, r, 0, 0);
  const y = (/** @type {number} */ bytes) => H - ((bytes - v.ymin) / (v.ymax - v.ymin)) * H;
  const colX = (/** @type {number} */ c) => c;
  const b = v.bands,
    pxPerByte = H / (v.ymax - v.ymin);
  // the bands as pixels (raster.js): each call site's flat colour, the ghosts' hatch
  const rgb = new Map();
  /** @type {import("./raster.js").BandPaint} */
  const ghost = { tile: hatchPixels("--ghost", "--ghost-hatch", true), size: TILE, scale: r };
  const paintOf = (/** @type {number} */ k) => {
    if (b.flags && b.flags[k] & PREEXISTING) return ghost;
    const c = siteColor(v.group_keys[b.group[k]]);
    let paint = rgb.get(c);
    if (!paint) rgb.set(c, (paint = { rgb: hexRgb(c) }));
    return paint;
  };
  if (off.width && off.height) {
    // (ImageData refuses a 0-pixel side)
    const pixels = rasterBands(b, off.width, off.height, r, y, paintOf);
    ctx.putImageData(new ImageData(pixels, off.width, off.height), 0, 0);
  }
  const edges = new Path2D(); // outlines of bands tall enough to show a separating line
  for (let k = 0; k < b.row.length; k++) {
    // narrow bands get no outline: on short-lived ones it would wash out their colour;
    // nor do ghosts (their hatch sets them apart)
    if (b.flags && b.flags[k] & PREEXISTING) continue;
    if (b.size[k] * pxPerByte >= 4 && b.c1[k] - b.c0[k] >= 4) traceBand(edges, v, k, y, colX);
  }
  const stacks = aggregates(v);
  // neighbours from one call site share a colour: a thin line keeps them apart
  ctx.strokeStyle = col("--band-edge");
  ctx.lineWidth = 0.5;
  ctx.stroke(edges);
  // aggregate band of what is not drawn one by one (one per stream's lane): hatched,
  // never mistaken for a band
  ctx.fillStyle = smallPattern(ctx);
  for (const { small: s } of stacks) {
    ctx.beginPath();
    ctx.moveTo(0, y(s.offset[0]));
    for (let c = 0; c < W; c++) {
      ctx.lineTo(c, y(s.offset[c]));
      ctx.lineTo(c + 1, y(s.offset[c]));
    }
    for (let c = W - 1; c >= 0; c--) {
      const t = y(s.offset[c] + s.bytes[c]);
      ctx.lineTo(c + 1, t);
      ctx.lineTo(c, t);
    }
    ctx.closePath();
    ctx.fill();
  }
  // reserved memory: max per column, so peaks are never hidden (not per stream: none
  // with the lanes)
  if (v.lanes) return;
  ctx.strokeStyle = col("--reserved");
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  for (let c = 0; c < W; c++) {
    const t = y(v.reserved[c]);
    if (c === 0) ctx.moveTo(0, t);
    else ctx.lineTo(c, t);
    ctx.lineTo(c + 1, t);
  }
  ctx.stroke();
}

// The chart's stacks, each from `base` bytes up: one, or a lane per stream.
/**
 * @typedef {{base: number, small: import("../types.js").Small}} Stack
 * @param {import("../types.js").ChartAnswer} v
 * @returns {Stack[]}
 */
export function aggregates(v) {
  return v.lanes ? v.lanes : [{ base: v.ymin, small: v.small }];
}

/** @param {import("./pane.js").Pane} p */
export function drawPane(p) {
  const c = p.canvas,
    ctx = context2d(c),
    r = dpr();
  const Wc = c.width / r,
    H = p.mainH,
    plotH = p.plotH,
    plotW = p.plotW;
  ctx.setTransform(r, 0, 0, r, 0, 0);
  ctx.clearRect(0, 0, Wc, H);
  const v = p.view;
  ctx.save();
  ctx.beginPath();
  ctx.rect(ML, MT, plotW, plotH);
  ctx.clip();
  if (v && v.axis === p.axis) {
    const dx = p.xOf(v.vx0),
      dw = p.xOf(v.vx1) - dx;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(p.off, dx, MT, dw, plotH);
    const y = (/** @type {number} */ bytes) =>
      MT + plotH - ((bytes - v.ymin) / (v.ymax - v.ymin)) * plotH;
    const colX = p.colXFn(v);
    // the find box: matching bands painted over in the mark colour
    if (v.bands.match) {
      ctx.globalAlpha = 0.8;
      ctx.fillStyle = col("--mark");
      const found = new Path2D();
      for (let k = 0; k < v.bands.row.length; k++)
        if (v.bands.match[k]) traceBand(found, v, k, y, colX);
      ctx.fill(found);
      ctx.globalAlpha = 1;
    }
    /** @type {["pinned" | "hover", string, number][]} */
    const outlines = [
      ["pinned", col("--cursor"), 2.5],
      ["hover", col("--hl"), 2],
    ];
    for (const [which, color, width] of outlines) {
      const row =
        which === "pinned"
          ? state.pinned && state.pinned.pane === p
            ? state.pinned.row
            : -1
          : p.hover
            ? p.hover.row
            : -1;
      if (row < 0) continue;
      const k = v.bands.row.indexOf(row);
      if (k < 0) continue;
      const path = bandPath(v, k, y, colX);
      if (which === "pinned") {
        // the clicked band: filled and outlined, so it stands out among same-coloured ones
        ctx.globalAlpha = 0.6;
        ctx.fillStyle = col("--hl");
        ctx.fill(path);
        ctx.globalAlpha = 1;
      }
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.stroke(path);
    }
  }
  if (v && v.axis === p.axis && v.lanes) drawLaneLabels(p, ctx, v);
  // peak marker
  const s = p.dm.peak;
  if (s.peak_event_index >= 0) {
    const px = p.xOf(p.peakU);
    if (px >= ML && px <= ML + plotW) {
      ctx.strokeStyle = col("--peak");
      ctx.setLineDash([4, 3]);
      ctx.lineWidth = 1;
      plotLine(ctx, px, plotH);
      ctx.setLineDash([]);
      ctx.font = "11px system-ui, sans-serif";
      ctx.textAlign = "left"; // the axis labels leave it "right"
      // on a backing box inside the plot, clear of the y axis; above a y zoom, it says so
      const above = v && s.peak_active_bytes > v.ymax;
      const label = `peak ${fmtBytes(s.peak_active_bytes)}${above ? " ↑ above the view" : ""}`;
      const tw = ctx.measureText(label).width;
      const lx = Math.max(ML + 4, Math.min(px + 4, ML + plotW - tw - 4));
      ctx.fillStyle = col("--bg");
      ctx.globalAlpha = 0.85;
      ctx.fillRect(lx - 2, MT + 2, tw + 4, 14);
      ctx.globalAlpha = 1;
      ctx.fillStyle = col("--peak");
      ctx.fillText(label, lx, MT + 13);
    }
  }
  // out-of-memory entries: where the allocator gave up (the request and the free memory
  // the driver reported), so an OOM snapshot opens on what it is about
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "left";
  for (const o of p.dm.ooms || []) {
    const ou = p.axis === "time" ? o.time_us : o.event + 0.5;
    if (ou === null) continue;
    const ox = p.xOf(ou);
    if (ox < ML || ox > ML + plotW) continue;
    ctx.strokeStyle = col("--oom");
    ctx.lineWidth = 2;
    plotLine(ctx, ox, plotH);
    const label = `OOM: ${fmtBytes(o.requested_bytes)} requested, ${fmtBytes(o.device_free_bytes)} free`;
    const tw = ctx.measureText(label).width;
    ctx.fillStyle = col("--oom");
    ctx.fillText(label, ox + 4 + tw > ML + plotW ? ox - 4 - tw : ox + 4, MT + 26);
  }
  // live-at cursor
  if (
    state.live &&
    state.live.pane === p &&
    state.live.u !== undefined &&
    state.live.axis === p.axis
  ) {
    const lx = p.xOf(state.live.u);
    ctx.strokeStyle = col("--cursor");
    ctx.lineWidth = 1;
    plotLine(ctx, lx, plotH);
  }
  ctx.restore();
  drawAxes(p, ctx, v);
  drawAnnotations(p);
}

// Streams drawn apart: each lane's floor, and its stream and most bytes in the gap above it.
/**
 * @param {import("./pane.js").Pane} p
 * @param {CanvasRenderingContext2D} ctx
 * @param {import("./pane.js").PaneView} v
 */
function drawLaneLabels(p, ctx, v) {
  const plotH = p.plotH,
    y = (/** @type {number} */ bytes) => MT + plotH - (bytes / v.ymax) * plotH;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textAlign = "left";
  for (const lane of v.lanes || []) {
    const floor = Math.round(y(lane.base)) + 0.5;
    ctx.strokeStyle = col("--axis");
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(ML, floor);
    ctx.lineTo(ML + p.plotW, floor);
    ctx.stroke();
    ctx.fillStyle = col("--axis");
    ctx.fillText(
      `stream ${lane.stream} · up to ${fmtBytes(lane.top)} here`,
      ML + 4,
      y(lane.base + lane.top) - 4,
    );
  }
}

// Each lane's memory axis from its floor (one scale for all lanes), ticks at least 16 px
// apart; a lane too short for two has none.
/**
 * @param {import("./pane.js").Pane} p
 * @param {CanvasRenderingContext2D} ctx
 * @param {import("./pane.js").PaneView} v
 * @param {import("../types.js").Lane[]} lanes
 */
function drawLaneAxes(p, ctx, v, lanes) {
  const plotH = p.plotH,
    pxPerByte = plotH / v.ymax;
  ctx.textAlign = "right";
  for (const lane of lanes) {
    if (lane.top * pxPerByte < 32) continue;
    let { step, digits } = yTicks(0, lane.top);
    while (step * pxPerByte < 16) step *= 2;
    for (let b = 0; b <= lane.top + 1e-9; b += step) {
      const yy = MT + plotH - (lane.base + b) * pxPerByte;
      ctx.beginPath();
      ctx.moveTo(ML, yy + 0.5);
      ctx.lineTo(ML + p.plotW, yy + 0.5);
      ctx.stroke();
      ctx.fillText(fmtBytes(b, digits), ML - 6, yy + 4);
    }
  }
}

/**
 * A vertical line from the top of the plot to its x axis at `x`, in the current stroke.
 * @param {CanvasRenderingContext2D} ctx
 * @param {number} x
 * @param {number} plotH
 */
function plotLine(ctx, x, plotH) {
  ctx.beginPath();
  ctx.moveTo(x, MT);
  ctx.lineTo(x, MT + plotH);
  ctx.stroke();
}

/**
 * @param {import("./pane.js").Pane} p
 * @param {CanvasRenderingContext2D} ctx
 * @param {import("./pane.js").PaneView | null} v
 */
function drawAxes(p, ctx, v) {
  const plotW = p.plotW,
    plotH = p.plotH;
  ctx.fillStyle = col("--axis");
  ctx.strokeStyle = col("--grid");
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  if (v && v.lanes) drawLaneAxes(p, ctx, v, v.lanes);
  else if (v) {
    const ymin = v.ymin,
      ymax = v.ymax,
      yspan = ymax - ymin;
    const { step, digits } = yTicks(ymin, ymax);
    ctx.textAlign = "right";
    for (let b = Math.ceil(ymin / step) * step; b <= ymax + 1e-9; b += step) {
      const yy = MT + plotH - ((b - ymin) / yspan) * plotH;
      ctx.beginPath();
      ctx.moveTo(ML, yy + 0.5);
      ctx.lineTo(ML + plotW, yy + 0.5);
      ctx.stroke();
      ctx.fillText(fmtBytes(b, digits), ML - 6, yy + 4);
    }
  }
  // x ticks
  const step = xTickStep(p.x1 - p.x0, plotW);
  ctx.textAlign = "center";
  const base = p.axis === "time" ? p.timeOrigin : 0;
  for (let u = Math.ceil((p.x0 - base) / step) * step + base; u <= p.x1; u += step) {
    const xx = p.xOf(u);
    plotLine(ctx, xx + 0.5, plotH);
    const label = p.axis === "time" ? fmtTick(u - base, step) : fmtEventCount(u);
    // labels at the ends stay inside the plot: clear of the axis name, never clipped
    const half = ctx.measureText(label).width / 2;
    const lx = Math.min(Math.max(xx, ML + half + 2), ML + plotW + MR - half - 1);
    ctx.fillText(label, lx, MT + plotH + 15);
  }
  ctx.textAlign = "right"; // axis name in the left margin, on the tick-label row
  ctx.fillText(p.axis === "time" ? "time ▸" : "event ▸", ML - 6, MT + plotH + 15);
}

// Cost per draw: O(pixels x log spans), not O(spans): spans of one level never overlap,
// so their starts and ends both ascend; a sub-pixel span paints its pixel, then a binary
// search skips to the first span starting in the next pixel.
/** @param {import("./pane.js").Pane} p */
function drawAnnotations(p) {
  if (!p.annH) return;
  const c = p.annCanvas,
    ctx = context2d(c),
    r = dpr();
  ctx.setTransform(r, 0, 0, r, 0, 0);
  ctx.clearRect(0, 0, c.width / r, p.annH);
  ctx.font = "10px system-ui, sans-serif";
  const lv = p.annLevels[p.axis];
  const left = ML,
    right = ML + p.plotW;
  ctx.fillStyle = col("--ann");
  for (let depth = 0; depth < lv.length; depth++) {
    const { start, end, index } = lv[depth];
    const yy = 1 + depth * 15;
    let i = lowerBound(end, p.x0, 0);
    while (i < start.length && start[i] <= p.x1) {
      let a = p.xOf(start[i]),
        b = p.xOf(end[i]);
      const sp = p.ann.spans[index[i]];
      a = Math.max(a, left);
      b = Math.min(b, right);
      ctx.fillRect(a, yy, Math.max(1, b - a - 1), 13);
      if (b - a > 30) {
        ctx.save();
        ctx.beginPath();
        ctx.rect(a, yy, b - a - 2, 13);
        ctx.clip();
        ctx.fillStyle = col("--ann-fg");
        // canvas text: no markup is interpreted
        ctx.fillText(sp.inferred ? `${sp.name} (inferred)` : sp.name, a + 3, yy + 10);
        ctx.restore();
        ctx.fillStyle = col("--ann");
      }
      i = b - a < 2 ? Math.max(i + 1, lowerBound(start, p.uOf(Math.floor(b) + 1), i + 1)) : i + 1;
    }
  }
}

/** @param {import("./pane.js").Pane} p */
export function drawOverview(p) {
  const c = p.ovCanvas,
    ctx = context2d(c),
    r = dpr();
  const H = 46,
    W = c.width / r;
  ctx.setTransform(r, 0, 0, r, 0, 0);
  ctx.clearRect(0, 0, W, H);
  const v = p.ov;
  if (!v) return;
  const w = v.width,
    y = (/** @type {number} */ b) => H - 3 - (b / v.ymax) * (H - 6); // overview: always from 0
  ctx.fillStyle = col("--small");
  ctx.beginPath();
  ctx.moveTo(ML, H);
  for (let i = 0; i < w; i++) {
    ctx.lineTo(ML + i, y(v.active[i]));
    ctx.lineTo(ML + i + 1, y(v.active[i]));
  }
  ctx.lineTo(ML + w, H);
  ctx.closePath();
  ctx.fill();
  ctx.strokeStyle = col("--reserved");
  ctx.beginPath();
  for (let i = 0; i < w; i++) {
    const t = y(v.reserved[i]);
    if (i === 0) ctx.moveTo(ML, t);
    else ctx.lineTo(ML + i, t);
    ctx.lineTo(ML + i + 1, t);
  }
  ctx.stroke();
  // brush
  const [f0, f1] = p.fullRange();
  const bx0 = ML + ((p.x0 - f0) / (f1 - f0)) * w,
    bx1 = ML + ((p.x1 - f0) / (f1 - f0)) * w;
  ctx.fillStyle = col("--brush");
  ctx.fillRect(bx0, 0, Math.max(2, bx1 - bx0), H);
  ctx.strokeStyle = col("--accent");
  ctx.strokeRect(bx0 + 0.5, 0.5, Math.max(2, bx1 - bx0) - 1, H - 1);
  p.brush = [bx0, bx1];
  if (p.dm.peak.peak_event_index >= 0) {
    const px = ML + ((p.peakU - f0) / (f1 - f0)) * w;
    ctx.fillStyle = col("--peak");
    ctx.beginPath();
    ctx.moveTo(px - 4, 0);
    ctx.lineTo(px + 4, 0);
    ctx.lineTo(px, 6);
    ctx.fill();
  }
}
