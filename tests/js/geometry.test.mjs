// Unit tests of the chart's pure geometry (static/js/pane/geometry.js, colour.js, and
// input.js's bandOffset) and the API's URL builders (static/js/api.js).
// Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  annotationLevels,
  bandOffset,
  lowerBound,
  narrowerAtPeak,
  NO_STACK,
  PALETTE,
  rangeQuery,
  siteColor,
  viewUrl,
  xTickStep,
  yTicks,
} from "./static.mjs";

test("lowerBound: first index at or after `from` whose value is >= x", () => {
  const a = [1, 3, 3, 5];
  assert.equal(lowerBound(a, 0, 0), 0);
  assert.equal(lowerBound(a, 3, 0), 1);
  assert.equal(lowerBound(a, 4, 0), 3);
  assert.equal(lowerBound(a, 6, 0), 4);
  assert.equal(lowerBound(a, 0, 2), 2);
  assert.equal(lowerBound(new Float64Array([0.5, 1.5]), 1, 0), 1);
});

test("annotationLevels: spans by depth (four shown), per axis, in span order", () => {
  const spans = [
    { depth: 0, e0: 0, e1: 10, t0: 100, t1: 200 },
    { depth: 1, e0: 2, e1: 4, t0: 120, t1: 140 },
    { depth: 0, e0: 20, e1: 30, t0: 300, t1: 400 },
    { depth: 4, e0: 3, e1: 3, t0: 130, t1: 131 }, // too deep for the strip
  ];
  const lv = annotationLevels(spans);
  assert.equal(lv.event.length, 2);
  assert.equal(lv.time.length, 2);
  assert.deepEqual([...lv.event[0].start], [0, 20]);
  assert.deepEqual([...lv.event[0].end], [10, 30]);
  assert.deepEqual([...lv.event[0].index], [0, 2]);
  assert.deepEqual([...lv.time[0].start], [100, 300]);
  assert.deepEqual([...lv.time[1].end], [140]);
  assert.deepEqual([...lv.time[1].index], [1]);
  assert.deepEqual(annotationLevels([]), { time: [], event: [] });
});

test("yTicks: power-of-two steps, three to six ticks, decimals that tell them apart", () => {
  assert.deepEqual(yTicks(0, 2 ** 30), { step: 2 ** 28, digits: 1 });
  assert.deepEqual(yTicks(0, 1000), { step: 256, digits: 0 });
  // a y zoom on 28.0 .. 28.4 GiB: 128 MiB steps, one decimal of GiB
  assert.deepEqual(yTicks(28 * 2 ** 30, 28.4 * 2 ** 30), { step: 2 ** 27, digits: 1 });
});

test("xTickStep: 1, 2 or 5 times a power of ten, about 110 px apart", () => {
  assert.equal(xTickStep(1000, 1100), 100);
  assert.equal(xTickStep(1000, 550), 200);
  assert.equal(xTickStep(1000, 330), 500);
  assert.equal(xTickStep(7, 1000), 1);
});

test("siteColor: stable per frame id, from the palette; no stack has its own colour", () => {
  assert.equal(siteColor(-1), NO_STACK);
  assert.equal(siteColor(0), "#f28e2b");
  assert.equal(siteColor(1), "#e15759");
  for (let f = 0; f < 100; f++) assert.ok(PALETTE.includes(siteColor(f)));
  assert.ok(!PALETTE.includes(NO_STACK));
});

test("rangeQuery and viewUrl: the viewport request", () => {
  assert.equal(rangeQuery(0, 10, "event"), "e0=0&e1=10");
  assert.equal(rangeQuery(5, 7.5, "time"), "t0=5&t1=7.5");
  assert.equal(
    viewUrl(0, 1, 0, 100, "event", 800, 400),
    "/api/d/1/view?snap=0&e0=0&e1=100&width=800&height=400",
  );
  assert.equal(
    viewUrl(1, 0, 0, 100, "event", 800, 400, { yzoom: [10.4, 99.6] }),
    "/api/d/0/view?snap=1&e0=0&e1=100&width=800&height=400&ymin=10&ymax=100",
  );
  assert.equal(
    viewUrl(0, 0, 3, 9, "time", 500, 40, { detail: false }),
    "/api/d/0/view?snap=0&t0=3&t1=9&width=500&height=40&detail=0",
  );
  assert.equal(
    viewUrl(0, 0, 3, 9, "event", 500, 40, { q: "a&b c" }),
    "/api/d/0/view?snap=0&e0=3&e1=9&width=500&height=40&q=a%26b%20c",
  );
  assert.equal(
    viewUrl(0, 0, 3, 9, "event", 500, 40, { split: true }),
    "/api/d/0/view?snap=0&e0=3&e1=9&width=500&height=40&split=stream",
  );
});

test("bandOffset: a band's bottom offset at a column, from its runs", () => {
  // band 0: offset 0 from column 0, 100 from column 5; band 1: offset 50 from column 2
  const b = { run_start: [0, 2, 3], run_col: [0, 5, 2], run_off: [0, 100, 50] };
  assert.equal(bandOffset(b, 0, 0), 0);
  assert.equal(bandOffset(b, 0, 4), 0);
  assert.equal(bandOffset(b, 0, 5), 100);
  assert.equal(bandOffset(b, 0, 9), 100);
  assert.equal(bandOffset(b, 1, 2), 50);
  assert.equal(bandOffset(b, 1, 7), 50);
  // the runs after band 0's do not ascend from its columns (band 1 starts at column 3, or,
  // with streams drawn apart, a later lane's band earlier): the search stays in its own
  const c = {
    run_start: [0, 3, 6],
    run_col: [2, 4, 6, 3, 7, 9],
    run_off: [0, 10, 20, 30, 40, 50],
  };
  assert.equal(bandOffset(c, 0, 4), 10); // was 20: a search over [2, 4, 6, 3, 7, 9]
  assert.equal(bandOffset(c, 0, 5), 10);
  assert.equal(bandOffset(c, 0, 6), 20);
  assert.equal(bandOffset(c, 1, 6), 30);
  assert.equal(bandOffset(c, 1, 8), 40);
  assert.equal(bandOffset(c, 1, 9), 50);
});

test("narrowerAtPeak: a tenth of the range around the peak while its column has cut allocations", () => {
  const v = { vx0: 0, vx1: 1000, width: 10, small: { cut_count: [0, 0, 0, 0, 0, 3, 0, 0, 0, 0] } };
  assert.deepEqual(narrowerAtPeak(v, 550, 4), [500, 600]); // column 5 sums 3 it would draw
  assert.equal(narrowerAtPeak(v, 450, 4), null); // column 4: nothing cut, stay
  assert.equal(narrowerAtPeak({ ...v, vx1: 30 }, 16.5, 4), null); // cannot shrink past 4
  assert.equal(narrowerAtPeak({ ...v, small: null }, 550, 4), null);
});
