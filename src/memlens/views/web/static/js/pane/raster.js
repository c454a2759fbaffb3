// @ts-check
// The chart's bands as pixels, computed here rather than filled as canvas paths (pure: no
// DOM). A band is a run of columns, each a vertical span [offset, offset + size) bytes;
// columns fall on whole device pixels, so a pixel's coverage by a band is the overlap of
// its row with the band's span, exactly. Each pixel gets the coverage-weighted mix of the
// bands over it, and as much opacity as they cover: where thin bands of different colours
// share a pixel row, the row is as opaque as the stack (canvas antialiasing composites
// such bands as if they overlapped, and the row came out washed out: the page read the
// pixels back to fix that). A viewport of 10,502 bands on a 936 x 412 chart is drawn in
// 7-20 ms where the fills, their read-back and the fix took 31-36 ms (the first one of a
// page, before the JIT has warmed up: ~40 ms against 56).

/**
 * A band's paint: a flat colour, or a tile repeated from the canvas origin (the ghosts'
 * hatch: `size` x `size` RGBA pixels, each tile pixel `scale` device pixels wide).
 * @typedef {{rgb: [number, number, number]} | {tile: Uint8ClampedArray, size: number, scale: number}} BandPaint
 */

/** "#rrggbb" -> [r, g, b]
 * @param {string} hex
 * @returns {[number, number, number]}
 */
export function hexRgb(hex) {
  const n = parseInt(hex.slice(1, 7), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/**
 * The bands of a chart answer as RGBA pixels (row-major, `w` x `h` device pixels).
 * @param {import("../types.js").Bands} b
 * @param {number} w  device pixels across
 * @param {number} h  device pixels down
 * @param {number} r  device pixels per column (and per CSS pixel down)
 * @param {(bytes: number) => number} y  CSS pixels down from the top, for a byte offset
 * @param {(k: number) => BandPaint} paintOf  band k's paint
 * @returns {Uint8ClampedArray<ArrayBuffer>}
 */
export function rasterBands(b, w, h, r, y, paintOf) {
  const out = new Uint8ClampedArray(w * h * 4),
    out32 = new Uint32Array(out.buffer);
  // A pixel a band covers whole is written at once (bands do not overlap: it is that
  // band's); one it covers in part gets its share added here: the sums of coverage x red,
  // green, blue and of coverage, mixed into `out` at the end (rows [lo, hi) of each row)
  const acc = new Float32Array(w * h * 4),
    lo = new Int32Array(h).fill(w),
    hi = new Int32Array(h);
  /** @type {Int32Array | null} each device column's pixel in a tile's row (tiled paints) */
  let tileCol = null;
  /** @type {Map<BandPaint, Uint32Array>} each tiled paint's pixels, as words */
  const words = new Map();
  for (let k = 0; k < b.row.length; k++) {
    const paint = paintOf(k),
      size = b.size[k],
      r0 = b.run_start[k],
      r1 = b.run_start[k + 1];
    const flat = "rgb" in paint ? packed(paint.rgb) : 0;
    if (!("rgb" in paint) && !words.has(paint)) {
      tileCol = tileColumns(w, paint.size, paint.scale); // (one tile size and scale per chart)
      words.set(paint, new Uint32Array(paint.tile.slice().buffer));
    }
    for (let i = r0; i < r1; i++) {
      const x0 = Math.max(0, Math.round(b.run_col[i] * r)),
        x1 = Math.min(w, Math.round((i + 1 < r1 ? b.run_col[i + 1] : b.c1[k]) * r));
      const top = Math.max(0, y(b.run_off[i] + size) * r),
        bottom = Math.min(h, y(b.run_off[i]) * r);
      if (x1 <= x0 || bottom <= top) continue;
      for (let row = Math.floor(top); row < bottom; row++) {
        const cover = Math.min(bottom, row + 1) - Math.max(top, row),
          at = row * w;
        if (cover >= 1) {
          if ("rgb" in paint) out32.fill(flat, at + x0, at + x1);
          else {
            const tile32 = /** @type {Uint32Array} */ (words.get(paint));
            copyTileRow(out32, at, x0, x1, row, tile32, paint, /** @type {Int32Array} */ (tileCol));
          }
          continue;
        }
        if ("rgb" in paint) addRow(acc, (at + x0) * 4, x1 - x0, cover, paint.rgb);
        else addTileRow(acc, at, x0, x1, row, cover, paint, /** @type {Int32Array} */ (tileCol));
        lo[row] = Math.min(lo[row], x0);
        hi[row] = Math.max(hi[row], x1);
      }
    }
  }
  mix(out, acc, w, h, lo, hi);
  return out;
}

/** [r, g, b] as an opaque RGBA pixel in a Uint32Array over the bytes (little-endian, as
 * every platform a browser runs on)
 * @param {[number, number, number]} rgb
 */
function packed(rgb) {
  return ((255 << 24) | (rgb[2] << 16) | (rgb[1] << 8) | rgb[0]) >>> 0;
}

/** Each device column's first byte in a tile's row of `size` pixels, each `scale` wide.
 * @param {number} w
 * @param {number} size
 * @param {number} scale
 */
function tileColumns(w, size, scale) {
  const cols = new Int32Array(w);
  for (let x = 0; x < w; x++) cols[x] = (Math.floor(x / scale) % size) * 4;
  return cols;
}

/**
 * @param {Uint32Array} out32
 * @param {number} at  the row's first pixel
 * @param {number} x0
 * @param {number} x1
 * @param {number} row
 * @param {Uint32Array} tile32  the tile's pixels as words
 * @param {{size: number, scale: number}} paint
 * @param {Int32Array} tileCol
 */
function copyTileRow(out32, at, x0, x1, row, tile32, { size, scale }, tileCol) {
  const t = (Math.floor(row / scale) % size) * size;
  for (let x = x0; x < x1; x++) out32[at + x] = tile32[t + (tileCol[x] >> 2)];
}

/**
 * @param {Float32Array} acc
 * @param {number} at  first pixel's first value
 * @param {number} n  pixels
 * @param {number} cover
 * @param {[number, number, number]} rgb
 */
function addRow(acc, at, n, cover, rgb) {
  const cr = cover * rgb[0],
    cg = cover * rgb[1],
    cb = cover * rgb[2];
  for (let i = at, end = at + n * 4; i < end; i += 4) {
    acc[i] += cr;
    acc[i + 1] += cg;
    acc[i + 2] += cb;
    acc[i + 3] += cover;
  }
}

/**
 * @param {Float32Array} acc
 * @param {number} at  the row's first pixel
 * @param {number} x0
 * @param {number} x1
 * @param {number} row
 * @param {number} cover
 * @param {{tile: Uint8ClampedArray, size: number, scale: number}} paint
 * @param {Int32Array} tileCol
 */
function addTileRow(acc, at, x0, x1, row, cover, { tile, size, scale }, tileCol) {
  const t = (Math.floor(row / scale) % size) * size * 4;
  for (let x = x0; x < x1; x++) {
    const s = t + tileCol[x],
      i = (at + x) * 4;
    acc[i] += cover * tile[s];
    acc[i + 1] += cover * tile[s + 1];
    acc[i + 2] += cover * tile[s + 2];
    acc[i + 3] += cover;
  }
}

/** The pixels bands cover in part: their mix, and as much opacity as they cover (a
 * pixel also written whole counts as one more cover of its colour).
 * @param {Uint8ClampedArray} out
 * @param {Float32Array} acc
 * @param {number} w
 * @param {number} h
 * @param {Int32Array} lo
 * @param {Int32Array} hi
 */
function mix(out, acc, w, h, lo, hi) {
  for (let row = 0; row < h; row++) {
    for (let i = (row * w + lo[row]) * 4, end = (row * w + hi[row]) * 4; i < end; i += 4) {
      let cover = acc[i + 3];
      if (cover <= 0) continue;
      let red = acc[i],
        green = acc[i + 1],
        blue = acc[i + 2];
      if (out[i + 3]) {
        red += out[i];
        green += out[i + 1];
        blue += out[i + 2];
        cover += 1;
      }
      out[i] = red / cover;
      out[i + 1] = green / cover;
      out[i + 2] = blue / cover;
      out[i + 3] = cover >= 1 ? 255 : cover * 255;
    }
  }
}
