// @ts-check
// DOM helpers. Every string from the snapshot goes through textContent (or canvas
// fillText): never parsed as markup.

export const dpr = () => window.devicePixelRatio || 1;
export const $ = (sel, root = document) => root.querySelector(sel);

export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

// theme colours, read once per theme (getComputedStyle is far too slow per shape)
let themeCache = null;
const colours = new Map();
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

export function setStatus(text, error = false) {
  const s = $("#status");
  s.textContent = text;
  s.classList.toggle("error", error);
}
