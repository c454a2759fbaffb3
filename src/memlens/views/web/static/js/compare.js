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
    for (const r of c.sites) {
      const tr = el("tr");
      // one line per site: the file's base name (the full path in the tooltip). Rows of
      // one function differ by file and line: the name gives way first, then the file
      // name, never the line number.
      const [name, file, line] = siteParts(r.site);
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
