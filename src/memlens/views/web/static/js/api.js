// @ts-check
// The server's JSON API (memlens/views/web/server.py). URL builders are pure.

/**
 * The answer of a GET; its type is the caller's: an answer of types.js.
 * @template T
 * @param {string} url
 * @returns {Promise<T>}
 */
export async function getJSON(url) {
  const r = await fetch(url);
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
}

// the query parameters of an x range on one axis
/**
 * @param {number} x0
 * @param {number} x1
 * @param {string} axis "time" or "event"
 */
export function rangeQuery(x0, x1, axis) {
  return axis === "time" ? `t0=${x0}&t1=${x1}` : `e0=${x0}&e1=${x1}`;
}

// GET /api/d/{device}/view: the bands of one viewport, `width` x `height` pixels
// (q: the find box, a frame text or a 0x address: the bands get a "match" flag; split:
// a lane per stream, on a trace of several)
/**
 * @param {number} snap
 * @param {number} device
 * @param {number} x0
 * @param {number} x1
 * @param {string} axis
 * @param {number} width
 * @param {number} height
 * @param {{ yzoom?: [number, number] | null, detail?: boolean, q?: string, split?: boolean }} [options]
 */
export function viewUrl(
  snap,
  device,
  x0,
  x1,
  axis,
  width,
  height,
  { yzoom = null, detail = true, q = "", split = false } = {},
) {
  const yq = yzoom ? `&ymin=${Math.round(yzoom[0])}&ymax=${Math.round(yzoom[1])}` : "";
  const fq = q ? `&q=${encodeURIComponent(q)}` : "";
  const sq = split ? "&split=stream" : "";
  return `/api/d/${device}/view?snap=${snap}&${rangeQuery(x0, x1, axis)}&width=${width}&height=${height}${yq}${detail ? "" : "&detail=0"}${fq}${sq}`;
}

// GET /api/d/{device}/segments: the Active Cached Segment Timeline, the view's shape
/**
 * @param {number} snap
 * @param {number} device
 * @param {number} x0
 * @param {number} x1
 * @param {string} axis
 * @param {number} width
 * @param {number} height
 */
export function segmentsUrl(snap, device, x0, x1, axis, width, height) {
  return `/api/d/${device}/segments?snap=${snap}&${rangeQuery(x0, x1, axis)}&width=${width}&height=${height}`;
}
