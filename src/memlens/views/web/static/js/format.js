// @ts-check
// Number formatting for the page: bytes in binary units, counts, durations, tick labels.
// Pure functions (no DOM), unit-tested by tests/js/format.test.mjs.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/** @param {number} n */
export function fmtBytes(n, precision = 2) {
  const sign = n < 0 ? "-" : "";
  let v = Math.abs(n);
  for (const u of UNITS) {
    if (v < 1024 || u === "PiB")
      return u === "B" ? `${sign}${Math.round(v)} B` : `${sign}${v.toFixed(precision)} ${u}`;
    v /= 1024;
  }
  return String(n);
}

// Whole numbers are grouped here rather than by toLocaleString, whose first call in a page
// loads the locale's data: 30-120 ms before the first viewport could be asked for (the
// pane's device list is labelled with event counts). Anything else, as toLocaleString says.
/** @param {number | string} n */
export function fmtInt(n) {
  const x = Number(n);
  if (!Number.isSafeInteger(x) || Object.is(x, -0)) return x.toLocaleString("en-US");
  return String(x).replace(/\B(?=(\d{3})+$)/g, ",");
}

/** @param {number} us */
export function fmtSeconds(us) {
  const s = us / 1e6;
  const a = Math.abs(s);
  if (a >= 100) return `${s.toFixed(1)} s`;
  if (a >= 1) return `${s.toFixed(3)} s`;
  if (a >= 1e-3) return `${(s * 1e3).toFixed(3)} ms`;
  return `${Math.round(us)} µs`;
}

// a time tick with just enough decimals for the tick spacing (both in microseconds)
/**
 * @param {number} us
 * @param {number} step
 */
export function fmtTick(us, step) {
  const [div, unit] = step >= 1e5 ? [1e6, "s"] : step >= 100 ? [1e3, "ms"] : [1, "µs"];
  const digits = Math.min(6, Math.max(0, Math.ceil(-Math.log10(step / div) - 1e-9)));
  return `${(us / div).toFixed(digits)} ${unit}`;
}

/** @param {number} n */
export function fmtEventCount(n) {
  const a = Math.abs(n);
  if (a >= 1e6) return `${(n / 1e6).toFixed(a >= 1e7 ? 1 : 2)}M`;
  if (a >= 1e4) return `${(n / 1e3).toFixed(a >= 1e5 ? 0 : 1)}k`;
  return String(Math.round(n));
}
