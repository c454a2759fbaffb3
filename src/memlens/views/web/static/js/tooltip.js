// The tooltip that follows the mouse, and what it says about a hit (pane/input.js).
import { $, el } from "./dom.js";
import { fmtBytes, fmtInt } from "./format.js";

export function showTooltip(e, lines) {
  const t = $("#tooltip");
  t.replaceChildren(...lines.map(([cls, text]) => el("div", cls, text)));
  t.hidden = false;
  const w = t.offsetWidth, h = t.offsetHeight;
  let x = e.clientX + 14, y = e.clientY + 14;
  if (x + w > window.innerWidth - 4) x = e.clientX - w - 14;
  if (y + h > window.innerHeight - 4) y = e.clientY - h - 14;
  t.style.left = `${Math.max(0, x)}px`;
  t.style.top = `${Math.max(0, y)}px`;
}
export function hideTooltip() { $("#tooltip").hidden = true; }

// The tooltip's lines, [css class, text], for a hit test result. Pure.
export function tooltipLines(h) {
  const lines = [];
  if (h.kind === "band") {
    lines.push(["t-size", fmtBytes(h.size)]);
    lines.push(["t-site", h.site]);
    const fl = [];
    if (h.flags & 1) fl.push(h.flags & 2 ? "alive before the trace (from the final segments)" : "allocated before the trace");
    if (h.flags & 8) fl.push("freed but pending (another stream)");
    if (fl.length) lines.push(["t-muted", fl.join("; ")]);
  } else if (h.kind === "small") {
    lines.push(["t-size", `${fmtInt(h.count)} small allocations: ${fmtBytes(h.sbytes)}`]);
    lines.push(["t-muted", "each under one pixel at this zoom; zoom in to separate them"]);
  }
  const when = h.event >= 0 ? `after event ${fmtInt(h.event)}` : "before the first event";
  lines.push(["t-muted", `${when} · active ${fmtBytes(h.active)} · reserved ${fmtBytes(h.reserved)}`]);
  return lines;
}
