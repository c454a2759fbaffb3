// Unit tests of the Allocator State card's geometry (static/js/allocator.js).
// Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import { blockSpan, poolText, stateHit } from "./static.mjs";

const seg = (size, blocks) => ({
  size,
  blocks: blocks.map(([offset, s, row]) => ({ offset, size: s, row })),
});

test("blockSpan: bars as long as the segment relative to the largest; blocks at least 1 px", () => {
  const big = seg(1000, [[0, 500, 0]]),
    small = seg(100, [[50, 1, 1]]);
  assert.deepEqual(blockSpan(big, big.blocks[0], 1000, 200), [0, 100]);
  // 100 bytes of 1000 over 200 px: a 20 px bar; a 1-byte block at offset 50 -> x 10, 1 px wide
  assert.deepEqual(blockSpan(small, small.blocks[0], 1000, 200), [10, 11]);
});

test("stateHit: the row by y (10 px rows, 3 px gaps), the block by x, the bar's free space", () => {
  const st = { segments: [seg(1000, [[0, 500, 7]]), seg(100, [[50, 1, 9]])] };
  assert.equal(stateHit(st, 50, 5, 200).block.row, 7);
  assert.equal(stateHit(st, 150, 5, 200).block, null); // free space of segment 0
  assert.equal(stateHit(st, 150, 11, 200), null); // the gap between rows
  assert.equal(stateHit(st, 10.5, 14, 200).block.row, 9);
  assert.equal(stateHit(st, 30, 14, 200), null); // past the 20 px bar of segment 1
  assert.equal(stateHit(st, 10, 40, 200), null); // below the last row
});

test("poolText: default, private, unknown", () => {
  assert.equal(poolText([0, 0]), "default (0, 0)");
  assert.equal(poolText([1, 3]), "private (1, 3)");
  assert.equal(poolText(null), "unknown (not recorded in this trace)");
});
