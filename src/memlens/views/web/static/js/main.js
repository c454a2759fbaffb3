// @ts-check
// memlens view: the page. The server does the level of detail (GET /api/d/{device}/view
// returns the bands of one viewport at pixel-column resolution); the panes draw them on a
// canvas and handle interaction. Every string from the snapshot goes through textContent
// (or canvas fillText): never parsed as markup.
//
// Native ES modules, no bundler (the page's CSP, script-src 'self', allows them):
//   main.js       page wiring: panes, keys, theme, help
//   state.js      shared state (window.memlens, for tests and benchmarks)
//   api.js        the JSON API          format.js   number formatting (pure)
//   dom.js        element and theme helpers
//   pane/pane.js  one chart pane: device, range, requests; pane/render.js draws it
//                 (its bands as pixels: pane/raster.js), pane/input.js hit-tests and
//                 binds the mouse; pane/geometry.js, pane/colour.js and raster.js are pure
//   tooltip.js, details.js, live_tree.js, allocator.js, compare.js: the tooltip and the
//                 side cards; cursor.js moves the timeline cursor (the live tree and the
//                 allocator card follow it)
//   types.js      the API's answers as JSDoc typedefs (no code; tsc --checkJs reads them)
import { getJSON } from "./api.js";
import { openState } from "./allocator.js";
import { loadCompare } from "./compare.js";
import { stepState } from "./cursor.js";
import { $, forgetThemeColours, setStatus } from "./dom.js";
import { openLive, renderLive } from "./live_tree.js";
import { Pane } from "./pane/pane.js";
import { forgetPatterns } from "./pane/render.js";
import { state } from "./state.js";
import { hideTooltip } from "./tooltip.js";

/** @param {boolean} dark */
function applyTheme(dark) {
  document.documentElement.classList.toggle("dark", dark);
  forgetThemeColours();
  forgetPatterns();
  try {
    localStorage.setItem("memlens-theme", dark ? "dark" : "light");
  } catch (e) {
    /* private mode */
  }
  for (const p of state.panes) {
    if (p.view) p.renderOff();
    p.draw();
    p.drawOverview();
  }
  renderLive(); // heat colours follow the theme
}

/** @param {boolean} [show] the help's visibility; without it, toggled */
function toggleHelp(show) {
  const h = $("#help");
  h.hidden = show === undefined ? !h.hidden : !show;
}

function activePane() {
  return (state.mouse && state.mouse.pane) || state.panes[0];
}

/** @param {KeyboardEvent} e */
function onKey(e) {
  if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) {
    if (e.key === "Escape") e.target.blur();
    return;
  }
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const p = activePane();
  if (!p) return;
  const span = p.x1 - p.x0,
    mid = (p.x0 + p.x1) / 2;
  const k = e.key;
  if (k !== "?" && k !== "d") hideTooltip(); // it described the picture before the key
  if (k === "?") toggleHelp();
  else if (k === "Escape") {
    toggleHelp(false);
    $("#details").hidden = true;
    $("#live").hidden = true;
    $("#state").hidden = true;
    state.pinned = null;
    state.live = null;
    state.allocator = null;
    for (const q of state.panes) q.draw();
  } else if (k === "ArrowLeft") p.setRange(p.x0 - span * 0.15, p.x1 - span * 0.15);
  else if (k === "ArrowRight") p.setRange(p.x0 + span * 0.15, p.x1 + span * 0.15);
  else if (k === "+" || k === "=" || k === "ArrowUp") p.zoomAt(mid, 0.6);
  else if (k === "-" || k === "_" || k === "ArrowDown") p.zoomAt(mid, 1 / 0.6);
  else if (k === "0" || k === "Home") {
    const [a, b] = p.fullRange();
    p.yzoom = null;
    p.setRange(a, b);
  } else if (k === "p") p.jumpToPeak();
  else if (k === "g") {
    const s = /** @type {HTMLSelectElement} */ ($("#chart"));
    s.value = s.value === "segments" ? "allocations" : "segments";
    s.dispatchEvent(new Event("change"));
  } else if (k === "t") {
    const s = /** @type {HTMLSelectElement} */ ($("#axis"));
    s.value = s.value === "time" ? "event" : "time";
    s.dispatchEvent(new Event("change"));
  } else if (k === "s" && state.panes.some((q) => q.dm.stream_lanes > 0)) {
    const b = /** @type {HTMLInputElement} */ ($("#streams"));
    b.checked = !b.checked;
    b.dispatchEvent(new Event("change"));
  } else if (k === "y" && state.panes.length > 1) {
    const b = /** @type {HTMLInputElement} */ ($("#yscale"));
    b.checked = !b.checked;
    b.dispatchEvent(new Event("change"));
  } else if (k === "d") applyTheme(!document.documentElement.classList.contains("dark"));
  else if (k === "l" && state.mouse) state.mouse.pane.liveAtX(state.mouse.x);
  else if (k === "a") openStateAtCursor();
  else if (k === ",") stepState(-1);
  else if (k === ".") stepState(1);
  else if (k === "f") $("#find").focus();
  else if (k === "/") {
    $("#live").hidden = false;
    $("#live-search").focus();
  } else return;
  e.preventDefault();
}

// the allocator state at the live cursor, else at the mouse (which also sets the cursor)
function openStateAtCursor() {
  if (!state.live && state.mouse) state.mouse.pane.liveAtX(state.mouse.x); // sets state.live
  const L = state.live;
  if (L) openState(L.pane, L.event);
}

async function main() {
  let dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  try {
    const t = localStorage.getItem("memlens-theme");
    if (t) dark = t === "dark";
  } catch (e) {
    /* private mode */
  }
  document.documentElement.classList.toggle("dark", dark);
  setStatus("loading…");
  /** @type {import("./types.js").MetaAnswer} */
  let meta;
  try {
    // written into the page by the server (views/web/page.py), else asked for
    const written = document.getElementById("meta");
    meta = written ? JSON.parse(written.textContent || "") : await getJSON("/api/meta");
  } catch (e) {
    setStatus(`cannot load: ${/** @type {Error} */ (e).message}`, true);
    return;
  }
  state.meta = meta;
  // the files' names in the header (a path there was cut to "/…" by the controls beside
  // it; each pane's head has the whole path), the whole paths on hover
  const names = meta.snapshots.map((s) => s.name);
  $("#title").textContent = names.map((n) => n.split("/").pop()).join("  vs  ");
  $("#title").title = names.join("  vs  ");
  document.title = `memlens view: ${names.map((n) => n.split("/").pop()).join(" vs ")}`;
  const params = new URLSearchParams(location.search);
  const want = params.has("device") ? Number(params.get("device")) : null;
  const compact = meta.snapshots.length > 1;
  for (const s of meta.snapshots) {
    if (!s.devices.length) {
      setStatus(`${s.name}: no device has trace entries`, true);
      continue;
    }
    const d = want !== null && s.devices.some((x) => x.device === want) ? want : s.default_device;
    state.panes.push(new Pane($("#panes"), s, d, compact));
  }
  const warns = meta.snapshots.flatMap((s) => s.warnings);
  setStatus(warns.length ? `note: ${warns.join(" · ")}` : "");
  if (compact) for (const p of state.panes) p.setDevice(p.device);
  if (state.panes.length > 1) {
    loadCompare();
    $("#yscale-ctl").hidden = false;
  }
  // the streams toggle, for a trace on several streams (each pane's device's, as it changes)
  $("#streams-ctl").hidden = !state.panes.some((p) => p.dm.stream_lanes > 0);
  $("#streams").addEventListener("change", (/** @type {Event} */ e) => {
    state.splitStreams = /** @type {HTMLInputElement} */ (e.target).checked;
    for (const p of state.panes) p.request();
  });
  $("#yscale").addEventListener("change", (/** @type {Event} */ e) => {
    state.independentY = /** @type {HTMLInputElement} */ (e.target).checked;
    for (const p of state.panes) {
      p.yzoom = null;
      p.request();
    }
  });
  $("#chart").addEventListener("change", (/** @type {Event} */ e) => {
    state.chart = /** @type {HTMLSelectElement} */ (e.target).value;
    for (const p of state.panes) {
      p.view = null;
      p.draw();
      p.request();
    }
  });
  $("#axis").addEventListener("change", (/** @type {Event} */ e) => {
    state.axis = /** @type {HTMLSelectElement} */ (e.target).value;
    if (state.axis === "time" && !state.panes.every((p) => p.hasTime))
      setStatus("this trace has no timestamps: staying on event order", true);
    for (const p of state.panes) p.switchAxis();
  });
  $("#peak").addEventListener("click", () => activePane().jumpToPeak());
  $("#reset").addEventListener("click", () => {
    for (const p of state.panes) {
      const [a, b] = p.fullRange();
      p.yzoom = null;
      p.setRange(a, b, true);
    }
  });
  $("#theme").addEventListener("click", () =>
    applyTheme(!document.documentElement.classList.contains("dark")),
  );
  $("#helpbtn").addEventListener("click", () => toggleHelp());
  $("#help").addEventListener("click", (/** @type {MouseEvent} */ e) => {
    if (/** @type {HTMLElement} */ (e.target).id === "help") toggleHelp(false);
  });
  for (const b of document.querySelectorAll("[data-close]")) {
    if (!(b instanceof HTMLElement)) continue;
    b.addEventListener("click", () => {
      const id = b.dataset.close;
      if (id === "help") toggleHelp(false);
      else $(`#${id}`).hidden = true;
      if (id === "details") state.pinned = null;
      if (id === "live") state.live = null;
      if (id === "state") state.allocator = null;
      for (const p of state.panes) p.draw();
    });
  }
  const cards = ["#details", "#live", "#compare", "#state"].map((id) => $(id));
  const guide = () => {
    $("#guide").hidden = cards.some((c) => !c.hidden);
  };
  const watch = new MutationObserver(guide);
  for (const c of cards) watch.observe(c, { attributes: true, attributeFilter: ["hidden"] });
  guide();
  $("#live-search").addEventListener("input", () => renderLive());
  $("#live-state").addEventListener("click", openStateAtCursor);
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let ft;
  $("#find").addEventListener("input", (/** @type {Event} */ e) => {
    clearTimeout(ft);
    ft = setTimeout(() => {
      state.find = /** @type {HTMLInputElement} */ (e.target).value.trim();
      for (const p of state.panes) p.request();
    }, 250);
  });
  $("#state-prev").addEventListener("click", () => stepState(-1));
  $("#state-next").addEventListener("click", () => stepState(1));
  $("#live-py").addEventListener("change", () => {
    const L = state.live;
    if (L) openLive(L.pane, L.event, L.u);
  });
  document.addEventListener("keydown", onKey);
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let rt;
  window.addEventListener("resize", () => {
    clearTimeout(rt);
    rt = setTimeout(() => state.panes.forEach((p) => p.resize()), 120);
  });
}

document.addEventListener("DOMContentLoaded", main);
