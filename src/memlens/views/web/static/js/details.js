// @ts-check
// The details card of a pinned allocation: its figures and its stacks.
import { getJSON } from "./api.js";
import { $, el } from "./dom.js";
import { fmtBytes, fmtInt, fmtSeconds } from "./format.js";
import { state } from "./state.js";

// a definition-list entry, left out when there is no value
/**
 * @param {HTMLElement} dl
 * @param {string} k
 * @param {unknown} v
 */
export function kv(dl, k, v) {
  if (v === null || v === undefined || v === "") return;
  dl.append(el("dt", null, k), el("dd", null, v));
}
/**
 * @param {import("./pane/pane.js").Pane} p
 * @param {import("./types.js").EventInfo | null} info
 */
function whenText(p, info) {
  if (!info) return null;
  const t =
    info.time_us !== null && p.hasTime ? ` · +${fmtSeconds(info.time_us - p.timeOrigin)}` : "";
  return `event ${fmtInt(info.event)}${t}`;
}
/** @param {import("./types.js").StackFrame} f */
function frameItem(f) {
  const li = el("li");
  li.append(el("span", "fn", f.name), el("span", "loc", `  ${f.filename}:${f.line}`));
  return li;
}
/** @param {import("./types.js").StackFrame[]} frames */
function stackBlock(frames) {
  const box = el("div");
  if (!frames.length) {
    box.append(
      el(
        "div",
        "t-muted",
        "No stack recorded (history enabled late, context too weak, or a block known only from the final state).",
      ),
    );
    return box;
  }
  const py = frames.filter((f) => f.kind === "python");
  const ul = el("ul", "frames");
  for (const f of py) ul.append(frameItem(f));
  if (py.length) box.append(ul);
  else box.append(el("div", "t-muted", "No Python frames (e.g. autograd's backward thread)."));
  const other = frames.length - py.length;
  if (other) {
    const det = el("details");
    det.append(
      el(
        "summary",
        null,
        `full stack with ${other} C++/interpreter frame${other > 1 ? "s" : ""} (${frames.length} frames)`,
      ),
    );
    const all = el("ul", "frames");
    for (const f of frames) {
      const li = frameItem(f);
      if (f.kind !== "python") li.classList.add("loc");
      all.append(li);
    }
    det.append(all);
    box.append(det);
  }
  return box;
}

/**
 * @param {import("./pane/pane.js").Pane} pane
 * @param {number} row
 */
export async function pin(pane, row) {
  state.pinned = { pane, row };
  for (const p of state.panes) p.draw();
  const card = $("#details"),
    body = $(".body", card);
  card.hidden = false;
  try {
    /** @type {import("./types.js").AllocationAnswer} */
    const a = await getJSON(`/api/d/${pane.device}/alloc/${row}?snap=${pane.s}`);
    if (!state.pinned || state.pinned.row !== row) return;
    body.replaceChildren();
    const dl = el("dl", "kv");
    kv(dl, "size", `${fmtBytes(a.size)} (${fmtInt(a.size)} bytes)`);
    kv(dl, "address", `${a.address} version ${a.version}`);
    kv(dl, "allocated", a.alloc ? whenText(pane, a.alloc) : "before the trace began");
    kv(dl, "free requested", whenText(pane, a.free_requested));
    kv(dl, "freed", a.free ? whenText(pane, a.free) : "still allocated at the end");
    kv(dl, "stream", a.stream);
    kv(
      dl,
      "pool",
      a.pool
        ? `(${a.pool[0]}, ${a.pool[1]})${a.pool[0] || a.pool[1] ? " private" : " default"}`
        : "unknown (not recorded in this trace)",
    );
    kv(dl, "compile context", a.compile_context);
    kv(dl, "user metadata", a.user_metadata);
    kv(dl, "flags", a.flags.join(", "));
    kv(dl, "row", String(a.row));
    body.append(dl);
    body.append(
      el(
        "h3",
        null,
        a.stack_from_free
          ? "Stack (alloc not recorded; stack of the free)"
          : "Stack (innermost first)",
      ),
    );
    body.append(stackBlock(a.frames));
    if (a.free_frames) {
      const det = el("details");
      det.append(el("summary", null, "stack of the free"));
      det.append(stackBlock(a.free_frames));
      body.append(det);
    }
    if (a.forward_frames) {
      body.append(el("h3", null, "Forward pass stack (where this tensor was created)"));
      body.append(el("pre", "fwd", a.forward_frames));
    }
  } catch (e) {
    body.replaceChildren(el("div", "warn", /** @type {Error} */ (e).message));
  }
}
