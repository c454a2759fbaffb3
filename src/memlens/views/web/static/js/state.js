// The page's shared state: the panes and what is pinned, live or under the mouse.
export const state = {
  meta: null,
  panes: [],
  axis: "event",
  link: true,
  chart: "allocations", // or "segments": the Active Cached Segment Timeline
  find: "", // the find box: frame text or 0x address, highlighted on the timeline
  independentY: false, // compare: each pane fits its own y scale (default: one shared)
  live: null, // {pane, event, u, axis, data, focus: [path of labels]}
  pinned: null, // {pane, row}
  allocator: null, // {pane, event, data}: the Allocator State card
  mouse: null, // {pane, x, y}
  firstPaint: null,
};
window.memlens = state; // for tests and benchmarks
