// @ts-check
"use strict";
// memlens report: hover on the timeline, zoomable icicle of the live tree at the peak.
// Every string from the snapshot is inserted with textContent, never as HTML.
/**
 * The page's data island, as views/report writes it (sections/timeline.py, icicle.py):
 * @typedef {{n: string, b: number, c: number, f?: string, o?: number, k?: TreeNode[]}} TreeNode
 *   a tree node: name, bytes, allocations, "file:line", 1 on the merged small ones, children
 * @typedef {"python" | "all"} TreeView
 * @typedef {{event: number, python: TreeNode, all: TreeNode}} Trees
 * @typedef {{n: number, start: number[], amin: number[], amax: number[], rmin: number[],
 *   rmax: number[], t: number[] | null, peak: number}} Curves per column (start: first event)
 * @typedef {{svg: string, curves: Curves | null, stages?: [number, number, string][],
 *   bands?: number[][], bandSites: string[]}} Timeline a band: [bytes, site, alloc, free]
 * @typedef {{width: number, left: number, plotW: number, top: number, plotH: number}} Geometry
 * @typedef {{timelines?: Timeline[], geometry: Geometry, trees?: Record<string, Trees>}} Data
 */
(function () {
  // the page always has these elements (report.html)
  var island = /** @type {HTMLElement} */ (document.getElementById("memlens-data"));
  /** @type {Data} */
  var DATA = JSON.parse(/** @type {string} */ (island.textContent));
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

  /** @param {number} n */
  function fmtBytes(n) {
    var sign = n < 0 ? "-" : "",
      v = Math.abs(n),
      i = 0;
    while (v >= 1024 && i < UNITS.length - 1) {
      v /= 1024;
      i++;
    }
    return sign + (i === 0 ? String(Math.round(v)) : v.toFixed(2)) + " " + UNITS[i];
  }
  /** @param {number} n */
  function fmtInt(n) {
    return Number(n).toLocaleString("en-US");
  }
  // "1.00 GiB", or "1.00 GiB to 1.20 GiB" when a column's minimum and maximum differ visibly
  /**
   * @param {number} lo
   * @param {number} hi
   */
  function range(lo, hi) {
    var a = fmtBytes(lo),
      b = fmtBytes(hi);
    return a === b ? b : a + " to " + b;
  }
  /**
   * @param {number} part
   * @param {number} whole
   */
  function pct(part, whole) {
    return whole > 0 ? ((100 * part) / whole).toFixed(1) + "%" : "-";
  }

  var tip = /** @type {HTMLElement} */ (document.getElementById("tooltip"));
  /**
   * @param {string} text
   * @param {MouseEvent} ev
   */
  function showTip(text, ev) {
    tip.textContent = text;
    tip.hidden = false;
    var x = ev.clientX + 14,
      y = ev.clientY + 14;
    var w = tip.offsetWidth,
      h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hideTip() {
    tip.hidden = true;
  }

  // ---- timeline ----------------------------------------------------------------------
  /**
   * @param {Timeline} t
   * @param {Geometry} geom
   */
  function initTimeline(t, geom) {
    var svg = document.getElementById(t.svg),
      tl = t.curves;
    if (!svg || !tl || !tl.start.length) return;
    // the checked svg and curves, for the closures (they do not keep a var's narrowing)
    var plot = svg,
      curves = tl;
    var cursor = /** @type {Element} */ (svg.querySelector(".cursor"));
    /** @param {number} xs */
    function binAt(xs) {
      var e = ((xs - geom.left) / geom.plotW) * curves.n;
      var lo = 0,
        hi = curves.start.length - 1;
      while (lo < hi) {
        var mid = (lo + hi + 1) >> 1;
        if (curves.start[mid] <= e) lo = mid;
        else hi = mid - 1;
      }
      return lo;
    }
    function leave() {
      cursor.setAttribute("visibility", "hidden");
      hideTip();
    }
    svg.addEventListener("mousemove", function (ev) {
      var tl = curves;
      var r = plot.getBoundingClientRect();
      var xs = ((ev.clientX - r.left) * geom.width) / r.width;
      var ys = ((ev.clientY - r.top) * geom.width) / r.width;
      if (
        xs < geom.left ||
        xs > geom.left + geom.plotW ||
        ys < geom.top ||
        ys > geom.top + geom.plotH
      ) {
        leave();
        return;
      }
      var k = binAt(xs);
      var first = tl.start[k],
        last = (k + 1 < tl.start.length ? tl.start[k + 1] : tl.n) - 1;
      /** @type {string[]} */
      var lines = [];
      var target = /** @type {Element} */ (ev.target);
      var g = target.closest ? target.closest("[data-band]") : null;
      if (g && t.bands) {
        var b = t.bands[Number(g.getAttribute("data-band"))];
        lines.push(
          "allocation of " + fmtBytes(b[0]),
          t.bandSites[b[1]],
          (b[2] < 0 ? "allocated before the trace" : "allocated at event " + fmtInt(b[2])) +
            (b[3] < 0 ? ", alive at the end" : ", freed at event " + fmtInt(b[3])),
          "",
        );
      }
      lines.push(
        first === last
          ? "event " + fmtInt(first)
          : "events " + fmtInt(first) + " to " + fmtInt(last),
      );
      if (tl.t) lines.push("time +" + ((tl.t[k] - tl.t[0]) / 1e6).toFixed(4) + " s");
      lines.push(
        "active " + range(tl.amin[k], tl.amax[k]),
        "reserved " + range(tl.rmin[k], tl.rmax[k]),
      );
      if (tl.peak >= first && tl.peak <= last) lines.push("the peak of active memory is here");
      (t.stages || []).forEach(function (/** @type {[number, number, string]} */ st) {
        if (st[0] <= last && st[1] >= first) lines.push("in stage " + st[2]);
      });
      cursor.setAttribute("x1", String(xs));
      cursor.setAttribute("x2", String(xs));
      cursor.setAttribute("visibility", "visible");
      showTip(lines.join("\n"), ev);
    });
    svg.addEventListener("mouseleave", leave);
  }

  // ---- icicle ------------------------------------------------------------------------
  var ROW = 20,
    MAX_ANCESTOR_ROWS = 3;
  // A chain of frames that hand all their bytes to one callee (a notebook's or a launcher's
  // wrappers, nn.Module's call machinery) says little row by row and pushes the branches out
  // of sight: runs of more than FOLD_MIN such frames are drawn as one folded row.
  var FOLD_MIN = 3;
  /** @param {TreeNode} node */
  function passThrough(node) {
    return node.k && node.k.length === 1 && !node.k[0].o && node.k[0].b === node.b;
  }
  /**
   * @constructor
   * @param {HTMLElement} box
   * @param {Trees} trees
   * @param {HTMLElement} crumbs
   */
  function Icicle(box, trees, crumbs) {
    this.box = box;
    this.trees = trees;
    this.crumbs = crumbs;
    /** @type {TreeView} */
    this.view = trees.python && trees.python.b > 0 ? "python" : "all";
    /** @type {TreeNode[]} the zoomed node and its ancestors, the root first */
    this.path = [trees[this.view]];
  }
  /** @param {TreeView} view */
  Icicle.prototype.setView = function (view) {
    this.view = view;
    this.path = [this.trees[view]];
    this.render();
  };
  /** @param {NodeListOf<Element>} buttons */
  Icicle.prototype.markButtons = function (buttons) {
    var view = this.view;
    buttons.forEach(function (b) {
      b.setAttribute("aria-pressed", String(b.getAttribute("data-view") === view));
    });
  };
  /** @param {TreeNode[]} path */
  Icicle.prototype.zoomTo = function (path) {
    this.path = path;
    this.render();
  };
  Icicle.prototype.render = function () {
    var self = this,
      box = this.box,
      W = box.clientWidth || 1000;
    while (box.firstChild) box.removeChild(box.firstChild);
    var root = this.path[0],
      focus = this.path[this.path.length - 1],
      total = root.b;
    var maxDepth = 0,
      nCells = 0;
    /**
     * @param {TreeNode} node
     * @param {number} depth
     * @param {number} x
     * @param {number} w
     * @param {TreeNode[]} path
     * @param {boolean} ancestor
     */
    function cell(node, depth, x, w, path, ancestor) {
      var d = document.createElement("div");
      d.className =
        "cell" + (node.o ? " other" : depth % 2 ? " alt" : "") + (ancestor ? " ancestor" : "");
      d.style.left = x + "px";
      d.style.top = depth * ROW + "px";
      d.style.width = Math.max(w - 1, 1) + "px";
      if (w > 30) d.textContent = node.n + "  " + fmtBytes(node.b);
      d.addEventListener("mousemove", function (ev) {
        var lines = [
          node.n,
          fmtBytes(node.b) +
            "  (" +
            pct(node.b, total) +
            " of the total, " +
            pct(node.b, focus.b) +
            " of the zoomed node)",
          fmtInt(node.c) + " allocations",
        ];
        if (node.f) lines.push(node.f);
        if (!node.o && node.k && node.k.length) lines.push("click to zoom in");
        showTip(lines.join("\n"), ev);
      });
      d.addEventListener("mouseleave", hideTip);
      if (!node.o)
        d.addEventListener("click", function () {
          hideTip();
          self.zoomTo(path);
        });
      box.appendChild(d);
      nCells++;
      if (depth > maxDepth) maxDepth = depth;
    }
    // the nearest ancestors stay visible as full-width rows (click one to zoom out to it);
    // the farther ones are only in the breadcrumbs, so a deep zoom does not push the
    // subtree out of sight
    var first = Math.max(0, this.path.length - 1 - MAX_ANCESTOR_ROWS),
      row = 0;
    for (var a = first; a < this.path.length - 1; a++)
      cell(this.path[a], row++, 0, W, this.path.slice(0, a + 1), true);
    /**
     * @param {TreeNode[]} chain
     * @param {number} depth
     * @param {number} x
     * @param {number} w
     * @param {TreeNode[]} path
     */
    function folded(chain, depth, x, w, path) {
      var d = document.createElement("div");
      d.className = "cell folded";
      d.style.left = x + "px";
      d.style.top = depth * ROW + "px";
      d.style.width = Math.max(w - 1, 1) + "px";
      if (w > 30)
        d.textContent =
          "\u22ef " + chain.length + " frames that pass all " + fmtBytes(chain[0].b) + " on \u22ef";
      d.addEventListener("mousemove", function (ev) {
        var names = chain.map(function (n) {
          return n.n;
        });
        showTip(
          chain.length +
            " frames, each calling the next with all its bytes:\n" +
            names.join("\n") +
            "\nclick to zoom in",
          ev,
        );
      });
      d.addEventListener("mouseleave", hideTip);
      d.addEventListener("click", function () {
        hideTip();
        self.zoomTo(path);
      });
      box.appendChild(d);
      nCells++;
    }
    /**
     * @param {TreeNode} node
     * @param {number} depth
     * @param {number} x
     * @param {number} w
     * @param {TreeNode[]} path
     */
    function walk(node, depth, x, w, path) {
      cell(node, depth, x, w, path, false);
      if (!node.k || focus.b <= 0) return;
      // node's descendants that pass it all on, down to the first that does not (it branches,
      // or holds bytes of its own); the ones above that one become one row, as in the viewer
      var chain = [];
      // (passThrough(n): n.k holds one child)
      for (var n = node; passThrough(n); n = /** @type {TreeNode[]} */ (n.k)[0])
        chain.push(/** @type {TreeNode[]} */ (n.k)[0]);
      if (chain.length > FOLD_MIN) {
        var inner = chain.slice(0, chain.length - 1),
          last = chain[chain.length - 1];
        var innerPath = path.concat(inner);
        folded(inner, depth + 1, x, w, innerPath);
        walk(last, depth + 2, x, w, innerPath.concat([last]));
        return;
      }
      var cx = x;
      for (var i = 0; i < node.k.length; i++) {
        var ch = node.k[i],
          cw = (w * ch.b) / (node.b || 1);
        if (cw >= 1.5) walk(ch, depth + 1, cx, cw, path.concat([ch]));
        cx += cw;
      }
    }
    walk(focus, row, 0, W, this.path);
    box.style.height = (maxDepth + 1) * ROW + "px";
    box.setAttribute("data-cells", String(nCells));
    // breadcrumbs: where we are, each ancestor clickable
    var c = this.crumbs;
    while (c.firstChild) c.removeChild(c.firstChild);
    this.path.forEach(function (node, i) {
      if (i) c.appendChild(document.createTextNode(" > "));
      var link = document.createElement("a");
      link.textContent = node.n;
      link.addEventListener("click", function () {
        self.zoomTo(self.path.slice(0, i + 1));
      });
      c.appendChild(link);
    });
  };

  function initIcicles() {
    document.querySelectorAll("[data-icicle]").forEach(function (sec) {
      var trees = DATA.trees && DATA.trees[sec.getAttribute("data-icicle") || ""];
      if (!trees) return;
      // (report.html: every icicle section has both)
      var box = /** @type {HTMLElement} */ (sec.querySelector(".icicle")),
        crumbs = /** @type {HTMLElement} */ (sec.querySelector(".crumbs"));
      var ic = new Icicle(box, trees, crumbs);
      var buttons = sec.querySelectorAll("button[data-view]");
      buttons.forEach(function (b) {
        b.addEventListener("click", function () {
          ic.setView(/** @type {TreeView} */ (b.getAttribute("data-view")));
          ic.markButtons(buttons);
        });
      });
      ic.markButtons(buttons);
      var reset = sec.querySelector("button[data-reset]");
      if (reset)
        reset.addEventListener("click", function () {
          ic.zoomTo(ic.path.slice(0, 1));
        });
      ic.render();
      var last = box.clientWidth;
      window.addEventListener("resize", function () {
        if (box.clientWidth !== last) {
          last = box.clientWidth;
          ic.render();
        }
      });
    });
  }

  (DATA.timelines || []).forEach(function (t) {
    initTimeline(t, DATA.geometry);
  });
  initIcicles();
})();
