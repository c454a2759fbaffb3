// memlens view: the page. The server does the level of detail (GET /api/d/{device}/view
// returns the bands of one viewport at pixel-column resolution); this file draws them on a
// canvas and handles interaction. Every string from the snapshot goes through textContent
// (or canvas fillText): never parsed as markup.
"use strict";

(() => {
  const dpr = () => window.devicePixelRatio || 1;
  const $ = (sel, root = document) => root.querySelector(sel);
  // theme colours, read once per theme (getComputedStyle is far too slow per shape)
  let themeCache = null;
  const css = (name) => {
    if (!themeCache) themeCache = getComputedStyle(document.documentElement);
    return themeCache.getPropertyValue(name).trim();
  };
  const colours = new Map();
  const col = (name) => { let c = colours.get(name); if (c === undefined) { c = css(name); colours.set(name, c); } return c; };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function fmtBytes(n, precision = 2) {
    const sign = n < 0 ? "-" : "";
    let v = Math.abs(n);
    for (const u of UNITS) {
      if (v < 1024 || u === "PiB") return u === "B" ? `${sign}${Math.round(v)} B` : `${sign}${v.toFixed(precision)} ${u}`;
      v /= 1024;
    }
    return String(n);
  }
  const fmtInt = (n) => Number(n).toLocaleString("en-US");
  function fmtSeconds(us) {
    const s = us / 1e6;
    const a = Math.abs(s);
    if (a >= 100) return `${s.toFixed(1)} s`;
    if (a >= 1) return `${s.toFixed(3)} s`;
    if (a >= 1e-3) return `${(s * 1e3).toFixed(3)} ms`;
    return `${Math.round(us)} µs`;
  }
  // a time tick with just enough decimals for the tick spacing (both in microseconds)
  function fmtTick(us, step) {
    const [div, unit] = step >= 1e5 ? [1e6, "s"] : step >= 100 ? [1e3, "ms"] : [1, "µs"];
    const digits = Math.min(6, Math.max(0, Math.ceil(-Math.log10(step / div) - 1e-9)));
    return `${(us / div).toFixed(digits)} ${unit}`;
  }
  function fmtEventCount(n) {
    const a = Math.abs(n);
    if (a >= 1e6) return `${(n / 1e6).toFixed(a >= 1e7 ? 1 : 2)}M`;
    if (a >= 1e4) return `${(n / 1e3).toFixed(a >= 1e5 ? 0 : 1)}k`;
    return String(Math.round(n));
  }

  async function getJSON(url) {
    const r = await fetch(url);
    const j = await r.json();
    if (!r.ok) throw new Error(j.error || r.statusText);
    return j;
  }

  function setStatus(text, error = false) {
    const s = $("#status");
    s.textContent = text;
    s.classList.toggle("error", error);
  }

  // Colour per call site (stable across views: keyed by frame id), tableau-like palette.
  // No greys: grey is the aggregate band's (hatched) colour, so a band never looks like it.
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#8cd17d", "#86bcb6", "#f1ce63", "#a0cbe8", "#ffbe7d", "#d37295", "#499894"];
  const NO_STACK = "#5b6b8c"; // allocations without a recorded stack (e.g. before the trace)
  function siteColor(frameId) {
    if (frameId < 0) return NO_STACK;
    const h = Math.imul(frameId + 1, 2654435761) >>> 0;
    return PALETTE[h % PALETTE.length];
  }

  // First index >= from whose value is >= x in an ascending array.
  function lowerBound(arr, x, from) {
    let lo = from, hi = arr.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }

  // Stage spans per nesting level (the strip shows four) and axis, as ascending columns.
  function annotationLevels(spans) {
    const out = { time: [], event: [] };
    const levels = [];
    spans.forEach((sp, k) => { if (sp.depth < 4) (levels[sp.depth] ||= []).push(k); });
    for (let d = 0; d < levels.length; d++) {
      const ks = levels[d] || [];
      for (const [axis, s0, s1] of [["time", "t0", "t1"], ["event", "e0", "e1"]]) {
        out[axis][d] = {
          start: Float64Array.from(ks, (k) => spans[k][s0]),
          end: Float64Array.from(ks, (k) => spans[k][s1]),
          index: Int32Array.from(ks),
        };
      }
    }
    return out;
  }

  // diagonal hatch in the theme's aggregate colours (one 6x6 tile per theme)
  let smallTile = null;
  function smallPattern(ctx) {
    if (!smallTile) {
      smallTile = document.createElement("canvas");
      smallTile.width = smallTile.height = 6;
      const t = smallTile.getContext("2d");
      t.fillStyle = col("--small");
      t.fillRect(0, 0, 6, 6);
      t.strokeStyle = col("--small-hatch");
      t.lineWidth = 1.5;
      t.beginPath(); t.moveTo(-1, 7); t.lineTo(7, -1); t.moveTo(-1, 1); t.lineTo(1, -1); t.moveTo(5, 7); t.lineTo(7, 5); t.stroke();
    }
    return ctx.createPattern(smallTile, "repeat");
  }

  const ML = 72, MR = 10, MT = 8, MB = 22; // main canvas margins (CSS px)

  const state = {
    meta: null,
    panes: [],
    axis: "event",
    link: true,
    live: null, // {pane, event, data, focus: [path of labels]}
    pinned: null, // {pane, row}
    mouse: null, // {pane, x, y}
    firstPaint: null,
  };
  window.memlens = state; // for tests and benchmarks

  // ---------------------------------------------------------------------------------------
  class Pane {
    constructor(root, snapMeta, device, compact) {
      this.snap = snapMeta;
      this.s = snapMeta.index;
      this.compact = compact;
      this.view = null; // last response
      this.off = document.createElement("canvas"); // the response, rendered once
      this.inflight = false;
      this.dirty = false;
      this.hover = null;
      this.ann = { spans: [] };
      this.ov = null;
      this.reqCount = 0;
      this.timings = [];
      const sec = el("section", "pane");
      const head = el("div", "pane-head");
      // compare mode: the table's A and B columns name the panes
      if (compact) head.append(el("span", "pane-tag", "AB"[this.s]));
      head.append(el("span", "pane-name", snapMeta.name));
      this.devSel = el("select", "device");
      this.devSel.setAttribute("aria-label", "device");
      for (const d of snapMeta.devices) {
        const o = el("option", null, `device ${d.device} (${fmtInt(d.n_events)} events)`);
        o.value = String(d.device);
        this.devSel.append(o);
      }
      this.devSel.addEventListener("change", () => {
        // panels about the previous device's rows and events no longer apply
        if (state.pinned && state.pinned.pane === this) { state.pinned = null; $("#details").hidden = true; }
        if (state.live && state.live.pane === this) { state.live = null; $("#live").hidden = true; }
        this.setDevice(Number(this.devSel.value));
        if (state.panes.length > 1) loadCompare();
      });
      head.append(this.devSel);
      this.figures = el("span", "figures");
      head.append(this.figures);
      this.warnings = el("div", "warn");
      this.annCanvas = el("canvas", "ann");
      this.canvas = el("canvas", "main");
      this.canvas.tabIndex = 0;
      this.canvas.setAttribute("aria-label", "active memory timeline");
      this.ovCanvas = el("canvas", "overview");
      this.hint = el("div", "hint");
      sec.append(head, this.warnings, this.annCanvas, this.canvas, this.ovCanvas, this.hint);
      root.append(sec);
      this.section = sec;
      this.mainH = compact ? 300 : 440;
      this.bind();
      this.setDevice(device);
    }

    get dm() { return this.snap.devices.find((d) => d.device === this.device); }
    get hasTime() { return !!this.dm.time_range; }
    get axis() { return state.axis === "time" && this.hasTime ? "time" : "event"; }
    fullRange(axis = this.axis) {
      const dm = this.dm;
      if (axis === "time") return [dm.time_range[0], dm.time_range[1] + 1];
      return [0, Math.max(dm.n_events, 1)];
    }
    // cached at layout time: reading clientWidth per shape forces style/layout work
    get plotW() { return this.cachedPlotW || Math.max(10, Math.floor(this.canvas.clientWidth) - ML - MR); }
    get plotH() { return this.mainH - MT - MB; }

    setDevice(d) {
      if (!this.snap.devices.some((x) => x.device === d)) d = this.snap.devices[0].device;
      this.device = d;
      this.devSel.value = String(d);
      this.curAxis = this.axis;
      this.yzoom = null;
      [this.x0, this.x1] = this.fullRange();
      this.view = null;
      this.summary = null;
      this.renderFigures();
      this.ann = { spans: [] };
      this.annLevels = annotationLevels([]);
      this.layoutCanvases();
      // the chart first; overview and stage strip once it is drawn (they are not urgent)
      this.request().then(() => {
        this.loadOverview();
        getJSON(`/api/d/${d}/summary?snap=${this.s}`).then((sm) => {
          if (d === this.device) { this.summary = sm; this.renderFigures(); }
        }).catch((e) => setStatus(`summary: ${e.message}`, true));
        getJSON(`/api/d/${d}/annotations?snap=${this.s}`).then((a) => {
          if (d !== this.device) return;
          this.ann = a;
          this.annLevels = annotationLevels(a.spans);
          this.layoutCanvases(); // resizing clears every canvas: redraw them all
          this.draw();
          this.drawOverview();
        }).catch((e) => setStatus(`annotations: ${e.message}`, true));
      });
    }

    // when most of the tallest column is the aggregate band, say what is in it and how to
    // separate it
    renderHint() {
      const v = this.view;
      let c = 0;
      for (let i = 1; i < v.active.length; i++) if (v.active[i] > v.active[c]) c = i;
      const share = v.active[c] > 0 ? v.small.bytes[c] / v.active[c] : 0;
      this.hint.textContent = share > 0.5
        ? `${Math.floor(share * 100)}% of the tallest column is the hatched band: ${fmtInt(v.small.count[c])} allocations of at most ${fmtBytes(v.small.max_size)} each (${fmtBytes(v.bytes_per_px)} a pixel here), too many to draw one by one: zoom in, or Shift + wheel to zoom the memory axis, to separate them.`
        : "";
    }

    renderFigures() {
      const s = this.summary;
      const f = this.figures;
      f.replaceChildren();
      if (!s) return;
      const add = (label, value) => { const x = el("span", null, `${label} `); x.append(el("b", null, value)); f.append(x); };
      add("peak active", fmtBytes(s.peak_active_bytes));
      add("peak reserved", fmtBytes(s.peak_reserved_bytes));
      add("baseline", fmtBytes(s.baseline_bytes));
      add("end", fmtBytes(s.end_active_bytes));
      add("events", fmtInt(s.trace_entries));
      add("allocations", fmtInt(s.allocations));
      if (s.duration_s !== null) add("span", fmtSeconds(s.duration_s * 1e6));
      const notes = [];
      if (s.truncated) notes.push("the trace is truncated (ring buffer full)");
      if (s.starts_mid_run) notes.push(`${fmtInt(s.preexisting_freed_in_trace)} allocations predate the trace`);
      this.warnings.textContent = notes.join("; ");
    }

    layoutCanvases() {
      const w = Math.floor(this.canvas.clientWidth || this.section.clientWidth || 800);
      const depth = Math.min(4, this.ann.spans.reduce((m, s) => Math.max(m, s.depth + 1), 0));
      this.annH = depth ? depth * 15 + 2 : 0;
      const size = (c, h) => {
        c.style.height = `${h}px`;
        c.width = Math.round(w * dpr());
        c.height = Math.round(h * dpr());
      };
      size(this.canvas, this.mainH);
      size(this.annCanvas, this.annH);
      this.annCanvas.hidden = !this.annH;
      size(this.ovCanvas, 46);
      this.cachedPlotW = Math.max(10, w - ML - MR);
    }

    // axis units <-> canvas x (CSS px)
    xOf(u) { return ML + ((u - this.x0) / (this.x1 - this.x0)) * this.plotW; }
    uOf(x) { return this.x0 + ((x - ML) / this.plotW) * (this.x1 - this.x0); }

    setRange(x0, x1, fromLink = false) {
      const [f0, f1] = this.fullRange();
      const minSpan = this.axis === "time" ? 20 : 4;
      let span = Math.min(Math.max(x1 - x0, minSpan), f1 - f0);
      x0 = Math.min(Math.max(x0, f0), f1 - span);
      this.x0 = x0;
      this.x1 = x0 + span;
      this.draw();
      this.drawOverview();
      this.request();
      if (!fromLink && state.link && state.panes.length > 1) {
        for (const p of state.panes) {
          if (p === this) continue;
          const [g0, g1] = p.fullRange();
          p.setRange(g0 + ((this.x0 - f0) / (f1 - f0)) * (g1 - g0), g0 + ((this.x1 - f0) / (f1 - f0)) * (g1 - g0), true);
        }
      }
    }

    // Shift+wheel: zoom the y axis around `bytes` (null range = fit the visible maximum)
    zoomY(bytes, factor) {
      const v = this.view;
      if (!v) return;
      const [y0, y1] = this.yzoom || [v.ymin, v.ymax];
      let n0 = Math.max(0, bytes - (bytes - y0) * factor);
      const n1 = n0 + (y1 - y0) * factor;
      this.yzoom = n0 <= 0 && n1 >= this.dm.peak.peak_reserved_bytes ? null : [n0, Math.max(n1, n0 + 64)];
      this.request();
    }

    zoomAt(u, factor) {
      const nx0 = u - (u - this.x0) * factor;
      this.setRange(nx0, nx0 + (this.x1 - this.x0) * factor);
    }

    // ---- data ------------------------------------------------------------------------------
    rangeQuery(x0, x1, axis) {
      return axis === "time" ? `t0=${x0}&t1=${x1}` : `e0=${x0}&e1=${x1}`;
    }

    async request() {
      if (this.inflight) { this.dirty = true; return; }
      this.inflight = true;
      this.dirty = false;
      const axis = this.axis, x0 = this.x0, x1 = this.x1, w = this.plotW, h = this.plotH, dev = this.device;
      const t = performance.now();
      try {
        const yq = this.yzoom ? `&ymin=${Math.round(this.yzoom[0])}&ymax=${Math.round(this.yzoom[1])}` : "";
        const v = await getJSON(`/api/d/${dev}/view?snap=${this.s}&${this.rangeQuery(x0, x1, axis)}&width=${w}&height=${h}${yq}`);
        if (dev === this.device) {
          v.axis = axis; v.vx0 = x0; v.vx1 = x1;
          this.view = v;
          this.reqCount += 1;
          this.renderOff();
          this.draw();
          this.renderHint();
          this.timings.push(performance.now() - t);
          if (this.timings.length > 200) this.timings.shift();
          if (!state.firstPaint && state.panes.every((p) => p.view)) {
            state.firstPaint = performance.now();
            document.body.dataset.ready = "1";
          }
          this.section.dataset.requests = String(this.reqCount);
        }
      } catch (e) {
        setStatus(`view: ${e.message}`, true);
      } finally {
        this.inflight = false;
        if (this.dirty) this.request();
      }
    }

    async loadOverview() {
      const axis = this.axis, [f0, f1] = this.fullRange(), dev = this.device;
      const w = this.plotW;
      try {
        const v = await getJSON(`/api/d/${dev}/view?snap=${this.s}&${this.rangeQuery(f0, f1, axis)}&width=${w}&height=40&detail=0`);
        if (dev === this.device && axis === this.axis) { this.ov = v; this.drawOverview(); }
      } catch (e) {
        setStatus(`overview: ${e.message}`, true);
      }
    }

    // ---- rendering ---------------------------------------------------------------------------
    bandPath(v, k, y, colX) {
      // polygon: bottom edge along the runs, then the top edge back
      const b = v.bands, size = b.size[k], r0 = b.run_start[k], r1 = b.run_start[k + 1], c1 = b.c1[k];
      const p = new Path2D();
      for (let i = r0; i < r1; i++) {
        const cs = b.run_col[i], ce = i + 1 < r1 ? b.run_col[i + 1] : c1, yy = y(b.run_off[i]);
        if (i === r0) p.moveTo(colX(cs), yy); else p.lineTo(colX(cs), yy);
        p.lineTo(colX(ce), yy);
      }
      for (let i = r1 - 1; i >= r0; i--) {
        const cs = b.run_col[i], ce = i + 1 < r1 ? b.run_col[i + 1] : c1, yy = y(b.run_off[i] + size);
        p.lineTo(colX(ce), yy);
        p.lineTo(colX(cs), yy);
      }
      p.closePath();
      return p;
    }

    renderOff() {
      const v = this.view, W = v.width, H = this.plotH, r = dpr();
      const off = this.off;
      off.width = Math.round(W * r);
      off.height = Math.round(H * r);
      const ctx = off.getContext("2d");
      ctx.setTransform(r, 0, 0, r, 0, 0);
      const y = (bytes) => H - ((bytes - v.ymin) / (v.ymax - v.ymin)) * H;
      const colX = (c) => c;
      // one path per colour: a few fills instead of one per band
      const byColor = new Map();
      const edges = new Path2D(); // outlines of bands tall enough to show a separating line
      const b = v.bands, pxPerByte = H / (v.ymax - v.ymin);
      for (let k = 0; k < b.row.length; k++) {
        const c = siteColor(v.site_ids[b.site[k]]);
        let path = byColor.get(c);
        if (!path) { path = new Path2D(); byColor.set(c, path); }
        const band = this.bandPath(v, k, y, colX);
        path.addPath(band);
        // narrow bands get no outline: on short-lived ones it would wash out their colour
        if (b.size[k] * pxPerByte >= 4 && b.c1[k] - b.c0[k] >= 4) edges.addPath(band);
      }
      for (const [c, path] of byColor) { ctx.fillStyle = c; ctx.fill(path); }
      this.closeConflationGaps(ctx, v, y, r);
      // neighbours from one call site share a colour: a thin line keeps them apart
      ctx.strokeStyle = col("--band-edge");
      ctx.lineWidth = 0.5;
      ctx.stroke(edges);
      // aggregate band of what is not drawn one by one: hatched, never mistaken for a band
      const s = v.small;
      ctx.fillStyle = smallPattern(ctx);
      ctx.beginPath();
      ctx.moveTo(0, y(s.offset[0]));
      for (let c = 0; c < W; c++) { ctx.lineTo(c, y(s.offset[c])); ctx.lineTo(c + 1, y(s.offset[c])); }
      for (let c = W - 1; c >= 0; c--) { const t = y(s.offset[c] + s.bytes[c]); ctx.lineTo(c + 1, t); ctx.lineTo(c, t); }
      ctx.closePath();
      ctx.fill();
      // reserved memory: max per column, so peaks are never hidden
      ctx.strokeStyle = col("--reserved");
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      for (let c = 0; c < W; c++) {
        const t = y(v.reserved[c]);
        if (c === 0) ctx.moveTo(0, t); else ctx.lineTo(c, t);
        ctx.lineTo(c + 1, t);
      }
      ctx.stroke();
    }

    // Thin bands of different colours sharing a pixel row each cover a fraction of it, and
    // canvas antialiasing composites them as if they overlapped: the row ends up partly
    // transparent and the stack looks washed out. Below the top of the drawn bands every
    // pixel is covered, so make it opaque: getImageData gives un-premultiplied colours, so
    // the pixel keeps the mix of the bands painted there. O(pixels), a few ms.
    closeConflationGaps(ctx, v, y, r) {
      const w = ctx.canvas.width, h = ctx.canvas.height;
      if (!w || !h || !v.bands.row.length) return;
      const img = ctx.getImageData(0, 0, w, h), d = img.data;
      for (let c = 0; c < v.width; c++) {
        const top = Math.max(0, Math.ceil(y(v.small.offset[c]) * r)); // first whole row inside
        const x0 = Math.round(c * r), x1 = Math.min(w, Math.round((c + 1) * r));
        for (let row = top; row < h; row++) {
          for (let x = x0, i = (row * w + x0) * 4 + 3; x < x1; x++, i += 4) if (d[i]) d[i] = 255;
        }
      }
      ctx.putImageData(img, 0, 0);
    }

    // x of a column of the stored view under the current range (pan/zoom preview)
    colXFn(v) {
      const W = v.width;
      return (c) => this.xOf(v.vx0 + (c / W) * (v.vx1 - v.vx0));
    }

    draw() {
      const c = this.canvas, ctx = c.getContext("2d"), r = dpr();
      const Wc = c.width / r, H = this.mainH, plotH = this.plotH, plotW = this.plotW;
      ctx.setTransform(r, 0, 0, r, 0, 0);
      ctx.clearRect(0, 0, Wc, H);
      const v = this.view;
      ctx.save();
      ctx.beginPath();
      ctx.rect(ML, MT, plotW, plotH);
      ctx.clip();
      if (v && v.axis === this.axis) {
        const dx = this.xOf(v.vx0), dw = this.xOf(v.vx1) - dx;
        ctx.imageSmoothingEnabled = false;
        ctx.drawImage(this.off, dx, MT, dw, plotH);
        const y = (bytes) => MT + plotH - ((bytes - v.ymin) / (v.ymax - v.ymin)) * plotH;
        const colX = this.colXFn(v);
        for (const [which, color, width] of [["pinned", col("--cursor"), 2], ["hover", col("--hl"), 2]]) {
          const row = which === "pinned" ? (state.pinned && state.pinned.pane === this ? state.pinned.row : -1) : (this.hover ? this.hover.row : -1);
          if (row < 0) continue;
          const k = v.bands.row.indexOf(row);
          if (k < 0) continue;
          ctx.strokeStyle = color;
          ctx.lineWidth = width;
          ctx.stroke(this.bandPath(v, k, y, colX));
        }
      }
      // peak marker
      const s = this.dm.peak;
      if (s.peak_event_index >= 0) {
        const pu = this.axis === "time" ? s.peak_time_us : s.peak_event_index + 0.5;
        const px = this.xOf(pu);
        if (px >= ML && px <= ML + plotW) {
          ctx.strokeStyle = col("--peak");
          ctx.setLineDash([4, 3]);
          ctx.lineWidth = 1;
          ctx.beginPath(); ctx.moveTo(px, MT); ctx.lineTo(px, MT + plotH); ctx.stroke();
          ctx.setLineDash([]);
          ctx.fillStyle = col("--peak");
          ctx.font = "11px system-ui, sans-serif";
          ctx.textAlign = "left"; // the axis labels leave it "right"
          ctx.fillText(`peak ${fmtBytes(s.peak_active_bytes)}`, Math.min(px + 4, ML + plotW - 90), MT + 12);
        }
      }
      // out-of-memory entries: where the allocator gave up (the request and the free memory
      // the driver reported), so an OOM snapshot opens on what it is about
      ctx.font = "11px system-ui, sans-serif";
      ctx.textAlign = "left";
      for (const o of this.dm.ooms || []) {
        const ou = this.axis === "time" ? o.time_us : o.event + 0.5;
        if (ou === null) continue;
        const ox = this.xOf(ou);
        if (ox < ML || ox > ML + plotW) continue;
        ctx.strokeStyle = col("--oom");
        ctx.lineWidth = 2;
        ctx.beginPath(); ctx.moveTo(ox, MT); ctx.lineTo(ox, MT + plotH); ctx.stroke();
        const label = `OOM: ${fmtBytes(o.requested_bytes)} requested, ${fmtBytes(o.device_free_bytes)} free`;
        const tw = ctx.measureText(label).width;
        ctx.fillStyle = col("--oom");
        ctx.fillText(label, ox + 4 + tw > ML + plotW ? ox - 4 - tw : ox + 4, MT + 26);
      }
      // live-at cursor
      if (state.live && state.live.pane === this && state.live.u !== undefined && state.live.axis === this.axis) {
        const lx = this.xOf(state.live.u);
        ctx.strokeStyle = col("--cursor");
        ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(lx, MT); ctx.lineTo(lx, MT + plotH); ctx.stroke();
      }
      ctx.restore();
      this.drawAxes(ctx, v);
      this.drawAnnotations();
    }

    drawAxes(ctx, v) {
      const plotW = this.plotW, plotH = this.plotH;
      ctx.fillStyle = col("--axis");
      ctx.strokeStyle = col("--grid");
      ctx.font = "11px system-ui, sans-serif";
      ctx.lineWidth = 1;
      if (v) {
        // y: binary-friendly steps
        const ymin = v.ymin, ymax = v.ymax, yspan = ymax - ymin;
        let step = Math.pow(2, Math.ceil(Math.log2(Math.max(yspan / 5, 1))));
        if (yspan / step < 3) step /= 2;
        // enough decimals that neighbouring ticks differ (y zoom can show 28.0 .. 28.4 GiB)
        const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(Math.max(ymax, 1)) / Math.log(1024))));
        const digits = Math.min(4, Math.max(0, Math.ceil(-Math.log10(step / unit))));
        ctx.textAlign = "right";
        for (let b = Math.ceil(ymin / step) * step; b <= ymax + 1e-9; b += step) {
          const yy = MT + plotH - ((b - ymin) / yspan) * plotH;
          ctx.beginPath(); ctx.moveTo(ML, yy + 0.5); ctx.lineTo(ML + plotW, yy + 0.5); ctx.stroke();
          ctx.fillText(fmtBytes(b, digits), ML - 6, yy + 4);
        }
      }
      // x ticks
      const span = this.x1 - this.x0;
      const raw = span / Math.max(2, plotW / 110);
      const mag = Math.pow(10, Math.floor(Math.log10(raw)));
      const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
      ctx.textAlign = "center";
      const base = this.axis === "time" ? this.dm.time_range[0] : 0;
      for (let u = Math.ceil((this.x0 - base) / step) * step + base; u <= this.x1; u += step) {
        const xx = this.xOf(u);
        ctx.beginPath(); ctx.moveTo(xx + 0.5, MT); ctx.lineTo(xx + 0.5, MT + plotH); ctx.stroke();
        const label = this.axis === "time" ? fmtTick(u - base, step) : fmtEventCount(u);
        // labels at the ends stay inside the plot: clear of the axis name, never clipped
        const half = ctx.measureText(label).width / 2;
        const lx = Math.min(Math.max(xx, ML + half + 2), ML + plotW + MR - half - 1);
        ctx.fillText(label, lx, MT + plotH + 15);
      }
      ctx.textAlign = "right"; // axis name in the left margin, on the tick-label row
      ctx.fillText(this.axis === "time" ? "time ▸" : "event ▸", ML - 6, MT + plotH + 15);
    }

    // Cost per draw: O(pixels x log spans), not O(spans): spans of one level never overlap,
    // so their starts and ends both ascend; a sub-pixel span paints its pixel, then a binary
    // search skips to the first span starting in the next pixel.
    drawAnnotations() {
      if (!this.annH) return;
      const c = this.annCanvas, ctx = c.getContext("2d"), r = dpr();
      ctx.setTransform(r, 0, 0, r, 0, 0);
      ctx.clearRect(0, 0, c.width / r, this.annH);
      ctx.font = "10px system-ui, sans-serif";
      const lv = this.annLevels[this.axis];
      const left = ML, right = ML + this.plotW;
      ctx.fillStyle = col("--ann");
      for (let depth = 0; depth < lv.length; depth++) {
        const { start, end, index } = lv[depth];
        const yy = 1 + depth * 15;
        let i = lowerBound(end, this.x0, 0);
        while (i < start.length && start[i] <= this.x1) {
          let a = this.xOf(start[i]), b = this.xOf(end[i]);
          const sp = this.ann.spans[index[i]];
          a = Math.max(a, left); b = Math.min(b, right);
          ctx.fillRect(a, yy, Math.max(1, b - a - 1), 13);
          if (b - a > 30) {
            ctx.save();
            ctx.beginPath(); ctx.rect(a, yy, b - a - 2, 13); ctx.clip();
            ctx.fillStyle = col("--ann-fg");
            ctx.fillText(sp.name, a + 3, yy + 10); // canvas text: no markup is interpreted
            ctx.restore();
            ctx.fillStyle = col("--ann");
          }
          i = b - a < 2 ? Math.max(i + 1, lowerBound(start, this.uOf(Math.floor(b) + 1), i + 1)) : i + 1;
        }
      }
    }

    annAt(x, y) {
      const depth = Math.floor((y - 1) / 15);
      const lv = this.annLevels[this.axis][depth];
      if (!lv) return null;
      const u = this.uOf(x);
      const i = lowerBound(lv.end, u, 0); // the only span of this level that can hold u
      return i < lv.start.length && lv.start[i] <= u ? this.ann.spans[lv.index[i]] : null;
    }

    drawOverview() {
      const c = this.ovCanvas, ctx = c.getContext("2d"), r = dpr();
      const H = 46, W = c.width / r;
      ctx.setTransform(r, 0, 0, r, 0, 0);
      ctx.clearRect(0, 0, W, H);
      const v = this.ov;
      if (!v) return;
      const w = v.width, y = (b) => H - 3 - (b / v.ymax) * (H - 6); // overview: always from 0
      ctx.fillStyle = col("--small");
      ctx.beginPath();
      ctx.moveTo(ML, H);
      for (let i = 0; i < w; i++) { ctx.lineTo(ML + i, y(v.active[i])); ctx.lineTo(ML + i + 1, y(v.active[i])); }
      ctx.lineTo(ML + w, H);
      ctx.closePath();
      ctx.fill();
      ctx.strokeStyle = col("--reserved");
      ctx.beginPath();
      for (let i = 0; i < w; i++) { const t = y(v.reserved[i]); if (i === 0) ctx.moveTo(ML, t); else ctx.lineTo(ML + i, t); ctx.lineTo(ML + i + 1, t); }
      ctx.stroke();
      // brush
      const [f0, f1] = this.fullRange();
      const bx0 = ML + ((this.x0 - f0) / (f1 - f0)) * w, bx1 = ML + ((this.x1 - f0) / (f1 - f0)) * w;
      ctx.fillStyle = col("--brush");
      ctx.fillRect(bx0, 0, Math.max(2, bx1 - bx0), H);
      ctx.strokeStyle = col("--accent");
      ctx.strokeRect(bx0 + 0.5, 0.5, Math.max(2, bx1 - bx0) - 1, H - 1);
      this.brush = [bx0, bx1];
      const s = this.dm.peak;
      if (s.peak_event_index >= 0) {
        const pu = this.axis === "time" ? s.peak_time_us : s.peak_event_index + 0.5;
        const px = ML + ((pu - f0) / (f1 - f0)) * w;
        ctx.fillStyle = col("--peak");
        ctx.beginPath(); ctx.moveTo(px - 4, 0); ctx.lineTo(px + 4, 0); ctx.lineTo(px, 6); ctx.fill();
      }
    }

    // ---- hit testing -------------------------------------------------------------------------
    // Bottom offset of band k at column c (its runs ascend by column).
    bandOffset(b, k, c) {
      const i = lowerBound(b.run_col, c + 1, b.run_start[k]);
      return b.run_off[Math.min(i, b.run_start[k + 1]) - 1];
    }

    // What is under the pointer: the band (or the aggregate) covering most of the pixel row
    // there, i.e. the colour one sees; thin bands share a pixel, and the exact byte under
    // the pointer would pick one a fraction of a pixel wide by chance.
    hitTest(x, y) {
      const v = this.view;
      if (!v || v.axis !== this.axis) return null;
      if (x < ML || x > ML + this.plotW || y < MT || y > MT + this.plotH) return null;
      // back to a column of the stored view
      const u = this.uOf(x);
      const c = Math.floor(((u - v.vx0) / (v.vx1 - v.vx0)) * v.width);
      if (c < 0 || c >= v.width) return null;
      const byteAt = (yy) => v.ymin + ((MT + this.plotH - yy) / this.plotH) * (v.ymax - v.ymin);
      const bytes = byteAt(y);
      const top = Math.floor(y), lo = byteAt(top + 1), hi = byteAt(top); // the pixel row
      const b = v.bands;
      const hit = { col: c, event: v.sample[c], bytes, active: v.active[c], reserved: v.reserved[c], u };
      // overlap with the pixel row; ties go to what holds the pointer's exact byte
      const score = (off, size) => {
        const o = Math.min(off + size, hi) - Math.max(off, lo);
        return o <= 0 ? 0 : o + (bytes >= off && bytes < off + size ? 1e-6 * (hi - lo) : 0);
      };
      let best = 0, bestK = -1;
      for (let k = 0; k < b.row.length; k++) {
        if (c < b.c0[k] || c >= b.c1[k]) continue;
        const sc = score(this.bandOffset(b, k, c), b.size[k]);
        if (sc > best) { best = sc; bestK = k; }
      }
      const s = v.small;
      if (score(s.offset[c], s.bytes[c]) > best) return { ...hit, kind: "small", count: s.count[c], sbytes: s.bytes[c] };
      if (bestK >= 0) {
        const k = bestK;
        return { ...hit, kind: "band", k, row: b.row[k], size: b.size[k], site: v.sites[b.site[k]], flags: b.flags[k] };
      }
      return { ...hit, kind: "empty" };
    }

    // ---- interaction -------------------------------------------------------------------------
    bind() {
      const cv = this.canvas;
      let drag = null;
      const pos = (e, c = cv) => { const r = c.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
      cv.addEventListener("wheel", (e) => {
        e.preventDefault();
        hideTooltip(); // it described what was under the pointer before the zoom
        if (this.hover) { this.hover = null; this.draw(); }
        const [x, y] = pos(e);
        const factor = Math.exp((e.deltaY || e.deltaX) * 0.0015);
        if (e.shiftKey) {
          const h = this.hitTest(x, y);
          if (h) this.zoomY(h.bytes, factor);
          return;
        }
        this.zoomAt(this.uOf(Math.min(Math.max(x, ML), ML + this.plotW)), factor);
      }, { passive: false });
      cv.addEventListener("mousedown", (e) => {
        if (e.button !== 0) return;
        const [x] = pos(e);
        drag = { x, x0: this.x0, x1: this.x1, moved: false };
        cv.classList.add("dragging");
      });
      window.addEventListener("mousemove", (e) => {
        if (!drag) return;
        const [x] = pos(e);
        if (Math.abs(x - drag.x) > 3) drag.moved = true;
        if (drag.moved) {
          const du = ((x - drag.x) / this.plotW) * (drag.x1 - drag.x0);
          this.setRange(drag.x0 - du, drag.x1 - du);
          hideTooltip();
        }
      });
      window.addEventListener("mouseup", (e) => {
        if (!drag) return;
        const d = drag;
        drag = null;
        cv.classList.remove("dragging");
        if (!d.moved && e.target === cv) this.click(...pos(e));
      });
      cv.addEventListener("mousemove", (e) => {
        const [x, y] = pos(e);
        state.mouse = { pane: this, x, y };
        if (drag && drag.moved) return;
        const h = this.hitTest(x, y);
        const row = h && h.kind === "band" ? h.row : -1;
        if ((this.hover ? this.hover.row : -1) !== row) { this.hover = h && h.kind === "band" ? h : null; this.draw(); }
        if (h) showTooltip(e, this.tooltipLines(h)); else hideTooltip();
      });
      cv.addEventListener("mouseleave", () => { if (this.hover) { this.hover = null; this.draw(); } hideTooltip(); });
      // annotation strip: tooltip, and a click is a moment
      this.annCanvas.addEventListener("mousemove", (e) => {
        const [x, y] = pos(e, this.annCanvas);
        const sp = this.annAt(x, y);
        if (sp) {
          const dur = sp.t1 - sp.t0;
          showTooltip(e, [["t-size", sp.name], ["t-muted", `${fmtSeconds(dur)} · events ${fmtInt(sp.e0)}–${fmtInt(sp.e1)}`]]);
        } else hideTooltip();
      });
      this.annCanvas.addEventListener("mouseleave", hideTooltip);
      this.annCanvas.addEventListener("click", (e) => {
        const [x] = pos(e, this.annCanvas);
        this.liveAtX(x);
      });
      // overview brush
      const ov = this.ovCanvas;
      let od = null;
      const [f0of, f1of] = [() => this.fullRange()[0], () => this.fullRange()[1]];
      const uAt = (x) => { const w = this.ov ? this.ov.width : this.plotW; const f0 = f0of(), f1 = f1of(); return f0 + ((x - ML) / w) * (f1 - f0); };
      ov.addEventListener("mousedown", (e) => {
        const [x] = pos(e, ov);
        const inside = this.brush && x >= this.brush[0] && x <= this.brush[1] && this.x1 - this.x0 < f1of() - f0of();
        od = { x, u: uAt(x), move: inside, x0: this.x0, x1: this.x1, moved: false };
        e.preventDefault();
      });
      window.addEventListener("mousemove", (e) => {
        if (!od) return;
        const [x] = pos(e, ov);
        if (Math.abs(x - od.x) > 2) od.moved = true;
        if (!od.moved) return;
        if (od.move) { const du = uAt(x) - od.u; this.setRange(od.x0 + du, od.x1 + du); } else {
          const a = Math.min(od.u, uAt(x)), b = Math.max(od.u, uAt(x));
          this.setRange(a, b);
        }
      });
      window.addEventListener("mouseup", () => {
        if (!od) return;
        if (!od.moved) { const span = this.x1 - this.x0; this.setRange(od.u - span / 2, od.u + span / 2); }
        od = null;
      });
    }

    tooltipLines(h) {
      const lines = [];
      if (h.kind === "band") {
        lines.push(["t-size", fmtBytes(h.size)]);
        lines.push(["t-site", h.site]);
        const fl = [];
        if (h.flags & 1) fl.push(h.flags & 2 ? "alive before the trace (from the final segments)" : "allocated before the trace");
        if (h.flags & 8) fl.push("freed but pending (another stream)");
        if (fl.length) lines.push(["t-muted", fl.join("; ")]);
      } else if (h.kind === "small") {
        lines.push(["t-size", `${fmtInt(h.count)} small allocations: ${fmtBytes(h.sbytes)}`]);
        lines.push(["t-muted", "each under one pixel at this zoom; zoom in to separate them"]);
      }
      const when = h.event >= 0 ? `after event ${fmtInt(h.event)}` : "before the first event";
      lines.push(["t-muted", `${when} · active ${fmtBytes(h.active)} · reserved ${fmtBytes(h.reserved)}`]);
      return lines;
    }

    click(x, y) {
      const h = this.hitTest(x, y);
      if (!h) return;
      if (h.kind === "band") pin(this, h.row);
      else openLive(this, h.event, h.u);
    }

    liveAtX(x) {
      const v = this.view;
      if (!v || v.axis !== this.axis) return;
      const u = this.uOf(x);
      const c = Math.floor(((u - v.vx0) / (v.vx1 - v.vx0)) * v.width);
      if (c >= 0 && c < v.width) openLive(this, v.sample[c], u);
    }

    jumpToPeak() {
      const s = this.dm.peak;
      if (s.peak_event_index < 0) { openLive(this, -1); return; }
      const [f0, f1] = this.fullRange();
      const pu = this.axis === "time" ? s.peak_time_us : s.peak_event_index + 0.5;
      const span = Math.min(this.x1 - this.x0, (f1 - f0) / 10);
      this.setRange(pu - span / 2, pu + span / 2);
      openLive(this, s.peak_event_index, pu);
    }

    switchAxis() {
      // keep the visible range: convert through the last view's column boundaries
      const v = this.view, newAxis = this.axis;
      if (newAxis === this.curAxis) return;
      const [n0, n1] = this.fullRange(newAxis);
      let x0 = n0, x1 = n1;
      if (v && v.times && v.axis !== newAxis) {
        if (newAxis === "time") { x0 = v.times[0]; x1 = v.times[v.times.length - 1] + 1; } else { x0 = v.bounds[0]; x1 = v.bounds[v.bounds.length - 1]; }
      }
      this.curAxis = newAxis;
      this.view = null;
      this.ov = null;
      this.x0 = n0; this.x1 = n1;
      this.loadOverview();
      this.setRange(x0, x1, true);
    }

    resize() { this.layoutCanvases(); this.loadOverview(); this.draw(); this.request(); }
  }

  // ---- tooltip ------------------------------------------------------------------------------
  function showTooltip(e, lines) {
    const t = $("#tooltip");
    t.replaceChildren(...lines.map(([cls, text]) => el("div", cls, text)));
    t.hidden = false;
    const w = t.offsetWidth, h = t.offsetHeight;
    let x = e.clientX + 14, y = e.clientY + 14;
    if (x + w > window.innerWidth - 4) x = e.clientX - w - 14;
    if (y + h > window.innerHeight - 4) y = e.clientY - h - 14;
    t.style.left = `${Math.max(0, x)}px`;
    t.style.top = `${Math.max(0, y)}px`;
  }
  function hideTooltip() { $("#tooltip").hidden = true; }

  // ---- details panel ------------------------------------------------------------------------
  function kv(dl, k, v) {
    if (v === null || v === undefined || v === "") return;
    dl.append(el("dt", null, k), el("dd", null, v));
  }
  function whenText(p, info) {
    if (!info) return null;
    const t = info.time_us !== null && p.hasTime ? ` · +${fmtSeconds(info.time_us - p.dm.time_range[0])}` : "";
    return `event ${fmtInt(info.event)}${t}`;
  }
  function frameItem(f) {
    const li = el("li");
    li.append(el("span", "fn", f.name), el("span", "loc", `  ${f.filename}:${f.line}`));
    return li;
  }
  function stackBlock(frames) {
    const box = el("div");
    if (!frames.length) {
      box.append(el("div", "t-muted", "No stack recorded (history enabled late, context too weak, or a block known only from the final state)."));
      return box;
    }
    const py = frames.filter((f) => f.kind === "python");
    const ul = el("ul", "frames");
    for (const f of py) ul.append(frameItem(f));
    if (py.length) box.append(ul);
    else box.append(el("div", "t-muted", "No Python frames (e.g. autograd's backward thread)."));
    const other = frames.length - py.length;
    if (other) {
      const det = el("details");
      det.append(el("summary", null, `full stack with ${other} C++/interpreter frame${other > 1 ? "s" : ""} (${frames.length} frames)`));
      const all = el("ul", "frames");
      for (const f of frames) { const li = frameItem(f); if (f.kind !== "python") li.classList.add("loc"); all.append(li); }
      det.append(all);
      box.append(det);
    }
    return box;
  }

  async function pin(pane, row) {
    state.pinned = { pane, row };
    for (const p of state.panes) p.draw();
    const card = $("#details"), body = $(".body", card);
    card.hidden = false;
    try {
      const a = await getJSON(`/api/d/${pane.device}/alloc/${row}?snap=${pane.s}`);
      if (!state.pinned || state.pinned.row !== row) return;
      body.replaceChildren();
      const dl = el("dl", "kv");
      kv(dl, "size", `${fmtBytes(a.size)} (${fmtInt(a.size)} bytes)`);
      kv(dl, "address", `${a.address} version ${a.version}`);
      kv(dl, "allocated", a.alloc ? whenText(pane, a.alloc) : "before the trace began");
      kv(dl, "free requested", whenText(pane, a.free_requested));
      kv(dl, "freed", a.free ? whenText(pane, a.free) : "still allocated at the end");
      kv(dl, "stream", a.stream);
      kv(dl, "pool", a.pool ? `(${a.pool[0]}, ${a.pool[1]})${a.pool[0] || a.pool[1] ? " private" : " default"}` : "unknown (segment gone by the end)");
      kv(dl, "compile context", a.compile_context);
      kv(dl, "user metadata", a.user_metadata);
      kv(dl, "flags", a.flags.join(", "));
      kv(dl, "row", String(a.row));
      body.append(dl);
      body.append(el("h3", null, a.stack_from_free ? "Stack (alloc not recorded; stack of the free)" : "Stack (innermost first)"));
      body.append(stackBlock(a.frames));
      if (a.free_frames) {
        const det = el("details");
        det.append(el("summary", null, "stack of the free"));
        det.append(stackBlock(a.free_frames));
        body.append(det);
      }
      if (a.forward_frames) {
        body.append(el("h3", null, "Forward pass stack (where this tensor was created)"));
        body.append(el("pre", "fwd", a.forward_frames));
      }
    } catch (e) {
      body.replaceChildren(el("div", "warn", e.message));
    }
  }

  // ---- live tree ----------------------------------------------------------------------------
  async function openLive(pane, event, u) {
    const card = $("#live");
    card.hidden = false;
    const py = $("#live-py").checked;
    state.live = { pane, event, u, axis: pane.axis, data: null, focus: [] };
    for (const p of state.panes) p.draw();
    try {
      const d = await getJSON(`/api/d/${pane.device}/live?snap=${pane.s}&event=${event}&python_only=${py ? 1 : 0}`);
      if (!state.live || state.live.event !== event || state.live.pane !== pane) return;
      state.live.data = d;
      renderLive();
    } catch (e) {
      $(".body", card).replaceChildren(el("div", "warn", e.message));
    }
  }

  function heat(share) {
    const h = 55 - 55 * Math.min(1, share); // yellow -> red as the share grows
    return `hsl(${h}, 90%, ${col("--heat-l")})`;
  }

  function markText(parent, text, q) {
    if (!q) { parent.textContent = text; return false; }
    const i = text.toLowerCase().indexOf(q);
    if (i < 0) { parent.textContent = text; return false; }
    parent.replaceChildren(document.createTextNode(text.slice(0, i)), el("mark", null, text.slice(i, i + q.length)), document.createTextNode(text.slice(i + q.length)));
    return true;
  }

  function subtreeMatches(node, q) {
    if (node.label.toLowerCase().includes(q)) return true;
    return (node.children || []).some((c) => subtreeMatches(c, q));
  }

  function renderLive() {
    const L = state.live, card = $("#live"), body = $(".body", card), crumbs = $(".crumbs", card);
    if (!L || !L.data) return;
    const q = $("#live-search").value.trim().toLowerCase();
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
    const t = L.data.time_us !== null && p.hasTime ? ` (+${fmtSeconds(L.data.time_us - p.dm.time_range[0])})` : "";
    crumbs.append(el("div", null, `${when}${t}: active ${fmtBytes(L.data.active)}, reserved ${fmtBytes(L.data.reserved)}, ${fmtInt(L.data.tree.count)} allocations`));
    path.forEach((n, i) => {
      const b = el("button", null, i === 0 ? "all" : n.label);
      b.type = "button";
      b.addEventListener("click", () => { L.focus = L.focus.slice(0, i); renderLive(); });
      crumbs.append(b);
    });
    const total = Math.max(root.bytes, 1);
    const tree = el("div", "tree");
    // A run of frames that each pass all their bytes to one callee (a notebook's or a
    // launcher's wrappers, nn.Module's call machinery) says little row by row and drives the
    // tree off the panel's right edge: one row stands for the run (click it to list the
    // frames), and the tree goes on from the run's last frame.
    const passChain = (n) => {
      const out = [n];
      while ((n.children || []).length === 1 && n.children[0].bytes === n.bytes) {
        n = n.children[0];
        out.push(n);
      }
      return out;
    };
    const chainRow = (frames) => {
      const wrap = el("div", "node");
      const row = el("div", "row chain");
      const bar = el("span", "heat");
      const share = frames[0].bytes / total;
      bar.style.width = `${(share * 100).toFixed(2)}%`;
      bar.style.background = heat(share);
      const lbl = el("span", "lbl", `\u22ef ${frames.length} frames that pass it all on \u22ef`);
      lbl.title = frames.map((f) => f.label).join("\n");
      row.append(bar, el("span", "tog", "\u22ee"), lbl, el("span", "bytes", fmtBytes(frames[0].bytes)),
        el("span", "pct", `${(share * 100).toFixed(1)}%`));
      const list = el("div", "children chain-frames");
      list.hidden = true;
      for (const f of frames) list.append(el("div", "chain-frame", f.label));
      row.addEventListener("click", () => { list.hidden = !list.hidden; });
      wrap.append(row, list);
      return wrap;
    };
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
      const matched = markText(lbl, node.label, q);
      if (matched) row.classList.add("match");
      lbl.title = node.frame ? `${node.frame.filename}:${node.frame.line} ${node.frame.name}` : node.label;
      row.append(bar, tog, lbl, el("span", "bytes", fmtBytes(node.bytes)), el("span", "pct", `${(share * 100).toFixed(1)}%`));
      if (depth > 0 && kids.length) {
        const f = el("button", "focus", "focus");
        f.type = "button";
        f.title = "zoom into this subtree";
        f.addEventListener("click", (e) => { e.stopPropagation(); L.focus = L.focus.concat(pathLabels); renderLive(); });
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
          const chain = q ? [c] : passChain(c);
          if (chain.length > 3) {
            const last = chain[chain.length - 1];
            childBox.append(chainRow(chain.slice(0, -1)));
            build(last, depth + 1, childBox, pathLabels.concat(chain.map((n) => n.label)));
          } else {
            build(c, depth + 1, childBox, pathLabels.concat([c.label]));
          }
        }
      };
      if (open) renderKids(); else childBox.hidden = true;
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

  // ---- compare -----------------------------------------------------------------------------
  async function loadCompare() {
    const card = $("#compare"), body = $(".body", card);
    card.hidden = false;
    try {
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
        tr.append(el("td", null, r.site), el("td", null, fmtBytes(r.a_bytes)), el("td", null, fmtBytes(r.b_bytes)));
        const d = el("td", r.diff > 0 ? "up" : r.diff < 0 ? "down" : "", (r.diff > 0 ? "+" : "") + fmtBytes(r.diff));
        tr.append(d);
        tbl.append(tr);
      }
      body.append(tbl);
      if (c.n_sites > c.sites.length) body.append(el("div", "t-muted", `${c.n_sites - c.sites.length} more sites with smaller differences`));
    } catch (e) {
      body.replaceChildren(el("div", "warn", e.message));
    }
  }

  // ---- page ---------------------------------------------------------------------------------
  function applyTheme(dark) {
    document.documentElement.classList.toggle("dark", dark);
    themeCache = null;
    colours.clear();
    smallTile = null;
    try { localStorage.setItem("memlens-theme", dark ? "dark" : "light"); } catch (e) { /* private mode */ }
    for (const p of state.panes) { if (p.view) p.renderOff(); p.draw(); p.drawOverview(); }
    renderLive(); // heat colours follow the theme
  }

  function toggleHelp(show) {
    const h = $("#help");
    h.hidden = show === undefined ? !h.hidden : !show;
  }

  function activePane() {
    return (state.mouse && state.mouse.pane) || state.panes[0];
  }

  function onKey(e) {
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement) {
      if (e.key === "Escape") e.target.blur();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const p = activePane();
    if (!p) return;
    const span = p.x1 - p.x0, mid = (p.x0 + p.x1) / 2;
    const k = e.key;
    if (k !== "?" && k !== "d") hideTooltip(); // it described the picture before the key
    if (k === "?") toggleHelp();
    else if (k === "Escape") { toggleHelp(false); $("#details").hidden = true; $("#live").hidden = true; state.pinned = null; state.live = null; for (const q of state.panes) q.draw(); }
    else if (k === "ArrowLeft") p.setRange(p.x0 - span * 0.15, p.x1 - span * 0.15);
    else if (k === "ArrowRight") p.setRange(p.x0 + span * 0.15, p.x1 + span * 0.15);
    else if (k === "+" || k === "=" || k === "ArrowUp") p.zoomAt(mid, 0.6);
    else if (k === "-" || k === "_" || k === "ArrowDown") p.zoomAt(mid, 1 / 0.6);
    else if (k === "0" || k === "Home") { const [a, b] = p.fullRange(); p.yzoom = null; p.setRange(a, b); }
    else if (k === "p") p.jumpToPeak();
    else if (k === "t") { const s = $("#axis"); s.value = s.value === "time" ? "event" : "time"; s.dispatchEvent(new Event("change")); }
    else if (k === "d") applyTheme(!document.documentElement.classList.contains("dark"));
    else if (k === "l" && state.mouse) state.mouse.pane.liveAtX(state.mouse.x);
    else if (k === "/") { $("#live").hidden = false; $("#live-search").focus(); }
    else return;
    e.preventDefault();
  }

  async function main() {
    let dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    try { const t = localStorage.getItem("memlens-theme"); if (t) dark = t === "dark"; } catch (e) { /* private mode */ }
    document.documentElement.classList.toggle("dark", dark);
    setStatus("loading…");
    let meta;
    try { meta = await getJSON("/api/meta"); } catch (e) { setStatus(`cannot load: ${e.message}`, true); return; }
    state.meta = meta;
    $("#title").textContent = meta.snapshots.map((s) => s.name).join("  vs  ");
    document.title = `memlens view: ${meta.snapshots.map((s) => s.name.split("/").pop()).join(" vs ")}`;
    const params = new URLSearchParams(location.search);
    const want = params.has("device") ? Number(params.get("device")) : null;
    const compact = meta.snapshots.length > 1;
    for (const s of meta.snapshots) {
      if (!s.devices.length) { setStatus(`${s.name}: no device has trace entries`, true); continue; }
      const d = want !== null && s.devices.some((x) => x.device === want) ? want : s.default_device;
      state.panes.push(new Pane($("#panes"), s, d, compact));
    }
    const warns = meta.snapshots.flatMap((s) => s.warnings);
    setStatus(warns.length ? `note: ${warns.join(" · ")}` : "");
    if (state.panes.length > 1) loadCompare();
    $("#axis").addEventListener("change", (e) => {
      state.axis = e.target.value;
      if (state.axis === "time" && !state.panes.every((p) => p.hasTime)) setStatus("this trace has no timestamps: staying on event order", true);
      for (const p of state.panes) p.switchAxis();
    });
    $("#peak").addEventListener("click", () => activePane().jumpToPeak());
    $("#reset").addEventListener("click", () => { for (const p of state.panes) { const [a, b] = p.fullRange(); p.yzoom = null; p.setRange(a, b, true); } });
    $("#theme").addEventListener("click", () => applyTheme(!document.documentElement.classList.contains("dark")));
    $("#helpbtn").addEventListener("click", () => toggleHelp());
    $("#help").addEventListener("click", (e) => { if (e.target.id === "help") toggleHelp(false); });
    for (const b of document.querySelectorAll("[data-close]")) {
      b.addEventListener("click", () => {
        const id = b.dataset.close;
        if (id === "help") toggleHelp(false); else $(`#${id}`).hidden = true;
        if (id === "details") state.pinned = null;
        if (id === "live") state.live = null;
        for (const p of state.panes) p.draw();
      });
    }
    const cards = ["#details", "#live", "#compare"].map((id) => $(id));
    const guide = () => { $("#guide").hidden = cards.some((c) => !c.hidden); };
    const watch = new MutationObserver(guide);
    for (const c of cards) watch.observe(c, { attributes: true, attributeFilter: ["hidden"] });
    guide();
    $("#live-search").addEventListener("input", () => renderLive());
    $("#live-py").addEventListener("change", () => { const L = state.live; if (L) openLive(L.pane, L.event, L.u); });
    document.addEventListener("keydown", onKey);
    let rt = null;
    window.addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(() => state.panes.forEach((p) => p.resize()), 120); });
  }

  document.addEventListener("DOMContentLoaded", main);
})();
