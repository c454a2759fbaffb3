// The viewer's modules, imported from the package (one place for the path).
import "./globals.mjs"; // first: state.js sets window.memlens when it is evaluated

export * from "../../src/memlens/views/web/static/js/api.js";
export * from "../../src/memlens/views/web/static/js/format.js";
export * from "../../src/memlens/views/web/static/js/live_tree.js";
export * from "../../src/memlens/views/web/static/js/pane/colour.js";
export * from "../../src/memlens/views/web/static/js/pane/geometry.js";
export { bandOffset } from "../../src/memlens/views/web/static/js/pane/input.js";
export * from "../../src/memlens/views/web/static/js/tooltip.js";
export { blockSpan, poolText, stateHit } from "../../src/memlens/views/web/static/js/allocator.js";
export {
  nodeName,
  shortSite,
  siteParts,
  uniqueSuffixes,
} from "../../src/memlens/views/web/static/js/compare.js";
export { hexRgb, rasterBands } from "../../src/memlens/views/web/static/js/pane/raster.js";
