// @ts-check
// Geometry of a pane's chart: margins, tick spacing, and the stage strip's per-level
// columns. Pure functions (no DOM), unit-tested by tests/js/geometry.test.mjs.

export const ML = 72,
  MR = 10,
  MT = 8,
  MB = 22; // main canvas margins (CSS px)

// First index in [from, to) whose value is >= x (or `to`) in an array ascending there.
/**
 * @param {ArrayLike<number>} arr
 * @param {number} x
 * @param {number} from
 * @param {number} [to]
 */
export function lowerBound(arr, x, from, to = arr.length) {
  let lo = from,
    hi = to;
  while (lo < hi) {
    const m = (lo + hi) >> 1;
    if (arr[m] < x) lo = m + 1;
    else hi = m;
  }
  return lo;
}

// Stage spans per nesting level (the strip shows four) and axis, as ascending columns.
/**
 * @typedef {object} AnnotationLevel the spans of one nesting level on one axis
 * @property {Float64Array} start
 * @property {Float64Array} end
 * @property {Int32Array} index into the spans
 */
/**
 * @param {import("../types.js").Span[]} spans
 * @returns {{ time: AnnotationLevel[], event: AnnotationLevel[] }}
 */
export function annotationLevels(spans) {
  /** @type {{ time: AnnotationLevel[], event: AnnotationLevel[] }} */
  const out = { time: [], event: [] };
  /** @type {number[][]} */
  const levels = [];
  spans.forEach((sp, k) => {
    if (sp.depth < 4) (levels[sp.depth] ||= []).push(k);
  });
  for (let d = 0; d < levels.length; d++) {
    const ks = levels[d] || [];
    /** @type {["time" | "event", "t0" | "e0", "t1" | "e1"][]} */
    const axes = [
      ["time", "t0", "t1"],
      ["event", "e0", "e1"],
    ];
    for (const [axis, s0, s1] of axes) {
      out[axis][d] = {
        start: Float64Array.from(ks, (k) => spans[k][s0]),
        end: Float64Array.from(ks, (k) => spans[k][s1]),
        index: Int32Array.from(ks),
      };
    }
  }
  return out;
}

// y ticks: binary-friendly steps, with enough decimals that neighbouring ticks differ
// (a y zoom can show 28.0 .. 28.4 GiB)
/**
 * @param {number} ymin
 * @param {number} ymax
 */
export function yTicks(ymin, ymax) {
  const yspan = ymax - ymin;
  let step = Math.pow(2, Math.ceil(Math.log2(Math.max(yspan / 5, 1))));
  if (yspan / step < 3) step /= 2;
  const unit = Math.pow(
    1024,
    Math.max(0, Math.floor(Math.log(Math.max(ymax, 1)) / Math.log(1024))),
  );
  const digits = Math.min(4, Math.max(0, Math.ceil(-Math.log10(step / unit))));
  return { step, digits };
}

// x ticks: 1, 2 or 5 times a power of ten, about one per 110 px
/**
 * @param {number} span
 * @param {number} plotW
 */
export function xTickStep(span, plotW) {
  const raw = span / Math.max(2, plotW / 110);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
}

// Jump to peak: the next, narrower range around the peak at `u` while the column holding
// it still sums allocations that a narrower range would draw one by one (`cut_count`:
// left out by the run budget, not for their size), so every allocation alive at the peak
// that is at least `min_px` of a pixel can be hovered. null when none is cut there (or
// the range cannot shrink past `minSpan`).
/**
 * @param {import("./pane.js").PaneView} v
 * @param {number} u
 * @param {number} minSpan
 * @returns {[number, number] | null}
 */
export function narrowerAtPeak(v, u, minSpan) {
  const c = Math.floor(((u - v.vx0) / (v.vx1 - v.vx0)) * v.width);
  const cut = v.small && v.small.cut_count;
  if (!cut || c < 0 || c >= cut.length || !(cut[c] > 0)) return null;
  const span = (v.vx1 - v.vx0) / 10;
  if (span < minSpan) return null;
  return [u - span / 2, u + span / 2];
}
