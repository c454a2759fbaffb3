// @ts-check
// The Allocator State card (MemoryViz's Allocator State History): segments and blocks right
// after the timeline cursor's event, one canvas row per segment (GET /api/d/{device}/state,
// which is `memlens fragmentation --event N --json`). It follows the cursor, and its ◀ ▶
// buttons (or , and .) step the cursor one event. Pixel-bounded: at most the server's
// MAX_SEGMENTS rows, and a block narrower than a pixel is drawn one pixel wide.
import { getJSON } from "./api.js";
import { kv, pin } from "./details.js";
import { $, col, context2d, dpr, el } from "./dom.js";
import { fmtBytes, fmtInt } from "./format.js";
import { state } from "./state.js";
import { hideTooltip, showTooltip } from "./tooltip.js";

export const ROW_H = 10,
  ROW_GAP = 3;

// x extent [x0, x1) in CSS px of a block inside its segment's bar; every block at least
// one pixel wide. The bar of a segment is as long as its size relative to the largest. Pure.
/**
 * @param {import("./types.js").DrawnSegment} seg
 * @param {import("./types.js").DrawnBlock} block
 * @param {number} maxSize
 * @param {number} width
 * @returns {[number, number]}
 */
export function blockSpan(seg, block, maxSize, width) {
  const bar = Math.max(2, (seg.size / maxSize) * width);
  const x0 = (block.offset / seg.size) * bar;
  return [x0, Math.max(x0 + 1, ((block.offset + block.size) / seg.size) * bar)];
}

// The segment row and block under (x, y) of the canvas, or null. Pure.
/**
 * @param {import("./types.js").StateAnswer} st
 * @param {number} x
 * @param {number} y
 * @param {number} width
 */
export function stateHit(st, x, y, width) {
  const i = Math.floor(y / (ROW_H + ROW_GAP));
  const seg = st.segments[i];
  if (!seg || y - i * (ROW_H + ROW_GAP) >= ROW_H) return null;
  const maxSize = st.segments.reduce((/** @type {number} */ m, s) => Math.max(m, s.size), 1);
  for (const b of seg.blocks) {
    const [x0, x1] = blockSpan(seg, b, maxSize, width);
    if (x >= x0 && x < x1) return { seg, block: b };
  }
  return x <= Math.max(2, (seg.size / maxSize) * width) ? { seg, block: null } : null;
}

// A segment's memory pool: (0, 0) is the default pool; any other id pair is a private pool
// (CUDA graphs, torch.cuda.MemPool). From the trace's entries where PyTorch records it, else
// the final state's segments; null when neither names it. Pure.
/** @param {number[] | null} pool */
export function poolText(pool) {
  if (!pool) return "unknown (not recorded in this trace)";
  return pool[0] || pool[1] ? `private (${pool[0]}, ${pool[1]})` : "default (0, 0)";
}

// Open (or refresh) the card at `event` of `pane`.
/**
 * @param {import("./pane/pane.js").Pane} pane
 * @param {number} event
 */
export async function openState(pane, event) {
  const card = $("#state");
  card.hidden = false;
  state.allocator = { pane, event, data: null };
  try {
    /** @type {import("./types.js").StateAnswer} */
    const d = await getJSON(`/api/d/${pane.device}/state?snap=${pane.s}&event=${event}`);
    if (!state.allocator || state.allocator.event !== event || state.allocator.pane !== pane)
      return;
    state.allocator.data = d;
    renderState();
  } catch (e) {
    $(".body", card).replaceChildren(el("div", "warn", /** @type {Error} */ (e).message));
  }
}

// The timeline cursor moved (cursor.js): follow it while the card is open.
/**
 * @param {import("./pane/pane.js").Pane} pane
 * @param {number} event
 */
export function followCursor(pane, event) {
  if (
    !$("#state").hidden &&
    (!state.allocator || state.allocator.event !== event || state.allocator.pane !== pane)
  )
    openState(pane, event);
}

function renderState() {
  const a = state.allocator;
  if (!a || !a.data) return; // (called once the card's answer is in)
  const d = a.data,
    body = $("#state .body");
  body.replaceChildren();
  $("#state-event").textContent =
    d.event < 0
      ? "before the first event"
      : `after event ${fmtInt(d.event)}${d.action ? ` (${d.action})` : ""}`;
  const dl = el("dl", "kv");
  kv(dl, "reserved", `${fmtBytes(d.segments_bytes)} in ${fmtInt(d.n_segments)} segments`);
  kv(dl, "allocated", `${fmtBytes(d.allocated_bytes)} in ${fmtInt(d.n_blocks)} blocks`);
  kv(
    dl,
    "free in segments",
    `${fmtBytes(d.free_bytes)} (largest ${fmtBytes(d.largest_free_bytes)})`,
  );
  kv(dl, "fragmentation", `${(d.fragmentation * 100).toFixed(1)}% (1 − largest free / free)`);
  kv(
    dl,
    "rounding waste",
    `${fmtBytes(d.rounding_waste_bytes)} (blocks rounded up to 512 bytes; part of the free bytes)`,
  );
  if (d.blocks_outside_segments)
    kv(dl, "outside segments", `${fmtInt(d.blocks_outside_segments)} blocks`);
  if (d.inconsistencies) kv(dl, "inconsistencies", fmtInt(d.inconsistencies));
  body.append(dl);
  const cut = d.n_segments - d.segments_shown;
  if (cut > 0 || d.blocks_shown < d.n_blocks) {
    body.append(
      el(
        "div",
        "t-muted",
        `drawn: the ${fmtInt(d.segments_shown)} lowest-addressed segments, ${fmtInt(d.blocks_shown)} of ${fmtInt(d.n_blocks)} blocks`,
      ),
    );
  }
  const cv = el("canvas", "segments");
  cv.setAttribute("aria-label", "segments and blocks");
  body.append(cv);
  body.append(
    el(
      "div",
      "t-muted",
      "one row per segment (by address), as long as its size; blocks in the accent colour, pending frees (another stream) in orange, free space grey; a dark edge under a row marks a private pool. Click a block for its allocation.",
    ),
  );
  drawState(cv, d);
  if (d.settings.length) {
    const det = el("details");
    det.append(el("summary", null, `allocator settings (${d.settings.length})`));
    const sl = el("dl", "kv");
    for (const [k, v] of d.settings) kv(sl, k, v);
    det.append(sl);
    body.append(det);
  }
  cv.addEventListener("mousemove", (e) => {
    const r = cv.getBoundingClientRect(),
      h = stateHit(d, e.clientX - r.left, e.clientY - r.top, r.width);
    if (!h) {
      hideTooltip();
      return;
    }
    const s = h.seg,
      /** @type {[string, string][]} */
      lines = [];
    if (h.block) {
      lines.push(["t-size", `${fmtBytes(h.block.size)} block at ${h.block.address}`]);
      lines.push([
        "t-muted",
        `${h.block.state === "active_pending_free" ? "freed, pending (another stream)" : "allocated"} · allocation row ${h.block.row}`,
      ]);
    }
    lines.push([
      "t-muted",
      `segment ${s.address}: ${fmtBytes(s.size)}, ${fmtBytes(s.free_bytes)} free (largest ${fmtBytes(s.largest_free_bytes)}), ${fmtInt(s.blocks_total)} blocks, stream ${s.stream}${s.is_expandable ? ", expandable" : ""}`,
    ]);
    lines.push(["t-muted", `pool: ${poolText(s.pool)}`]);
    showTooltip(e, lines);
  });
  cv.addEventListener("mouseleave", hideTooltip);
  cv.addEventListener("click", (e) => {
    const r = cv.getBoundingClientRect(),
      h = stateHit(d, e.clientX - r.left, e.clientY - r.top, r.width);
    if (h && h.block) pin(a.pane, h.block.row);
  });
}

/**
 * @param {HTMLCanvasElement} cv
 * @param {import("./types.js").StateAnswer} d
 */
function drawState(cv, d) {
  const w = Math.max(100, Math.floor((cv.parentElement && cv.parentElement.clientWidth) || 400));
  const h = Math.max(1, d.segments.length * (ROW_H + ROW_GAP));
  cv.style.height = `${h}px`;
  cv.width = Math.round(w * dpr());
  cv.height = Math.round(h * dpr());
  const ctx = context2d(cv);
  ctx.setTransform(dpr(), 0, 0, dpr(), 0, 0);
  const maxSize = d.segments.reduce((m, s) => Math.max(m, s.size), 1);
  d.segments.forEach((s, i) => {
    const y = i * (ROW_H + ROW_GAP);
    ctx.fillStyle = col("--small");
    ctx.fillRect(0, y, Math.max(2, (s.size / maxSize) * w), ROW_H);
    if (s.pool && (s.pool[0] || s.pool[1])) {
      // a private pool: a dark edge under the row
      ctx.fillStyle = col("--fg");
      ctx.fillRect(0, y + ROW_H - 2, Math.max(2, (s.size / maxSize) * w), 2);
    }
    for (const b of s.blocks) {
      const [x0, x1] = blockSpan(s, b, maxSize, w);
      ctx.fillStyle = b.state === "active_pending_free" ? "#f28e2b" : col("--accent");
      ctx.fillRect(x0, y, x1 - x0 > 3 ? x1 - x0 - 1 : x1 - x0, ROW_H); // neighbours stay apart
    }
  });
}
