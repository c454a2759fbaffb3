// Unit tests of the pure parts of the tooltip and the live tree (static/js/tooltip.js,
// static/js/live_tree.js). Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  hatchReasons,
  hatchSummary,
  nodeName,
  passChain,
  shortSite,
  shownChain,
  siteParts,
  splitLabel,
  subtreeMatches,
  tooltipLines,
  uniqueSuffixes,
} from "./static.mjs";

const node = (label, bytes, children = []) => ({ label, bytes, children });

test("tooltipLines: a band's size, site, flags and moment", () => {
  const h = {
    kind: "band",
    size: 1536,
    label: "train.py:3 step",
    flags: 1 | 2 | 8,
    event: 5,
    active: 2048,
    reserved: 4096,
  };
  assert.deepEqual(tooltipLines(h), [
    ["t-size", "1.50 KiB"],
    ["t-site", "train.py:3 step"],
    [
      "t-muted",
      "alive before the trace (from the final segments); freed but pending (another stream)",
    ],
    ["t-muted", "after event 5 · active 2.00 KiB · reserved 4.00 KiB"],
  ]);
  assert.deepEqual(tooltipLines({ ...h, flags: 1 })[2], ["t-muted", "allocated before the trace"]);
  assert.equal(tooltipLines({ ...h, flags: 0 }).length, 3);
});

test("tooltipLines: the aggregate band says its share, and why, and an empty spot", () => {
  const small = {
    kind: "small",
    count: 1234,
    sbytes: 4096,
    cut: 0,
    cutBytes: 0,
    minSize: 64,
    event: -1,
    active: 8192,
    reserved: 1024,
  };
  assert.deepEqual(tooltipLines(small), [
    ["t-size", "hatched: 1,234 allocations summed, 4.00 KiB (50% of this column)"],
    [
      "t-muted",
      "each under 64 B, a 16th of a pixel here (4.00 KiB): Shift + wheel zooms the memory axis to separate them",
    ],
    ["t-muted", "before the first event · active 8.00 KiB · reserved 1.00 KiB"],
  ]);
  assert.deepEqual(tooltipLines({ kind: "empty", event: 0, active: 1, reserved: 2 }), [
    ["t-muted", "after event 0 · active 1 B · reserved 2 B"],
  ]);
});

test("hatchReasons: zoom in on time only for what the budget left out", () => {
  assert.deepEqual(hatchReasons(10, 10, 3072, 3072, 64), [
    "10 of them (3.00 KiB) left out to bound the drawing at this zoom: zoom in on time to separate them",
  ]);
  assert.deepEqual(hatchReasons(10, 4, 2048, 3072, 64), [
    "4 of them (2.00 KiB) left out to bound the drawing at this zoom: zoom in on time to separate them",
    "6 under 64 B, a 16th of a pixel here (1.00 KiB): Shift + wheel zooms the memory axis to separate them",
  ]);
  assert.deepEqual(hatchReasons(0, 0, 0, 0, 64), []);
});

test("hatchSummary: share and count at the tallest column, empty when nothing is hatched", () => {
  const v = {
    active: [100, 400, 200],
    bytes_per_px: 2,
    small: {
      bytes: [0, 100, 50],
      count: [0, 7, 3],
      cut_count: [0, 2, 0],
      cut_bytes: [0, 60, 0],
      min_size: 1,
    },
  };
  assert.equal(
    hatchSummary(v),
    "Hatched band at the tallest column: 25% of it, 100 B in 7 allocations (2 B a pixel here). " +
      "2 of them (60 B) left out to bound the drawing at this zoom: zoom in on time to separate them; " +
      "5 under 1 B, a 16th of a pixel here (40 B): Shift + wheel zooms the memory axis to separate them.",
  );
  assert.equal(
    hatchSummary({ ...v, small: { ...v.small, count: [0, 0, 0], bytes: [0, 0, 0] } }),
    "",
  );
});

test("passChain: the run of frames that pass all their bytes to one callee", () => {
  const leaf = node("leaf", 10);
  const c = node("c", 10, [leaf]);
  const b = node("b", 10, [c]);
  const a = node("a", 10, [b]);
  assert.deepEqual(
    passChain(a).map((n) => n.label),
    ["a", "b", "c", "leaf"],
  );
  // a split, or bytes kept by the caller, ends the run
  const split = node("s", 10, [node("x", 5), node("y", 5)]);
  assert.deepEqual(
    passChain(node("top", 10, [split])).map((n) => n.label),
    ["top", "s"],
  );
  assert.deepEqual(
    passChain(node("keeps", 12, [b])).map((n) => n.label),
    ["keeps"],
  );
  assert.deepEqual(
    passChain(node("alone", 3)).map((n) => n.label),
    ["alone"],
  );
});

test("subtreeMatches: the node or anything under it (case-folded query)", () => {
  const t = node("Model.forward", 10, [node("linear", 6, [node("matmul", 6)]), node("relu", 4)]);
  assert.ok(subtreeMatches(t, "model"));
  assert.ok(subtreeMatches(t, "matmul"));
  assert.ok(!subtreeMatches(t, "conv"));
  assert.ok(!subtreeMatches(t.children[1], "matmul"));
  assert.ok(subtreeMatches({ label: "no children key" }, "children"));
});

test("shownChain: a search keeps the folding of the frames before the first match", () => {
  const leaf = node("leaf", 10);
  const d = node("d", 10, [leaf]);
  const c = node("match_me", 10, [d]);
  const b = node("b", 10, [c]);
  const a = node("a", 10, [b]);
  assert.deepEqual(
    shownChain(a, "").map((n) => n.label),
    ["a", "b", "match_me", "d", "leaf"],
  );
  assert.deepEqual(
    shownChain(a, "match").map((n) => n.label),
    ["a", "b", "match_me"],
  );
  assert.deepEqual(
    shownChain(a, "zzz").map((n) => n.label),
    ["a", "b", "match_me", "d", "leaf"],
  );
});

test("splitLabel / shortSite: the location that tells rows apart stays whole", () => {
  assert.deepEqual(splitLabel("train_step (train.py:30)"), ["train_step", " (train.py:30)"]);
  assert.deepEqual(splitLabel("<no stack recorded>"), ["<no stack recorded>", ""]);
  assert.deepEqual(splitLabel("f (a (b).py:3)"), ["f (a (b).py:3)", ""]);
  assert.equal(shortSite("step (/home/u/proj/train.py:30)"), "step (train.py:30)");
  assert.equal(shortSite("step (train.py:30)"), "step (train.py:30)");
  assert.equal(
    shortSite("<no Python frames: C++ / backward>"),
    "<no Python frames: C++ / backward>",
  );
  // the compare table's three parts: the line number is never cut
  assert.deepEqual(siteParts("forward (/h/u/transformer.py:22)"), [
    "forward",
    "(transformer.py",
    ":22)",
  ]);
  assert.deepEqual(siteParts("<no stack recorded>"), ["<no stack recorded>", "", ""]);
});

test("nodeName: an autograd node by its own name, any other name whole", () => {
  assert.equal(nodeName("torch::autograd::generated::MmBackward0::apply"), "MmBackward0");
  assert.equal(nodeName("torch::autograd::AccumulateGrad::apply"), "AccumulateGrad");
  assert.equal(nodeName("torch::autograd::CppNode<MyFn>::apply"), "CppNode<MyFn>");
  assert.equal(nodeName("mylib::FooBackward1::apply"), "FooBackward1");
  // a forward entry and the engine's own work are not nodes
  assert.equal(
    nodeName("torch::autograd::Function<MyFn>::apply"),
    "torch::autograd::Function<MyFn>::apply",
  );
  assert.equal(
    nodeName("torch::autograd::InputMetadata::reduce_grad"),
    "torch::autograd::InputMetadata::reduce_grad",
  );
});

test("uniqueSuffixes: the parent folders that tell equal basenames apart", () => {
  const got = uniqueSuffixes([
    "/site-packages/torch/optim/optimizer.py",
    "/home/u/mylib/optimizer.py",
    "/home/u/train.py",
    "/home/u/train.py",
    "a/x.py",
    "b/a/x.py",
  ]);
  assert.deepEqual(Object.fromEntries(got), {
    "/site-packages/torch/optim/optimizer.py": "optim/optimizer.py",
    "/home/u/mylib/optimizer.py": "mylib/optimizer.py",
    "/home/u/train.py": "train.py",
    "a/x.py": "a/x.py", // a suffix of another path: whole
    "b/a/x.py": "b/a/x.py",
  });
});
