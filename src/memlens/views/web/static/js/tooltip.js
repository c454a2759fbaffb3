// @ts-check
// The tooltip that follows the mouse, and what it says about a hit (pane/input.js).
import { $, el } from "./dom.js";
import { fmtBytes, fmtInt } from "./format.js";

/**
 * @param {MouseEvent} e
 * @param {[string, string][]} lines [css class, text]
 */
export function showTooltip(e, lines) {
  const t = $("#tooltip");
  t.replaceChildren(...lines.map(([cls, text]) => el("div", cls, text)));
  t.hidden = false;
  const w = t.offsetWidth,
    h = t.offsetHeight;
  let x = e.clientX + 14,
    y = e.clientY + 14;
  if (x + w > window.innerWidth - 4) x = e.clientX - w - 14;
  if (y + h > window.innerHeight - 4) y = e.clientY - h - 14;
  t.style.left = `${Math.max(0, x)}px`;
  t.style.top = `${Math.max(0, y)}px`;
}
export function hideTooltip() {
  $("#tooltip").hidden = true;
}

// The tooltip's lines, [css class, text], for a hit test result. Pure.
/** @param {import("./pane/input.js").Hit} h */
export function tooltipLines(h) {
  /** @type {[string, string][]} */
  const lines = [];
  if (h.kind === "band") {
    lines.push(["t-size", fmtBytes(h.size)]);
    lines.push(["t-site", h.address ? `${h.label} at ${h.address}` : h.label]);
    const fl = [];
    if (h.flags & 1)
      fl.push(
        h.flags & 2
          ? "alive before the trace (from the final segments)"
          : "allocated before the trace",
      );
    if (h.flags & 8) fl.push("freed but pending (another stream)");
    if (fl.length) lines.push(["t-muted", fl.join("; ")]);
  } else if (h.kind === "small") {
    const share = h.active > 0 ? ` (${percent(h.sbytes / h.active)} of this column)` : "";
    lines.push([
      "t-size",
      `hatched: ${fmtInt(h.count)} allocations summed, ${fmtBytes(h.sbytes)}${share}`,
    ]);
    for (const text of hatchReasons(h.count, h.cut, h.cutBytes, h.sbytes, h.minSize))
      lines.push(["t-muted", text]);
  }
  const when = h.event >= 0 ? `after event ${fmtInt(h.event)}` : "before the first event";
  lines.push([
    "t-muted",
    `${when} · active ${fmtBytes(h.active)} · reserved ${fmtBytes(h.reserved)}`,
  ]);
  return lines;
}

/** @param {number} x */
const percent = (x) => `${x >= 0.1 ? Math.round(x * 100) : (x * 100).toFixed(1)}%`;

// Why allocations are in the hatched band, and what separates them. `cut` of the `count`
// (`cutBytes` of `bytes`) were left out to bound the drawing, the largest first kept: a
// narrower time window has fewer offset changes, so zooming in on time draws them; the
// others are under `minSize` bytes (a sixteenth of a pixel), which only the memory axis's
// zoom changes. Pure.
/**
 * @param {number} count
 * @param {number} cut
 * @param {number} cutBytes
 * @param {number} bytes
 * @param {number} minSize
 */
export function hatchReasons(count, cut, cutBytes, bytes, minSize) {
  const out = [];
  if (cut > 0)
    out.push(
      `${fmtInt(cut)} of them (${fmtBytes(cutBytes)}) left out to bound the drawing at this zoom: zoom in on time to separate them`,
    );
  const under = count - cut;
  if (under > 0)
    out.push(
      `${cut > 0 ? fmtInt(under) + " " : count > 1 ? "each " : ""}under ${fmtBytes(minSize)}, a 16th of a pixel here (${fmtBytes(Math.max(bytes - cutBytes, 0))}): Shift + wheel zooms the memory axis to separate them`,
    );
  return out;
}

// The line under the chart: what the hatched band holds at the tallest column (the one a
// reader looks at first), with its share, count and reasons; "" when it holds nothing. Pure.
/** @param {import("./types.js").ChartAnswer} v */
export function hatchSummary(v) {
  let c = 0;
  for (let i = 1; i < v.active.length; i++) if (v.active[i] > v.active[c]) c = i;
  const s = v.small,
    bytes = s.bytes[c];
  if (!(v.active[c] > 0) || !(s.count[c] > 0)) return "";
  const cut = s.cut_count ? s.cut_count[c] : 0,
    cutBytes = s.cut_bytes ? s.cut_bytes[c] : 0;
  const head = `Hatched band at the tallest column: ${percent(bytes / v.active[c])} of it, ${fmtBytes(bytes)} in ${fmtInt(s.count[c])} allocations (${fmtBytes(v.bytes_per_px)} a pixel here).`;
  const why = hatchReasons(s.count[c], cut, cutBytes, bytes, s.min_size || 1);
  const text = why.join("; ");
  return text ? `${head} ${text[0].toUpperCase()}${text.slice(1)}.` : head;
}
