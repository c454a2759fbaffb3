// @ts-check
// Colour per call site (stable across views: keyed by frame id), tableau-like palette.
// No greys: grey is the aggregate band's (hatched) colour, so a band never looks like it.
export const PALETTE = [
  "#4e79a7",
  "#f28e2b",
  "#e15759",
  "#76b7b2",
  "#59a14f",
  "#edc948",
  "#b07aa1",
  "#ff9da7",
  "#9c755f",
  "#8cd17d",
  "#86bcb6",
  "#f1ce63",
  "#a0cbe8",
  "#ffbe7d",
  "#d37295",
  "#499894",
];
export const NO_STACK = "#5b6b8c"; // allocations without a recorded stack (e.g. before the trace)

/** @param {number} frameId */
export function siteColor(frameId) {
  if (frameId < 0) return NO_STACK;
  const h = Math.imul(frameId + 1, 2654435761) >>> 0;
  return PALETTE[h % PALETTE.length];
}
