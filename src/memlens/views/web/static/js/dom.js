// @ts-check
// DOM helpers. Every string from the snapshot goes through textContent (or canvas
// fillText): never parsed as markup.

export const dpr = () => window.devicePixelRatio || 1;
/**
 * The element a selector names. The page's elements are fixed (index.html): a missing one
 * is a bug, thrown here with its selector rather than as a TypeError where it is used.
 * @param {string} sel
 * @param {ParentNode} [root]
 * @returns {HTMLElement}
 */
export function $(sel, root = document) {
  const e = root.querySelector(sel);
  if (!e) throw new Error(`memlens: no ${sel} in the page`);
  return /** @type {HTMLElement} */ (e);
}

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string | null} [cls]
 * @param {unknown} [text] shown as text (String(text)), never parsed as markup
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/**
 * A canvas's 2D context. Null only when the canvas already has another kind of context,
 * which ours never do: a bug, thrown here rather than as a TypeError on first use.
 * @param {HTMLCanvasElement} canvas
 */
export function context2d(canvas) {
  const ctx = canvas.getContext("2d");
  if (!ctx) throw new Error("memlens: no 2D context for a canvas");
  return ctx;
}

// theme colours, read once per theme (getComputedStyle is far too slow per shape)
/** @type {CSSStyleDeclaration | null} */
let themeCache = null;
/** @type {Map<string, string>} */
const colours = new Map();
/** @param {string} name a CSS custom property, "--small" */
export function col(name) {
  let c = colours.get(name);
  if (c === undefined) {
    if (!themeCache) themeCache = getComputedStyle(document.documentElement);
    c = themeCache.getPropertyValue(name).trim();
    colours.set(name, c);
  }
  return c;
}
// the theme changed: read the colours again
export function forgetThemeColours() {
  themeCache = null;
  colours.clear();
}

/** @param {string} text */
export function setStatus(text, error = false) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("error", error);
}
