// Unit tests of the viewer's number formatting (src/memlens/views/web/static/js/format.js).
// Run: node --test tests/js/
import assert from "node:assert/strict";
import { test } from "node:test";

import { fmtBytes, fmtEventCount, fmtInt, fmtSeconds, fmtTick } from "./static.mjs";

test("fmtBytes: binary units, whole bytes below 1 KiB, sign kept", () => {
  assert.equal(fmtBytes(0), "0 B");
  assert.equal(fmtBytes(512.4), "512 B");
  assert.equal(fmtBytes(1023), "1023 B");
  assert.equal(fmtBytes(1024), "1.00 KiB");
  assert.equal(fmtBytes(1536), "1.50 KiB");
  assert.equal(fmtBytes(-2048), "-2.00 KiB");
  assert.equal(fmtBytes(1.5 * 2 ** 30, 1), "1.5 GiB");
  assert.equal(fmtBytes(2 ** 60), "1024.00 PiB"); // PiB is the last unit
});

test("fmtInt: thousands separators", () => {
  assert.equal(fmtInt(1234567), "1,234,567");
  assert.equal(fmtInt("42"), "42");
  assert.equal(fmtInt(-1234567), "-1,234,567");
  assert.equal(fmtInt(999), "999");
  assert.equal(fmtInt(1000), "1,000");
});

test("fmtInt: what toLocaleString('en-US') says, with or without it", () => {
  const values = [
    0,
    -0,
    1,
    -1,
    12,
    123,
    1234,
    -12345,
    123456,
    1234567,
    3967724,
    2 ** 31,
    -(2 ** 40),
    Number.MAX_SAFE_INTEGER,
    -Number.MAX_SAFE_INTEGER,
    2 ** 53,
    1e21,
    1.5,
    1234.5678,
    -0.25,
    NaN,
    Infinity,
    -Infinity,
    "17",
    "1e3",
    "x",
  ];
  for (const v of values) assert.equal(fmtInt(v), Number(v).toLocaleString("en-US"), String(v));
});

test("fmtSeconds: from microseconds, unit by magnitude", () => {
  assert.equal(fmtSeconds(250), "250 µs");
  assert.equal(fmtSeconds(1500), "1.500 ms");
  assert.equal(fmtSeconds(2.5e6), "2.500 s");
  assert.equal(fmtSeconds(1.5e8), "150.0 s");
});

test("fmtTick: as many decimals as the tick spacing needs", () => {
  assert.equal(fmtTick(1_500_000, 500_000), "1.5 s");
  assert.equal(fmtTick(2_000_000, 1_000_000), "2 s");
  assert.equal(fmtTick(2500, 500), "2.5 ms");
  assert.equal(fmtTick(30, 10), "30 µs");
});

test("fmtEventCount: k and M with three significant digits", () => {
  assert.equal(fmtEventCount(999), "999");
  assert.equal(fmtEventCount(9999.6), "10000");
  assert.equal(fmtEventCount(12_345), "12.3k");
  assert.equal(fmtEventCount(123_456), "123k");
  assert.equal(fmtEventCount(1_234_567), "1.23M");
  assert.equal(fmtEventCount(12_345_678), "12.3M");
});
