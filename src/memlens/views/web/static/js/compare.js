// @ts-check
// Compare mode (two snapshots): peaks and call sites at each peak, A against B.
import { getJSON } from "./api.js";
import { kv } from "./details.js";
import { $, el } from "./dom.js";
import { fmtBytes } from "./format.js";
import { splitLabel } from "./live_tree.js";
import { state } from "./state.js";

// "name (/a/b/file.py:12)" -> "name (file.py:12)". Pure.
/** @param {string} label */
export function shortSite(label) {
  return label.replace(/\(([^()]*\/)([^()/]*:\d+)\)$/, "($2)");
}

// "fn (/a/b/file.py:12)" -> ["fn", "(file.py", ":12)"]; ["label", "", ""] without a
// location. Pure.
/** @param {string} label */
export function siteParts(label) {
  const [name, loc] = splitLabel(shortSite(label));
  const m = /^(.*)(:\d+\))$/.exec(loc.trimStart());
  return m ? [name, m[1], m[2]] : [name, "", ""];
}

// An autograd graph node by its own name: "torch::autograd::generated::MmBackward0::apply"
// -> "MmBackward0" (the node says what the memory is for: snapshot/frames.py's
// AUTOGRAD_NODE). `Function<F>::apply` is a forward entry, not a node: kept, as is any
// other name. Pure.
/** @param {string} name */
export function nodeName(name) {
  const m =
    /^torch::autograd::(?!Function<)(?:\w+::)*?(\w+(?:<.*>)?)::apply$/.exec(name) ??
    /(?:^|::)(\w+Backward\d*)::apply$/.exec(name);
  return m ? m[1] : name;
}

// Each path -> its shortest trailing part (whole components) that no other of `paths`
// ends with: "optim/optimizer.py" beside "mylib/optimizer.py", as analysis/paths.py names
// files in trees. Pure.
/** @param {string[]} paths @returns {Map<string, string>} */
export function uniqueSuffixes(paths) {
  const comps = [...new Set(paths)].map((p) => p.replaceAll("\\", "/").split("/"));
  /** @param {string[]} c @param {number} k */
  const tail = (c, k) => c.slice(-k).join("/");
  const out = new Map();
  for (const c of comps) {
    let k = 1;
    while (k < c.length && comps.some((o) => o !== c && tail(o, k) === tail(c, k))) k++;
    out.set(c.join("/"), k < c.length ? tail(c, k) : c.join("/"));
  }
  return out;
}

// A site's cell: [name, "(file", ":line)"], the whole name (an autograd node's own),
// the file with the parent folders that tell it from the table's other files. Pure.
/** @param {import("./types.js").SiteChange} r @param {Map<string, string>} files */
export function siteCell(r, files) {
  const [name, file, line] = siteParts(r.site);
  if (!file) return [nodeName(name), "", ""];
  const path = (r.filename ?? "").replaceAll("\\", "/");
  return [name, files.has(path) ? `(${files.get(path)}` : file, line];
}

export async function loadCompare() {
  const card = $("#compare"),
    body = $(".body", card);
  card.hidden = false;
  try {
    /** @type {import("./types.js").CompareAnswer} */
    const c = await getJSON(`/api/compare?d0=${state.panes[0].device}&d1=${state.panes[1].device}`);
    body.replaceChildren();
    const dl = el("dl", "kv");
    kv(dl, "A peak", `${fmtBytes(c.peaks[0].peak_bytes)} (device ${c.peaks[0].device})`);
    kv(dl, "B peak", `${fmtBytes(c.peaks[1].peak_bytes)} (device ${c.peaks[1].device})`);
    const dpk = c.peaks[1].peak_bytes - c.peaks[0].peak_bytes;
    kv(dl, "difference", `${dpk > 0 ? "+" : ""}${fmtBytes(dpk)} (B − A)`);
    body.append(dl);
    const tbl = el("table", "cmp");
    const head = el("tr");
    for (const h of ["call site", "A", "B", "B − A"]) head.append(el("th", null, h));
    tbl.append(head);
    const files = uniqueSuffixes(c.sites.map((r) => r.filename ?? "").filter((f) => f));
    for (const r of c.sites) {
      const tr = el("tr");
      // the whole name, wrapped where it is long (an autograd node by its own name), then
      // the file with enough parent folders to be unique and the line; the full site on
      // hover
      const [name, file, line] = siteCell(r, files);
      const td = el("td"),
        lbl = el("div", "lbl");
      lbl.append(el("span", "nm", name), el("span", "fl", file), el("span", "ln", line));
      td.append(lbl);
      td.title = r.site;
      tr.append(td, el("td", null, fmtBytes(r.a_bytes)), el("td", null, fmtBytes(r.b_bytes)));
      const d = el(
        "td",
        r.change > 0 ? "up" : r.change < 0 ? "down" : "",
        (r.change > 0 ? "+" : "") + fmtBytes(r.change),
      );
      tr.append(d);
      tbl.append(tr);
    }
    body.append(tbl);
    if (c.sites_total > c.sites.length)
      body.append(
        el(
          "div",
          "t-muted",
          `${c.sites_total - c.sites.length} more sites with smaller differences`,
        ),
      );
  } catch (e) {
    body.replaceChildren(el("div", "warn", /** @type {Error} */ (e).message));
  }
}
