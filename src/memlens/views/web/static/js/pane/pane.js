// @ts-check
// One chart pane: a snapshot's device, its x range and y zoom, the data requests, and the
// page furniture around the canvases. Drawing is pane/render.js, hit testing and mouse
// input pane/input.js.
import { getJSON, segmentsUrl, viewUrl } from "../api.js";
import { loadCompare } from "../compare.js";
import { loadPools } from "../pools.js";
import { moveCursor } from "../cursor.js";
import { $, dpr, el, setStatus } from "../dom.js";
import { fmtBytes, fmtInt, fmtSeconds } from "../format.js";
import { state } from "../state.js";
import { hatchSummary } from "../tooltip.js";
import { annotationLevels, MB, ML, MR, MT, narrowerAtPeak } from "./geometry.js";
import { bindInput } from "./input.js";
import { drawOverview, drawPane, renderOff } from "./render.js";

// Compare: one memory scale for every pane (0 to the largest peak of any, reserved or
// active), so a 6.5 GiB peak is drawn lower than an 11.6 GiB one; null when alone or when
// the user asked for independent scales (each pane fits what it shows).
/**
 * @param {typeof state} st
 * @returns {[number, number] | null}
 */
export function sharedY(st) {
  if (st.panes.length < 2 || st.independentY) return null;
  let top = 1;
  for (const p of st.panes)
    top = Math.max(top, p.dm.peak.peak_reserved_bytes, p.dm.peak.peak_active_bytes);
  return [0, top];
}

/**
 * @typedef {import("../types.js").ChartAnswer} ChartAnswer
 * @typedef {import("../types.js").AnnotationsAnswer} AnnotationsAnswer
 * @typedef {import("../types.js").DeviceSummary} DeviceSummary
 * @typedef {import("../types.js").MetaSnapshot} MetaSnapshot
 * @typedef {ChartAnswer & {axis: string, vx0: number, vx1: number}} PaneView a chart answer
 *   and the range the page asked it for
 */

export class Pane {
  /**
   * @param {HTMLElement} root
   * @param {MetaSnapshot} snapMeta
   * @param {number} device
   * @param {boolean} compact
   */
  constructor(root, snapMeta, device, compact) {
    this.snap = snapMeta;
    this.s = snapMeta.index;
    this.compact = compact;
    /** @type {PaneView | null} */
    this.view = null; // last response
    this.off = document.createElement("canvas"); // the response, rendered once
    this.inflight = false;
    this.dirty = false;
    /** @type {import("./input.js").BandHit | null} */
    this.hover = null;
    /** @type {AnnotationsAnswer} */
    this.ann = { spans: [], truncated: false };
    /** @type {ChartAnswer | null} */
    this.ov = null;
    /** @type {number[] | null} the overview's brush: [x0, x1] (CSS px), drawn by render.js */
    this.brush = null;
    /** @type {DeviceSummary | null} */
    this.summary = null;
    this.settled = false; // the summary and the stage strip are in (see setDevice)
    this.reqCount = 0;
    /** @type {number[]} the last 200 requests' times, ms */
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
      if (state.pinned && state.pinned.pane === this) {
        state.pinned = null;
        $("#details").hidden = true;
      }
      if (state.live && state.live.pane === this) {
        state.live = null;
        $("#live").hidden = true;
      }
      this.setDevice(Number(this.devSel.value));
      if (state.panes.length > 1) loadCompare();
    });
    head.append(this.devSel);
    this.figures = el("span", "figures");
    head.append(this.figures);
    this.warnings = el("div", "notes");
    this.annCanvas = el("canvas", "ann");
    this.canvas = el("canvas", "main");
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute("aria-label", "active memory timeline");
    this.ovCanvas = el("canvas", "overview");
    this.hint = el("div", "hint");
    this.findLine = el("div", "hint find");
    sec.append(
      head,
      this.warnings,
      this.annCanvas,
      this.canvas,
      this.ovCanvas,
      this.hint,
      this.findLine,
    );
    root.append(sec);
    this.section = sec;
    this.mainH = compact ? 300 : 440;
    // the view's state, set by setDevice (at once, or in compare mode once every pane is
    // made: the panes share one y scale)
    this.device = device;
    /** @type {number} the visible range's start, on the pane's axis */
    this.x0 = 0;
    /** @type {number} its end */
    this.x1 = 1;
    /** the axis the range is on ("" before setDevice) */
    this.curAxis = "";
    /** @type {[number, number] | null} the memory axis's zoom, bytes; null: fit */
    this.yzoom = null;
    this.annLevels = annotationLevels([]);
    /** @type {{u: number, tries: number} | null} jump to peak: narrowing on as views come */
    this.peakFocus = null;
    bindInput(this);
    // compare: the first request waits for every pane (they share one y scale)
    if (!compact) this.setDevice(device);
  }

  // the pane's device in the meta answer (setDevice picks one the snapshot has)
  get dm() {
    const dm = this.snap.devices.find((d) => d.device === this.device);
    if (!dm) throw new Error(`memlens: device ${this.device} is not in ${this.snap.name}`);
    return dm;
  }
  // the trace's first timestamp, µs (0 without timestamps: then the axis is never "time")
  get timeOrigin() {
    const r = this.dm.time_range;
    return r ? r[0] : 0;
  }
  // the peak's place on the pane's axis: its timestamp, or the middle of its event
  get peakU() {
    const s = this.dm.peak;
    return this.axis === "time" && s.peak_time_us !== null
      ? s.peak_time_us
      : s.peak_event_index + 0.5;
  }
  // streams drawn apart: asked for, and the device's trace is on several streams
  get split() {
    return state.splitStreams && this.dm.stream_lanes > 0;
  }
  get hasTime() {
    return !!this.dm.time_range;
  }
  get axis() {
    return state.axis === "time" && this.hasTime ? "time" : "event";
  }
  /** @returns {[number, number]} */
  fullRange(axis = this.axis) {
    const dm = this.dm;
    // (axis is "time" only for a trace with timestamps: this.axis, switchAxis)
    if (axis === "time" && dm.time_range) return [dm.time_range[0], dm.time_range[1] + 1];
    return [0, Math.max(dm.n_events, 1)];
  }
  // cached at layout time: reading clientWidth per shape forces style/layout work
  get plotW() {
    return this.cachedPlotW || Math.max(10, Math.floor(this.canvas.clientWidth) - ML - MR);
  }
  get plotH() {
    return this.mainH - MT - MB;
  }

  /** @param {number} d */
  setDevice(d) {
    if (!this.snap.devices.some((x) => x.device === d)) d = this.snap.devices[0].device;
    this.device = d;
    this.devSel.value = String(d);
    if (this.dm.stream_lanes > 0) $("#streams-ctl").hidden = false;
    this.curAxis = this.axis;
    this.yzoom = null;
    [this.x0, this.x1] = this.fullRange();
    this.view = null;
    this.summary = null;
    this.renderFigures();
    this.ann = { spans: [], truncated: false };
    this.annLevels = annotationLevels([]);
    this.layoutCanvases();
    // the chart first; overview and stage strip once it is drawn (they are not urgent)
    this.request()
      .then(() =>
        Promise.allSettled([
          this.loadOverview(),
          getJSON(`/api/d/${d}/summary?snap=${this.s}`)
            .then((/** @type {DeviceSummary} */ sm) => {
              if (d === this.device) {
                this.summary = sm;
                this.renderFigures();
              }
            })
            .catch((e) => setStatus(`summary: ${/** @type {Error} */ (e).message}`, true)),
          getJSON(`/api/d/${d}/annotations?snap=${this.s}`)
            .then((/** @type {AnnotationsAnswer} */ a) => {
              if (d !== this.device) return;
              this.ann = a;
              this.annLevels = annotationLevels(a.spans);
              this.layoutCanvases(); // resizing clears every canvas: redraw them all
              this.draw();
              this.drawOverview();
            })
            .catch((e) => setStatus(`annotations: ${/** @type {Error} */ (e).message}`, true)),
          // the first pane's pools (the card shows one snapshot's)
          this === state.panes[0]
            ? loadPools(d, this.s).catch((e) =>
                setStatus(`pools: ${/** @type {Error} */ (e).message}`, true),
              )
            : null,
        ]),
      )
      .then(() => {
        // the figures line and the stage strip move the chart down as they arrive: from
        // here on it stays where it is (tests measure it once this is set)
        this.settled = true;
        if (state.panes.every((p) => p.settled)) document.body.dataset.settled = "1";
      });
  }

  // what the hatched band holds at the tallest column, and what separates it: always said
  // when it holds anything, so the budget's choice is never silent
  renderHint() {
    const v = this.view;
    if (!v) return;
    this.hint.textContent =
      v.kind === "segments"
        ? "Active cached segments: one band per segment (cudaMalloc), stacked in the order they were made, coloured by stream; each column at its peak of reserved memory. Click for the allocator state there."
        : hatchSummary(v);
  }

  // the find box's answer for this pane: how many bands match; for an address, where it was
  renderFind() {
    const v = this.view,
      out = [];
    if (state.find && v && v.bands.match) {
      const n = v.bands.match.reduce((a, m) => a + m, 0);
      out.push(
        `find "${state.find}": ${fmtInt(n)} of the ${fmtInt(v.bands.row.length)} drawn allocations match (highlighted)`,
      );
      if (v.address_hits) {
        const hits = v.address_hits.hits
          .slice(0, 5)
          .map(
            (h) =>
              `${fmtBytes(h.size)} at ${h.address}, events ${h.alloc_event < 0 ? "before" : fmtInt(h.alloc_event)}–${h.free_event >= this.dm.n_events ? "end" : fmtInt(h.free_event)} (row ${h.row})`,
          );
        out.push(
          `${fmtInt(v.address_hits.total)} allocations held it over the trace${hits.length ? ": " + hits.join("; ") : ""}`,
        );
      }
    }
    this.findLine.textContent = out.join(". ");
  }

  renderFigures() {
    const s = this.summary;
    const f = this.figures;
    f.replaceChildren();
    if (!s) return;
    /**
     * @param {string} label
     * @param {string} value
     */
    const add = (label, value) => {
      const x = el("span", null, `${label} `);
      x.append(el("b", null, value));
      f.append(x);
    };
    add("peak active", fmtBytes(s.peak_active_bytes));
    add("peak reserved", fmtBytes(s.peak_reserved_bytes));
    add("baseline", fmtBytes(s.baseline_bytes));
    add("end", fmtBytes(s.end_active_bytes));
    add("events", fmtInt(s.trace_entries));
    add("allocations", fmtInt(s.allocations));
    if (s.duration_s !== null) add("span", fmtSeconds(s.duration_s * 1e6));
    // a truncated trace hides memory from the figures: a warning; allocations made before
    // recording began are how most traces start: information, not an alarm
    this.warnings.replaceChildren();
    if (s.truncated)
      this.warnings.append(el("span", "warn", "the trace is truncated (ring buffer full)"));
    if (s.starts_mid_run) {
      const n = fmtInt(s.preexisting_freed_in_trace);
      this.warnings.append(el("span", "info", `${n} allocations predate the trace`));
    }
  }

  layoutCanvases() {
    const w = Math.floor(this.canvas.clientWidth || this.section.clientWidth || 800);
    const depth = Math.min(
      4,
      this.ann.spans.reduce((m, s) => Math.max(m, s.depth + 1), 0),
    );
    this.annH = depth ? depth * 15 + 2 : 0;
    /**
     * @param {HTMLCanvasElement} c
     * @param {number} h
     */
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
  /** @param {number} u */
  xOf(u) {
    return ML + ((u - this.x0) / (this.x1 - this.x0)) * this.plotW;
  }
  /** @param {number} x */
  uOf(x) {
    return this.x0 + ((x - ML) / this.plotW) * (this.x1 - this.x0);
  }
  // x of a column of the stored view `v` under the current range (pan/zoom preview)
  /** @param {PaneView} v */
  colXFn(v) {
    const W = v.width;
    return (/** @type {number} */ c) => this.xOf(v.vx0 + (c / W) * (v.vx1 - v.vx0));
  }

  /**
   * @param {number} x0
   * @param {number} x1
   */
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
        p.setRange(
          g0 + ((this.x0 - f0) / (f1 - f0)) * (g1 - g0),
          g0 + ((this.x1 - f0) / (f1 - f0)) * (g1 - g0),
          true,
        );
      }
    }
  }

  // Shift+wheel: zoom the y axis around `bytes` (null range = fit the visible maximum)
  /**
   * @param {number} bytes
   * @param {number} factor
   */
  zoomY(bytes, factor) {
    const v = this.view;
    if (!v) return;
    if (v.lanes) {
      setStatus("the memory axis zooms with the streams merged (s)");
      return;
    }
    const [y0, y1] = this.yzoom || [v.ymin, v.ymax];
    let n0 = Math.max(0, bytes - (bytes - y0) * factor);
    const n1 = n0 + (y1 - y0) * factor;
    this.yzoom =
      n0 <= 0 && n1 >= this.dm.peak.peak_reserved_bytes ? null : [n0, Math.max(n1, n0 + 64)];
    this.request();
  }

  /**
   * @param {number} u
   * @param {number} factor
   */
  zoomAt(u, factor) {
    const nx0 = u - (u - this.x0) * factor;
    this.setRange(nx0, nx0 + (this.x1 - this.x0) * factor);
  }

  // ---- data ------------------------------------------------------------------------------
  async request() {
    if (this.inflight) {
      this.dirty = true;
      return;
    }
    this.inflight = true;
    this.dirty = false;
    const axis = this.axis,
      x0 = this.x0,
      x1 = this.x1,
      w = this.plotW,
      h = this.plotH,
      dev = this.device;
    const t = performance.now();
    try {
      const url =
        state.chart === "segments"
          ? segmentsUrl(this.s, dev, x0, x1, axis, w, h)
          : viewUrl(this.s, dev, x0, x1, axis, w, h, {
              // the lanes fit the memory axis themselves
              yzoom: this.split ? null : this.yzoom || sharedY(state),
              q: state.find,
              split: this.split,
            });
      /** @type {ChartAnswer} */
      const answer = await getJSON(url);
      if (dev === this.device) {
        const v = { ...answer, axis, vx0: x0, vx1: x1 };
        this.view = v;
        this.reqCount += 1;
        this.renderOff();
        this.draw();
        this.renderHint();
        this.renderFind();
        this.timings.push(performance.now() - t);
        if (this.timings.length > 200) this.timings.shift();
        if (!state.firstPaint && state.panes.every((p) => p.view)) {
          state.firstPaint = performance.now();
          document.body.dataset.ready = "1";
          // when the frame showing it has been rendered: a task posted from the next frame
          // callback runs after that frame's rendering steps (the usual "next paint"
          // measure). For the benchmark, which reads the page's clock rather than when
          // its polling saw data-ready
          requestAnimationFrame(() => {
            const done = new MessageChannel();
            done.port1.onmessage = () => {
              state.firstFrame = performance.now();
            };
            done.port2.postMessage(null);
          });
        }
        this.section.dataset.requests = String(this.reqCount);
        this.focusPeak(v);
      }
    } catch (e) {
      setStatus(`view: ${/** @type {Error} */ (e).message}`, true);
    } finally {
      this.inflight = false;
      if (this.dirty) this.request();
    }
  }

  async loadOverview() {
    const axis = this.axis,
      [f0, f1] = this.fullRange(),
      dev = this.device;
    const w = this.plotW;
    try {
      /** @type {ChartAnswer} */
      const v = await getJSON(viewUrl(this.s, dev, f0, f1, axis, w, 40, { detail: false }));
      if (dev === this.device && axis === this.axis) {
        this.ov = v;
        this.drawOverview();
      }
    } catch (e) {
      setStatus(`overview: ${/** @type {Error} */ (e).message}`, true);
    }
  }

  // ---- drawing (pane/render.js) --------------------------------------------------------------
  renderOff() {
    renderOff(this);
  }
  draw() {
    drawPane(this);
  }
  drawOverview() {
    drawOverview(this);
  }

  // ---- moments ---------------------------------------------------------------------------------
  /** @param {number} x */
  liveAtX(x) {
    const v = this.view;
    if (!v || v.axis !== this.axis) return;
    const u = this.uOf(x);
    const c = Math.floor(((u - v.vx0) / (v.vx1 - v.vx0)) * v.width);
    if (c >= 0 && c < v.width) moveCursor(this, v.sample[c], u);
  }

  // after jump to peak: zoom in on it while its column still sums allocations a narrower
  // range would draw one by one, so each one alive at the peak can be hovered
  /** @param {PaneView} v */
  focusPeak(v) {
    const f = this.peakFocus;
    this.peakFocus = null;
    // (not when the range moved since: the user's own zoom or pan wins)
    if (!f || v.axis !== this.axis || v.vx0 !== this.x0 || v.vx1 !== this.x1 || f.tries <= 0)
      return;
    const next = narrowerAtPeak(v, f.u, this.axis === "time" ? 20 : 4);
    if (!next) return;
    this.peakFocus = { u: f.u, tries: f.tries - 1 };
    this.setRange(next[0], next[1]);
  }

  jumpToPeak() {
    const s = this.dm.peak;
    if (s.peak_event_index < 0) {
      moveCursor(this, -1);
      return;
    }
    const [f0, f1] = this.fullRange();
    const pu = this.peakU;
    const span = Math.min(this.x1 - this.x0, (f1 - f0) / 10);
    this.peakFocus = { u: pu, tries: 4 }; // narrowed further as views arrive (request())
    this.setRange(pu - span / 2, pu + span / 2);
    moveCursor(this, s.peak_event_index, pu);
  }

  switchAxis() {
    // keep the visible range: convert through the last view's column boundaries
    const v = this.view,
      newAxis = this.axis;
    if (newAxis === this.curAxis) return;
    const [n0, n1] = this.fullRange(newAxis);
    let x0 = n0,
      x1 = n1;
    if (v && v.times && v.axis !== newAxis) {
      if (newAxis === "time") {
        x0 = v.times[0];
        x1 = v.times[v.times.length - 1] + 1;
      } else {
        x0 = v.bounds[0];
        x1 = v.bounds[v.bounds.length - 1];
      }
    }
    this.curAxis = newAxis;
    this.view = null;
    this.ov = null;
    this.x0 = n0;
    this.x1 = n1;
    this.loadOverview();
    this.setRange(x0, x1, true);
  }

  resize() {
    this.layoutCanvases();
    this.loadOverview();
    this.draw();
    this.request();
  }
}
