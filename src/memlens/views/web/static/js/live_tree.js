// @ts-check
// The live tree: what is allocated at one moment, by call stack, with search and focus.
import { getJSON } from "./api.js";
import { $, col, el } from "./dom.js";
import { fmtBytes, fmtInt, fmtSeconds } from "./format.js";
import { state } from "./state.js";

/**
 * @param {import("./pane/pane.js").Pane} pane
 * @param {number} event
 * @param {number} [u] the moment on the pane's axis (the tree's marker)
 */
export async function openLive(pane, event, u) {
  const card = $("#live");
  card.hidden = false;
  const py = /** @type {HTMLInputElement} */ ($("#live-py")).checked;
  state.live = { pane, event, u, axis: pane.axis, data: null, focus: [] };
  for (const p of state.panes) p.draw();
  try {
    /** @type {import("./types.js").LiveAnswer} */
    const d = await getJSON(
      `/api/d/${pane.device}/live?snap=${pane.s}&event=${event}&python_only=${py ? 1 : 0}`,
    );
    if (!state.live || state.live.event !== event || state.live.pane !== pane) return;
    state.live.data = d;
    renderLive();
  } catch (e) {
    $(".body", card).replaceChildren(el("div", "warn", /** @type {Error} */ (e).message));
  }
}

/** @param {number} share */
function heat(share) {
  const h = 55 - 55 * Math.min(1, share); // yellow -> red as the share grows
  return `hsl(${h}, 90%, ${col("--heat-l")})`;
}

/**
 * @param {HTMLElement} parent
 * @param {string} text
 * @param {string} q
 */
function markText(parent, text, q) {
  if (!q) {
    parent.textContent = text;
    return false;
  }
  const i = text.toLowerCase().indexOf(q);
  if (i < 0) {
    parent.textContent = text;
    return false;
  }
  parent.replaceChildren(
    document.createTextNode(text.slice(0, i)),
    el("mark", null, text.slice(i, i + q.length)),
    document.createTextNode(text.slice(i + q.length)),
  );
  return true;
}

// A run of frames that each pass all their bytes to one callee (a notebook's or a
// launcher's wrappers, nn.Module's call machinery) says little row by row and drives the
// tree off the panel's right edge: one row stands for the run (click it to list the
// frames), and the tree goes on from the run's last frame. Pure.
/** @param {import("./types.js").TreeNode} n */
export function passChain(n) {
  const out = [n];
  while ((n.children || []).length === 1 && n.children[0].bytes === n.bytes) {
    n = n.children[0];
    out.push(n);
  }
  return out;
}

// The frames one row stands for under a search (q lower-cased, "" for none): the pass-on
// run from `n` (passChain), cut at the first frame that matches, so a match is always its
// own row, marked, and the folding of the frames before it stays. Pure.
/**
 * @param {import("./types.js").TreeNode} n
 * @param {string} q
 */
export function shownChain(n, q) {
  const chain = passChain(n);
  if (!q) return chain;
  const i = chain.findIndex((c) => c.label.toLowerCase().includes(q));
  return i < 0 ? chain : chain.slice(0, i + 1);
}

// "name (file:line)" -> ["name", " (file:line)"]: the location is what tells sibling rows
// apart, so the row truncates the name, never it. Pure.
/**
 * @param {string} label
 * @returns {[string, string]}
 */
export function splitLabel(label) {
  const m = / \([^()]*:\d+\)$/.exec(label);
  return m ? [label.slice(0, m.index), label.slice(m.index)] : [label, ""];
}

// does this node or one below it match the search (q lower-cased)? Pure.
/**
 * @param {import("./types.js").TreeNode} node
 * @param {string} q
 * @returns {boolean}
 */
export function subtreeMatches(node, q) {
  if (node.label.toLowerCase().includes(q)) return true;
  return (node.children || []).some((c) => subtreeMatches(c, q));
}

export function renderLive() {
  const L = state.live,
    card = $("#live"),
    body = $(".body", card),
    crumbs = $(".crumbs", card);
  if (!L || !L.data) return;
  const q = /** @type {HTMLInputElement} */ ($("#live-search")).value.trim().toLowerCase();
  let root = L.data.tree;
  const path = [root];
  for (const lab of L.focus) {
    const c = (root.children || []).find((x) => x.label === lab);
    if (!c) break;
    root = c;
    path.push(c);
  }
  crumbs.replaceChildren();
  const p = L.pane;
  const when = L.data.event >= 0 ? `after event ${fmtInt(L.data.event)}` : "before the first event";
  const t =
    L.data.time_us !== null && p.hasTime ? ` (+${fmtSeconds(L.data.time_us - p.timeOrigin)})` : "";
  crumbs.append(
    el(
      "div",
      null,
      `${when}${t}: active ${fmtBytes(L.data.active)}, reserved ${fmtBytes(L.data.reserved)}, ${fmtInt(L.data.tree.count)} allocations`,
    ),
  );
  path.forEach((n, i) => {
    const b = el("button", null, i === 0 ? "all" : n.label);
    b.type = "button";
    b.addEventListener("click", () => {
      L.focus = L.focus.slice(0, i);
      renderLive();
    });
    crumbs.append(b);
  });
  const total = Math.max(root.bytes, 1);
  const tree = el("div", "tree");
  // a run of frames passing all their bytes on (passChain) is one row: click it to list them
  /** @param {import("./types.js").TreeNode[]} frames */
  const chainRow = (frames) => {
    const wrap = el("div", "node");
    const row = el("div", "row chain");
    const bar = el("span", "heat");
    const share = frames[0].bytes / total;
    bar.style.width = `${(share * 100).toFixed(2)}%`;
    bar.style.background = heat(share);
    const lbl = el("span", "lbl", `\u22ef ${frames.length} frames that pass it all on \u22ef`);
    lbl.title = frames.map((f) => f.label).join("\n");
    row.append(
      bar,
      el("span", "tog", "\u22ee"),
      lbl,
      el("span", "bytes", fmtBytes(frames[0].bytes)),
      el("span", "pct", `${(share * 100).toFixed(1)}%`),
    );
    const list = el("div", "children chain-frames");
    list.hidden = true;
    for (const f of frames) list.append(el("div", "chain-frame", f.label));
    row.addEventListener("click", () => {
      list.hidden = !list.hidden;
    });
    wrap.append(row, list);
    return wrap;
  };
  /**
   * @param {import("./types.js").TreeNode} node
   * @param {number} depth
   * @param {HTMLElement} into
   * @param {string[]} pathLabels
   */
  const build = (node, depth, into, pathLabels) => {
    const wrap = el("div", "node");
    const row = el("div", "row");
    const bar = el("span", "heat");
    const share = node.bytes / total;
    bar.style.width = `${(share * 100).toFixed(2)}%`;
    bar.style.background = heat(share);
    const kids = node.children || [];
    const open = q ? subtreeMatches(node, q) && depth < 40 : depth < 2;
    const tog = el("span", "tog", kids.length ? (open ? "▾" : "▸") : "");
    const lbl = el("span", "lbl");
    const [name, loc] = splitLabel(node.label);
    const nm = el("span", "nm"),
      ln = el("span", "ln");
    lbl.append(nm, ln);
    const inName = markText(nm, name, q),
      inLoc = markText(ln, loc, q); // both marked
    const matched = inName || inLoc;
    if (matched) row.classList.add("match");
    lbl.title = node.frame
      ? `${node.frame.filename}:${node.frame.line} ${node.frame.name}`
      : node.label;
    row.append(
      bar,
      tog,
      lbl,
      el("span", "bytes", fmtBytes(node.bytes)),
      el("span", "pct", `${(share * 100).toFixed(1)}%`),
    );
    if (depth > 0 && kids.length) {
      const f = el("button", "focus", "focus");
      f.type = "button";
      f.title = "zoom into this subtree";
      f.addEventListener("click", (e) => {
        e.stopPropagation();
        L.focus = L.focus.concat(pathLabels);
        renderLive();
      });
      row.append(f);
    }
    wrap.append(row);
    const childBox = el("div", "children");
    let rendered = false;
    const renderKids = () => {
      if (rendered) return;
      rendered = true;
      for (const c of kids) {
        if (q && !subtreeMatches(c, q)) continue;
        const chain = shownChain(c, q);
        if (chain.length > 3) {
          const last = chain[chain.length - 1];
          childBox.append(chainRow(chain.slice(0, -1)));
          build(last, depth + 1, childBox, pathLabels.concat(chain.map((n) => n.label)));
        } else {
          build(c, depth + 1, childBox, pathLabels.concat([c.label]));
        }
      }
    };
    if (open) renderKids();
    else childBox.hidden = true;
    if (kids.length) {
      row.addEventListener("click", () => {
        renderKids();
        childBox.hidden = !childBox.hidden;
        tog.textContent = childBox.hidden ? "▸" : "▾";
      });
    }
    wrap.append(childBox);
    into.append(wrap);
  };
  build(root, 0, tree, []);
  body.replaceChildren(tree);
}
