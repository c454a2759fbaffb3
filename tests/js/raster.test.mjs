// Unit tests of the chart's band raster (static/js/pane/raster.js): exact coverage per
// pixel, the mix where bands share a row, opacity where the stack covers a pixel.
// Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import { hexRgb, rasterBands } from "./static.mjs";

// bands as the API sends them (one run each unless run_start says otherwise)
function bands({ c0, c1, size, runCol, runOff, runStart }) {
  return { row: c0.map((_, k) => k), c0, c1, size, group: c0.map(() => 0),
           run_start: runStart, run_col: runCol, run_off: runOff }; // prettier-ignore
}
const px = (out, w, x, row) => Array.from(out.slice((row * w + x) * 4, (row * w + x) * 4 + 4));
// 1 byte = 1 pixel, the chart 4 pixels tall: offset 0 at the bottom
const y = (bytes) => 4 - bytes;
const RED = { rgb: [255, 0, 0] },
  BLUE = { rgb: [0, 0, 255] };

test("hexRgb reads #rrggbb", () => {
  assert.deepEqual(hexRgb("#4e79a7"), [0x4e, 0x79, 0xa7]);
  assert.deepEqual(hexRgb("#000000"), [0, 0, 0]);
});

test("a band on whole pixels fills them, opaque, and nothing else", () => {
  const b = bands({ c0: [1], c1: [3], size: [2], runCol: [1], runOff: [1], runStart: [0, 1] });
  const out = rasterBands(b, 4, 4, 1, y, () => RED);
  // bytes [1, 3) are rows 1 and 2 (row 0 is the top); columns 1 and 2
  for (let row = 0; row < 4; row++)
    for (let x = 0; x < 4; x++) {
      const inside = row >= 1 && row <= 2 && x >= 1 && x <= 2;
      assert.deepEqual(px(out, 4, x, row), inside ? [255, 0, 0, 255] : [0, 0, 0, 0], `${x},${row}`);
    }
});

test("bands sharing a pixel row mix their colours by coverage and leave it opaque", () => {
  // red [0, 1.5), blue [1.5, 3): row 2 (bytes 1-2) is half of each
  const b = bands({ c0: [0, 0], c1: [1, 1], size: [1.5, 1.5], runCol: [0, 0],
                    runOff: [0, 1.5], runStart: [0, 1, 2] }); // prettier-ignore
  const out = rasterBands(b, 1, 4, 1, y, (k) => (k ? BLUE : RED));
  assert.deepEqual(px(out, 1, 0, 3), [255, 0, 0, 255]);
  assert.deepEqual(px(out, 1, 0, 2), [128, 0, 128, 255]); // 127.5 each, rounded
  assert.deepEqual(px(out, 1, 0, 1), [0, 0, 255, 255]);
  assert.deepEqual(px(out, 1, 0, 0), [0, 0, 0, 0]);
});

test("a pixel the stack covers in part keeps the band's colour at that opacity", () => {
  const b = bands({ c0: [0], c1: [1], size: [1.25], runCol: [0], runOff: [0], runStart: [0, 1] });
  const out = rasterBands(b, 1, 4, 1, y, () => BLUE);
  assert.deepEqual(px(out, 1, 0, 3), [0, 0, 255, 255]);
  assert.deepEqual(px(out, 1, 0, 2), [0, 0, 255, 64]); // a quarter: 63.75
});

test("a band of several runs follows each run's offset, and the canvas clips it", () => {
  // columns 0-1 at offset 0, columns 2-3 at offset 3 (its top, 5, is above the chart)
  const b = bands({ c0: [0], c1: [4], size: [2], runCol: [0, 2], runOff: [0, 3],
                    runStart: [0, 2] }); // prettier-ignore
  const out = rasterBands(b, 4, 4, 1, y, () => RED);
  const covered = (x, row) => px(out, 4, x, row)[3] === 255;
  assert.deepEqual(
    [0, 1, 2, 3].map((row) => covered(0, row)),
    [false, false, true, true],
  );
  assert.deepEqual(
    [0, 1, 2, 3].map((row) => covered(3, row)),
    [true, false, false, false],
  );
});

test("device pixels: two per column and per pixel down", () => {
  const b = bands({ c0: [1], c1: [2], size: [1], runCol: [1], runOff: [0], runStart: [0, 1] });
  const out = rasterBands(b, 4, 8, 2, y, () => RED);
  const covered = [];
  for (let row = 0; row < 8; row++)
    for (let x = 0; x < 4; x++) if (px(out, 4, x, row)[3]) covered.push(`${x},${row}`);
  assert.deepEqual(covered, ["2,6", "3,6", "2,7", "3,7"]);
});

test("a tiled paint repeats its tile from the canvas origin, each tile pixel scale wide", () => {
  // a 2 x 2 tile: white, black / black, white
  const tile = new Uint8ClampedArray([255, 255, 255, 255, 0, 0, 0, 255,
                                      0, 0, 0, 255, 255, 255, 255, 255]); // prettier-ignore
  const b = bands({ c0: [0], c1: [4], size: [4], runCol: [0], runOff: [0], runStart: [0, 1] });
  const out = rasterBands(b, 4, 4, 1, y, () => ({ tile, size: 2, scale: 1 }));
  assert.deepEqual(px(out, 4, 0, 0), [255, 255, 255, 255]);
  assert.deepEqual(px(out, 4, 1, 0), [0, 0, 0, 255]);
  assert.deepEqual(px(out, 4, 2, 1), [0, 0, 0, 255]);
  assert.deepEqual(px(out, 4, 3, 3), [255, 255, 255, 255]);
  const wide = rasterBands(b, 4, 4, 1, y, () => ({ tile, size: 2, scale: 2 }));
  assert.deepEqual(
    [0, 1, 2, 3].map((x) => px(wide, 4, x, 0)[0]),
    [255, 255, 0, 0],
  );
});

test("a tiled paint over part of a pixel adds its tile pixel's share", () => {
  const tile = new Uint8ClampedArray([0, 255, 0, 255]); // one green pixel
  // green [0, 1.5) beside red [1.5, 3): row 2 half of each
  const b = bands({ c0: [0, 0], c1: [1, 1], size: [1.5, 1.5], runCol: [0, 0],
                    runOff: [0, 1.5], runStart: [0, 1, 2] }); // prettier-ignore
  const out = rasterBands(b, 1, 4, 1, y, (k) => (k ? RED : { tile, size: 1, scale: 1 }));
  assert.deepEqual(px(out, 1, 0, 3), [0, 255, 0, 255]);
  assert.deepEqual(px(out, 1, 0, 2), [128, 128, 0, 255]);
});

test("bands that overlap mix where one covers a pixel whole and the other in part", () => {
  // red [0, 2), blue [1.5, 2.5) over it: row 2 is red whole and half blue
  const b = bands({ c0: [0, 0], c1: [1, 1], size: [2, 1], runCol: [0, 0],
                    runOff: [0, 1.5], runStart: [0, 1, 2] }); // prettier-ignore
  const out = rasterBands(b, 1, 4, 1, y, (k) => (k ? BLUE : RED));
  assert.deepEqual(px(out, 1, 0, 2), [170, 0, 85, 255]); // (255 + 0) / 1.5, (0 + 127.5) / 1.5
  assert.deepEqual(px(out, 1, 0, 1), [0, 0, 255, 128]); // blue's half of row 1
});
