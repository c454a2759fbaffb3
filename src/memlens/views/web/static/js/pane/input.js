// @ts-check
// Hit testing and mouse input on a pane's canvases. Functions of a Pane (pane.js).
import { openState } from "../allocator.js";
import { moveCursor } from "../cursor.js";
import { pin } from "../details.js";
import { fmtInt, fmtSeconds } from "../format.js";
import { state } from "../state.js";
import { hideTooltip, showTooltip, tooltipLines } from "../tooltip.js";
import { lowerBound, ML, MT } from "./geometry.js";
import { aggregates } from "./render.js";

// The stage span under (x, y) in the stage strip, or null.
/**
 * @param {import("./pane.js").Pane} p
 * @param {number} x
 * @param {number} y
 */
export function annAt(p, x, y) {
  const depth = Math.floor((y - 1) / 15);
  const lv = p.annLevels[p.axis][depth];
  if (!lv) return null;
  const u = p.uOf(x);
  const i = lowerBound(lv.end, u, 0); // the only span of this level that can hold u
  return i < lv.start.length && lv.start[i] <= u ? p.ann.spans[lv.index[i]] : null;
}

// Bottom offset of band k at column c. Its runs ascend by column, not those of the bands
// after it (with streams drawn apart, a later lane's start earlier): search its own.
/**
 * @param {import("../types.js").Bands} b
 * @param {number} k
 * @param {number} c
 */
export function bandOffset(b, k, c) {
  return b.run_off[lowerBound(b.run_col, c + 1, b.run_start[k], b.run_start[k + 1]) - 1];
}

// What is under the pointer: the band (or the aggregate) covering most of the pixel row
// there, i.e. the colour one sees; thin bands share a pixel, and the exact byte under
// the pointer would pick one a fraction of a pixel wide by chance.
/**
 * @typedef {{col: number, event: number, bytes: number, active: number, reserved: number, u: number}} At
 * @typedef {At & {kind: "small", count: number, sbytes: number, cut: number, cutBytes: number, minSize: number}} SmallHit
 * @typedef {At & {kind: "band", k: number, row: number, size: number, label: string, flags: number, address: string | undefined}} BandHit
 * @typedef {SmallHit | BandHit | (At & {kind: "empty"})} Hit
 * @param {import("./pane.js").Pane} p
 * @param {number} x
 * @param {number} y
 * @returns {Hit | null}
 */
export function hitTest(p, x, y) {
  const v = p.view;
  if (!v || v.axis !== p.axis) return null;
  if (x < ML || x > ML + p.plotW || y < MT || y > MT + p.plotH) return null;
  // back to a column of the stored view
  const u = p.uOf(x);
  const c = Math.floor(((u - v.vx0) / (v.vx1 - v.vx0)) * v.width);
  if (c < 0 || c >= v.width) return null;
  const byteAt = (/** @type {number} */ yy) =>
    v.ymin + ((MT + p.plotH - yy) / p.plotH) * (v.ymax - v.ymin);
  const bytes = byteAt(y);
  const top = Math.floor(y),
    lo = byteAt(top + 1),
    hi = byteAt(top); // the pixel row
  const b = v.bands;
  const hit = {
    col: c,
    event: v.sample[c],
    bytes,
    active: v.active[c],
    reserved: v.reserved[c],
    u,
  };
  // overlap with the pixel row; ties go to what holds the pointer's exact byte
  /**
   * @param {number} off
   * @param {number} size
   */
  const score = (off, size) => {
    const o = Math.min(off + size, hi) - Math.max(off, lo);
    return o <= 0 ? 0 : o + (bytes >= off && bytes < off + size ? 1e-6 * (hi - lo) : 0);
  };
  let best = 0,
    bestK = -1;
  for (let k = 0; k < b.row.length; k++) {
    if (c < b.c0[k] || c >= b.c1[k]) continue;
    const sc = score(bandOffset(b, k, c), b.size[k]);
    if (sc > best) {
      best = sc;
      bestK = k;
    }
  }
  const s = aggregates(v)
    .map((a) => a.small)
    .reduce((m, x) => (score(x.offset[c], x.bytes[c]) > score(m.offset[c], m.bytes[c]) ? x : m));
  if (score(s.offset[c], s.bytes[c]) > best) {
    return {
      ...hit,
      kind: "small",
      count: s.count[c],
      sbytes: s.bytes[c],
      cut: s.cut_count[c],
      cutBytes: s.cut_bytes[c],
      minSize: s.min_size,
    };
  }
  if (bestK >= 0) {
    const k = bestK;
    return {
      ...hit,
      kind: "band",
      k,
      row: b.row[k],
      size: b.size[k],
      label: v.groups[b.group[k]],
      flags: b.flags ? b.flags[k] : 0,
      address: b.address ? b.address[k] : undefined,
    };
  }
  return { ...hit, kind: "empty" };
}

// Mouse input on a pane: wheel zoom (Shift: the memory axis), drag to pan, hover for the
// tooltip, click to pin an allocation or open the live tree; the overview's brush.
/** @param {import("./pane.js").Pane} p */
export function bindInput(p) {
  const cv = p.canvas;
  /** @type {{x: number, x0: number, x1: number, moved: boolean} | null} */
  let drag = null;
  /**
   * @param {MouseEvent} e
   * @returns {[number, number]}
   */
  const pos = (e, c = cv) => {
    const r = c.getBoundingClientRect();
    return [e.clientX - r.left, e.clientY - r.top];
  };
  cv.addEventListener(
    "wheel",
    (e) => {
      e.preventDefault();
      hideTooltip(); // it described what was under the pointer before the zoom
      if (p.hover) {
        p.hover = null;
        p.draw();
      }
      const [x, y] = pos(e);
      const factor = Math.exp((e.deltaY || e.deltaX) * 0.0015);
      if (e.shiftKey) {
        const h = hitTest(p, x, y);
        if (h) p.zoomY(h.bytes, factor);
        return;
      }
      p.zoomAt(p.uOf(Math.min(Math.max(x, ML), ML + p.plotW)), factor);
    },
    { passive: false },
  );
  cv.addEventListener("mousedown", (e) => {
    if (e.button !== 0) return;
    const [x] = pos(e);
    drag = { x, x0: p.x0, x1: p.x1, moved: false };
    cv.classList.add("dragging");
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    const [x] = pos(e);
    if (Math.abs(x - drag.x) > 3) drag.moved = true;
    if (drag.moved) {
      const du = ((x - drag.x) / p.plotW) * (drag.x1 - drag.x0);
      p.setRange(drag.x0 - du, drag.x1 - du);
      hideTooltip();
    }
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    cv.classList.remove("dragging");
    if (!d.moved && e.target === cv) click(p, ...pos(e));
  });
  cv.addEventListener("mousemove", (e) => {
    const [x, y] = pos(e);
    state.mouse = { pane: p, x, y };
    if (drag && drag.moved) return;
    const h = hitTest(p, x, y);
    const row = h && h.kind === "band" ? h.row : -1;
    if ((p.hover ? p.hover.row : -1) !== row) {
      p.hover = h && h.kind === "band" ? h : null;
      p.draw();
    }
    if (h) showTooltip(e, tooltipLines(h));
    else hideTooltip();
  });
  cv.addEventListener("mouseleave", () => {
    if (p.hover) {
      p.hover = null;
      p.draw();
    }
    hideTooltip();
  });
  // annotation strip: tooltip, and a click is a moment
  p.annCanvas.addEventListener("mousemove", (e) => {
    const [x, y] = pos(e, p.annCanvas);
    const sp = annAt(p, x, y);
    if (sp) {
      const dur = sp.t1 - sp.t0;
      /** @type {[string, string][]} */
      const lines = [
        ["t-size", sp.name],
        ["t-muted", `${fmtSeconds(dur)} · events ${fmtInt(sp.e0)}–${fmtInt(sp.e1)}`],
      ];
      if (sp.inferred) lines.push(["t-muted", "inferred from the trace (no step annotations)"]);
      showTooltip(e, lines);
    } else hideTooltip();
  });
  p.annCanvas.addEventListener("mouseleave", hideTooltip);
  p.annCanvas.addEventListener("click", (e) => {
    const [x] = pos(e, p.annCanvas);
    p.liveAtX(x);
  });
  // overview brush
  const ov = p.ovCanvas;
  /** @type {{x: number, u: number, move: boolean, x0: number, x1: number, moved: boolean} | null} */
  let od = null;
  const [f0of, f1of] = [() => p.fullRange()[0], () => p.fullRange()[1]];
  const uAt = (/** @type {number} */ x) => {
    const w = p.ov ? p.ov.width : p.plotW;
    const f0 = f0of(),
      f1 = f1of();
    return f0 + ((x - ML) / w) * (f1 - f0);
  };
  ov.addEventListener("mousedown", (e) => {
    const [x] = pos(e, ov);
    const inside = !!p.brush && x >= p.brush[0] && x <= p.brush[1] && p.x1 - p.x0 < f1of() - f0of();
    od = { x, u: uAt(x), move: inside, x0: p.x0, x1: p.x1, moved: false };
    e.preventDefault();
  });
  window.addEventListener("mousemove", (e) => {
    if (!od) return;
    const [x] = pos(e, ov);
    if (Math.abs(x - od.x) > 2) od.moved = true;
    if (!od.moved) return;
    if (od.move) {
      const du = uAt(x) - od.u;
      p.setRange(od.x0 + du, od.x1 + du);
    } else {
      const a = Math.min(od.u, uAt(x)),
        b = Math.max(od.u, uAt(x));
      p.setRange(a, b);
    }
  });
  window.addEventListener("mouseup", () => {
    if (!od) return;
    if (!od.moved) {
      const span = p.x1 - p.x0;
      p.setRange(od.u - span / 2, od.u + span / 2);
    }
    od = null;
  });
}

/**
 * @param {import("./pane.js").Pane} p
 * @param {number} x
 * @param {number} y
 */
function click(p, x, y) {
  const h = hitTest(p, x, y);
  if (!h) return;
  if (h.kind === "band" && p.view && p.view.kind === "segments") {
    moveCursor(p, h.event, h.u);
    openState(p, h.event);
  } else if (h.kind === "band") pin(p, h.row);
  else moveCursor(p, h.event, h.u);
}
