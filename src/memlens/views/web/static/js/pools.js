// @ts-check
// The Memory Pools card (MemoryViz's private-pool tab): each pool's live bytes over the
// whole trace as an envelope, and its share at the peak; the same per stream (streams
// drawn apart) where allocations were made on several; reserved memory by segment size
// (fragmentation: 2 MiB, 20 MiB, one-request segments, expandable, before the trace).
// Shown only when one of them has more than the default pool, one stream or one size:
// otherwise it says nothing the chart does not. Asked for after the first paint (pane.js).
import { getJSON } from "./api.js";
import { $, col, context2d, dpr, el } from "./dom.js";
import { fmtBytes, fmtInt } from "./format.js";
import { PALETTE } from "./pane/colour.js";

// "default", "private (1, 0)" or "unknown". Pure.
/** @param {number[] | null} pool */
export function poolName(pool) {
  if (pool === null) return "unknown";
  return pool[0] === 0 && pool[1] === 0 ? "default" : `private (${pool[0]}, ${pool[1]})`;
}

// does the card say anything: a private pool among them? Pure.
/** @param {import("./types.js").PoolEnvelope[]} pools */
export function hasPrivatePool(pools) {
  return pools.some((p) => p.pool !== null && (p.pool[0] !== 0 || p.pool[1] !== 0));
}

const HEIGHT = 90;
/** @typedef {{envelope: number[], max_bytes: number, peak_bytes?: number, peak_count?: number, share?: number}} Curve */

/**
 * Each curve's envelope as a filled step curve, on one scale (the largest's most), the
 * peak dashed.
 * @param {HTMLCanvasElement} cv
 * @param {Curve[]} curves
 * @param {import("./types.js").PoolsAnswer} a
 */
function drawEnvelopes(cv, curves, a) {
  const w = cv.clientWidth || 300,
    r = dpr();
  cv.width = Math.round(w * r);
  cv.height = Math.round(HEIGHT * r);
  const ctx = context2d(cv);
  ctx.setTransform(r, 0, 0, r, 0, 0);
  const top = Math.max(1, ...curves.map((p) => p.max_bytes));
  curves.forEach((p, i) => {
    const n = p.envelope.length;
    if (!n) return;
    ctx.beginPath();
    ctx.moveTo(0, HEIGHT);
    p.envelope.forEach((b, c) => {
      const y = HEIGHT - (b / top) * (HEIGHT - 2);
      ctx.lineTo((c / n) * w, y);
      ctx.lineTo(((c + 1) / n) * w, y);
    });
    ctx.lineTo(w, HEIGHT);
    ctx.closePath();
    ctx.globalAlpha = 0.35;
    ctx.fillStyle = PALETTE[i % PALETTE.length];
    ctx.fill();
    ctx.globalAlpha = 1;
    ctx.strokeStyle = PALETTE[i % PALETTE.length];
    ctx.lineWidth = 1.25;
    ctx.stroke();
  });
  if (a.n_events && a.peak_event >= 0) {
    const x = ((a.peak_event + 0.5) / a.n_events) * w;
    ctx.strokeStyle = col("--peak");
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(x, 0);
    ctx.lineTo(x, HEIGHT);
    ctx.stroke();
    ctx.setLineDash([]);
  }
}

/**
 * A canvas of envelopes and a table with a row per curve; the canvas is drawn once the
 * card lays it out.
 * @param {string} what  the first column's heading
 * @param {Curve[]} curves
 * @param {string[]} names
 * @param {import("./types.js").PoolsAnswer} a
 * @returns {[HTMLCanvasElement, HTMLElement, () => void]}
 */
function envelopeBlock(what, curves, names, a) {
  const cv = /** @type {HTMLCanvasElement} */ (el("canvas", "pools"));
  cv.setAttribute("aria-label", `live bytes per ${what} over the trace`);
  const tbl = el("table", "cmp pools");
  const head = el("tr");
  // pools and streams: their figures at the peak too; segment sizes: their most
  const atPeak = curves.every((p) => p.peak_bytes !== undefined);
  const cols = atPeak ? [what, "at the peak", "share", "most"] : [what, "most"];
  for (const h of cols) head.append(el("th", null, h));
  tbl.append(head);
  curves.forEach((p, i) => {
    const tr = el("tr"),
      name = el("td");
    const sw = el("span", "sw");
    sw.style.background = PALETTE[i % PALETTE.length];
    name.append(sw, el("span", null, names[i]));
    tr.append(name);
    if (atPeak) {
      name.title = `${fmtInt(p.peak_count ?? 0)} allocations live at the peak`;
      tr.append(
        el("td", null, fmtBytes(p.peak_bytes ?? 0)),
        el("td", null, `${(100 * (p.share ?? 0)).toFixed(1)}%`),
      );
    }
    tr.append(el("td", null, fmtBytes(p.max_bytes)));
    tbl.append(tr);
  });
  return [cv, tbl, () => drawEnvelopes(cv, curves, a)];
}

/** @param {number} device @param {number} snap */
export async function loadPools(device, snap) {
  const card = $("#pools"),
    body = $(".body", card);
  /** @type {import("./types.js").PoolsAnswer} */
  const a = await getJSON(`/api/d/${device}/pools?snap=${snap}&width=400`);
  card.hidden = !hasPrivatePool(a.pools) && !a.streams.length && !a.segment_sizes.length;
  if (card.hidden) return;
  body.replaceChildren();
  const draws = [];
  for (const [what, curves, names] of /** @type {[string, Curve[], string[]][]} */ ([
    ["pool", hasPrivatePool(a.pools) ? a.pools : [], a.pools.map((p) => poolName(p.pool))],
    ["stream", a.streams, a.streams.map((s) => s.stream)],
    ["reserved in segments of", a.segment_sizes, a.segment_sizes.map((s) => s.size_class)],
  ])) {
    if (!curves.length) continue;
    const [cv, tbl, draw] = envelopeBlock(what, curves, names, a);
    body.append(cv, tbl);
    draws.push(draw);
  }
  for (const draw of draws) draw();
}
