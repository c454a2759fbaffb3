// Unit tests of the pure parts of the tooltip and the live tree (static/js/tooltip.js,
// static/js/live_tree.js). Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import { passChain, subtreeMatches, tooltipLines } from "./static.mjs";

const node = (label, bytes, children = []) => ({ label, bytes, children });

test("tooltipLines: a band's size, site, flags and moment", () => {
  const h = { kind: "band", size: 1536, site: "train.py:3 step", flags: 1 | 2 | 8, event: 5, active: 2048, reserved: 4096 };
  assert.deepEqual(tooltipLines(h), [
    ["t-size", "1.50 KiB"],
    ["t-site", "train.py:3 step"],
    ["t-muted", "alive before the trace (from the final segments); freed but pending (another stream)"],
    ["t-muted", "after event 5 · active 2.00 KiB · reserved 4.00 KiB"],
  ]);
  assert.deepEqual(tooltipLines({ ...h, flags: 1 })[2], ["t-muted", "allocated before the trace"]);
  assert.equal(tooltipLines({ ...h, flags: 0 }).length, 3);
});

test("tooltipLines: the aggregate band and an empty spot", () => {
  const small = { kind: "small", count: 1234, sbytes: 4096, event: -1, active: 0, reserved: 1024 };
  assert.deepEqual(tooltipLines(small), [
    ["t-size", "1,234 small allocations: 4.00 KiB"],
    ["t-muted", "each under one pixel at this zoom; zoom in to separate them"],
    ["t-muted", "before the first event · active 0 B · reserved 1.00 KiB"],
  ]);
  assert.deepEqual(tooltipLines({ kind: "empty", event: 0, active: 1, reserved: 2 }), [
    ["t-muted", "after event 0 · active 1 B · reserved 2 B"],
  ]);
});

test("passChain: the run of frames that pass all their bytes to one callee", () => {
  const leaf = node("leaf", 10);
  const c = node("c", 10, [leaf]);
  const b = node("b", 10, [c]);
  const a = node("a", 10, [b]);
  assert.deepEqual(passChain(a).map((n) => n.label), ["a", "b", "c", "leaf"]);
  // a split, or bytes kept by the caller, ends the run
  const split = node("s", 10, [node("x", 5), node("y", 5)]);
  assert.deepEqual(passChain(node("top", 10, [split])).map((n) => n.label), ["top", "s"]);
  assert.deepEqual(passChain(node("keeps", 12, [b])).map((n) => n.label), ["keeps"]);
  assert.deepEqual(passChain(node("alone", 3)).map((n) => n.label), ["alone"]);
});

test("subtreeMatches: the node or anything under it (case-folded query)", () => {
  const t = node("Model.forward", 10, [node("linear", 6, [node("matmul", 6)]), node("relu", 4)]);
  assert.ok(subtreeMatches(t, "model"));
  assert.ok(subtreeMatches(t, "matmul"));
  assert.ok(!subtreeMatches(t, "conv"));
  assert.ok(!subtreeMatches(t.children[1], "matmul"));
  assert.ok(subtreeMatches({ label: "no children key" }, "children"));
});
