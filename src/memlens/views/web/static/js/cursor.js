// @ts-check
// The timeline cursor: moving it opens the live tree there, and the Allocator State card,
// while open, follows. The one module that drives both cards, so neither imports the other.
import { followCursor, openState } from "./allocator.js";
import { openLive } from "./live_tree.js";
import { state } from "./state.js";

/**
 * @param {import("./pane/pane.js").Pane} pane
 * @param {number} event
 * @param {number} [u] where on the pane's axis (the live tree's marker)
 */
export function moveCursor(pane, event, u) {
  openLive(pane, event, u);
  followCursor(pane, event);
}

/**
 * Step the cursor (and the card, and the live tree) by `delta` events.
 * @param {number} delta
 */
export async function stepState(delta) {
  const a = state.allocator;
  if (!a) return;
  const n = a.pane.dm.n_events;
  const event = Math.min(Math.max(a.event + delta, -1), n - 1);
  if (event === a.event) return;
  await openState(a.pane, event);
  const d = state.allocator && state.allocator.data;
  if (!d) return;
  const u = a.pane.axis === "time" ? (d.time_us ?? a.pane.timeOrigin) : event + 0.5;
  openLive(a.pane, event, u);
}
