// @ts-check
// The page's shared state: the panes and what is pinned, live or under the mouse.
/**
 * @typedef {import("./types.js").MetaAnswer} MetaAnswer
 * @typedef {import("./types.js").LiveAnswer} LiveAnswer
 * @typedef {import("./types.js").StateAnswer} StateAnswer
 * @typedef {import("./pane/pane.js").Pane} Pane
 */
export const state = {
  /** @type {MetaAnswer | null} */
  meta: null,
  /** @type {Pane[]} */
  panes: [],
  axis: "event",
  link: true,
  chart: "allocations", // or "segments": the Active Cached Segment Timeline
  find: "", // the find box: frame text or 0x address, highlighted on the timeline
  independentY: false, // compare: each pane fits its own y scale (default: one shared)
  splitStreams: true, // a trace on several streams: a lane per stream (s toggles)
  /** @type {{pane: Pane, event: number, u: number | undefined, axis: string, data: LiveAnswer | null, focus: string[]} | null} */
  live: null, // focus: the path of labels
  /** @type {{pane: Pane, row: number} | null} */
  pinned: null,
  /** @type {{pane: Pane, event: number, data: StateAnswer | null} | null} */
  allocator: null, // the Allocator State card
  /** @type {{pane: Pane, x: number, y: number} | null} */
  mouse: null,
  /** @type {number | null} */
  firstPaint: null, // ms since navigation: the first viewport of every pane drawn
  /** @type {number | null} */
  firstFrame: null, // ms since navigation: the frame showing it rendered
};
/** @type {any} */ (window).memlens = state; // for tests and benchmarks
