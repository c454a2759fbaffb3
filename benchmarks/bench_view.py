"""Benchmark `memlens view` at 100k, 1M and 5M events.

Measures, per size:
* command -> first complete paint, cold (empty column cache) and warm (cache filled):
  `memlens view FILE --no-browser` is started, a running headless Chromium opens the URL
  and the clock stops when the frame showing the page's first viewport is rendered, read
  on the page's own clock (performance.timeOrigin + state.firstFrame, against the epoch
  time the command started); when Playwright's polling saw it (body[data-ready]) is kept
  beside it (cold_seen_s, warm_seen_s: 0.05-0.25 s later on a loaded 2-core box);
* server time per viewport (DeviceLayout.view + JSON, in process) and the JSON's size;
* in the browser: request -> drawn per viewport while panning, frame time while dragging
  (requestAnimationFrame intervals), JS heap (CDP Performance.getMetrics).

* over HTTP: GET /api/d/D/view of the same 40 windows against a running `memlens view`
  (request -> body read) and the bytes per viewport;
* with the paint: `pickle.load` of the same file in a fresh process (the file's pages in the
  OS cache, as for the paints), and each first paint as a fraction of it (issue 37's
  targets at 3.6M events: cold <= 0.35x, warm <= 0.12x), medians of the runs (and the
  ratio of the best runs, as the earlier tables gave it); and, of the warm paints, where the
  time after the URL went (warm_phases_ms: opening the tab, then the page's first viewport
  request sent, its answer's first and last byte, the paint, in ms since navigation).

Usage: python benchmarks/bench_view.py [--sizes 100000,1000000,5000000] [--files A.pickle,...]
       [--parts paint,server,http,browser] [--cold-runs N] [--warm-runs N] [--out FILE.md]
Real-stack files: tile a real recording, e.g.
  python /work/shared/tools/tile_snapshot.py -n 190 wedson_medium_128_training.pickle
  benchmarks/data/wedson_x190.pickle   (3.6M events; -n 63: 1.2M)
Snapshots are generated into benchmarks/data/ (git-ignored) when missing; --files measures
given snapshots instead (e.g. a real one); --parts runs only some of the measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip
WIDTH, HEIGHT = 1400, 900


def snapshot_file(n: int) -> Path:
    path = DATA / f"gen_{n}.pickle"
    if not path.exists():
        from memlens.simulation.synthetic import generate_snapshot

        print(f"generating {path} ...", file=sys.stderr)
        generate_snapshot(path, events=n)
    return path


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def start_server(path: Path, cache_dir: str) -> tuple[subprocess.Popen, str, float, float]:
    """(the server, its URL, perf_counter and epoch seconds when it was started)."""
    env = dict(os.environ, MEMLENS_CACHE_DIR=cache_dir)
    t0, t0_epoch = time.perf_counter(), time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memlens", "view", str(path), "--no-browser", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    line = proc.stdout.readline()
    url = line.split(" at ", 1)[1].split()[0]
    return proc, url, t0, t0_epoch


def stop(proc: subprocess.Popen) -> None:
    """Stop a server: SIGTERM (it finishes writing its cache), SIGKILL if it is still up a
    minute later (on a loaded box ten seconds were not always enough)."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Where a paint's time went after the URL, from the page's own timings (ms since the page's
# navigation began): the first viewport's request sent, its answer's first and last byte,
# the page's first complete paint (state.firstPaint) and the frame showing it rendered
# (state.firstFrame).
PAGE_PHASES = """() => {
  const v = performance.getEntriesByType('resource').find(r => r.name.includes('/view?'));
  return v ? {view_sent: v.requestStart, view_first_byte: v.responseStart,
              view_end: v.responseEnd, painted: window.memlens.firstPaint,
              rendered: window.memlens.firstFrame ?? window.memlens.firstPaint} : {};
}"""


# Epoch ms when the frame showing the page's first viewport was rendered (state.firstFrame,
# on the page's own clock); a page without it: when it was drawn (state.firstPaint).
PAINTED_AT = """() => performance.timeOrigin +
  (window.memlens.firstFrame ?? window.memlens.firstPaint)"""
PAINTED = "() => window.memlens.firstFrame !== null || !('firstFrame' in window.memlens)"


def first_paint(
    browser, path: Path, cache_dir: str
) -> tuple[float, float, float, float, dict[str, float]]:
    """(seconds from command to first complete paint, by the page's clock: the frame
    showing it rendered; seconds until Playwright saw it (its polling of body[data-ready]
    came 0.05-0.25 s later on a loaded 2-core box); seconds until the URL was printed;
    CPU seconds the server had used when the page was drawn: on a loaded box the wall
    times wait for a core, this does not; where the time after the URL went: ms to open a
    tab (Playwright's page), and the page's own PAGE_PHASES)."""
    proc, url, t0, t0_epoch = start_server(path, cache_dir)
    t_url = time.perf_counter() - t0
    try:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        t_tab = time.perf_counter() - t0
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=300_000)
        seen = time.perf_counter() - t0
        cpu = cpu_s(proc.pid)
        page.wait_for_function(PAINTED)
        painted = page.evaluate(PAINTED_AT) / 1000 - t0_epoch
        phases = {"tab": (t_tab - t_url) * 1000, **page.evaluate(PAGE_PHASES)}
        page.close()
        wait_for_kept_indexes(cache_dir)
        return painted, seen, t_url, cpu, phases
    finally:
        stop(proc)


PICKLE_LOAD = """
import pickle, sys, time
with open(sys.argv[1], "rb") as f:
    t = time.perf_counter()
    pickle.load(f)
print(time.perf_counter() - t)
"""


def compile_package() -> None:
    """memlens's bytecode, as an installed wheel has it: run from a checkout with
    PYTHONDONTWRITEBYTECODE=1, every start would compile its source (0.5 s of a warm
    paint), a cost no user pays."""
    import compileall

    import memlens

    compileall.compile_dir(Path(memlens.__file__).parent, quiet=1)


def pickle_load_s(path: Path) -> float:
    """Seconds `pickle.load` takes on the file, in a fresh process (the yardstick of the
    first paint: what opening the snapshot costs without memlens)."""
    out = subprocess.run([sys.executable, "-c", PICKLE_LOAD, str(path)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    return float(out.stdout)


def wait_for_kept_indexes(cache_dir: str, timeout: float = 120.0) -> None:
    """Let the server finish keeping its layout indexes beside the column cache (what it
    does in the background while someone looks at the first paint) before stopping it;
    nothing to wait for with a memlens that does not keep them."""
    try:
        import memlens.views.layout.persist  # noqa: F401
    except ImportError:
        return
    end = time.perf_counter() + timeout
    while not list(Path(cache_dir).glob("*/derived/layout-*/meta.json")):
        if time.perf_counter() > end:
            raise SystemExit("the server did not keep its layout indexes")
        time.sleep(0.1)


def windows(n: int, count: int) -> list[tuple[float, float]]:
    """The whole trace, then random windows of 1/10,000 of it to all of it (log-uniform)."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        span = n if i == 0 else n * 10 ** rng.uniform(-4, 0)
        e0 = rng.uniform(0, n - span)
        out.append((e0, e0 + span))
    return out


def http_viewports(path: Path, cache_dir: str, n_views: int = 40) -> dict[str, float]:
    """End to end over HTTP against a running `memlens view`: GET /api/d/D/view of random
    windows (indexes warm), request sent -> body read; the bytes on the wire."""
    import urllib.request

    import memlens

    dev = memlens.load(path, warn=False).device()
    proc, url, *_ = start_server(path, cache_dir)
    try:
        times, sizes = [], []
        wins = windows(dev.n_events, n_views)
        for k, (e0, e1) in enumerate([wins[0], *wins]):  # the first one warms the indexes
            q = f"{url}api/d/{dev.device}/view?e0={e0}&e1={e1}&width=1300&height=420"
            t = time.perf_counter()
            with urllib.request.urlopen(q, timeout=600) as r:
                body = r.read()
            if k:
                times.append((time.perf_counter() - t) * 1000)
                sizes.append(len(body) / 1024)
        return {
            "http_ms_p50": pct(times, 50),
            "http_ms_p95": pct(times, 95),
            "http_kb_p50": pct(sizes, 50),
            "http_kb_max": max(sizes),
        }
    finally:
        stop(proc)


def server_viewports(path: Path, n_views: int = 40) -> dict[str, float]:
    """In-process layout + JSON time of random viewports (indexes warm)."""
    import memlens
    from memlens.views.web.data import ViewerData

    snap = memlens.load(path)
    data = ViewerData([snap])
    t = time.perf_counter()
    data.warm()
    warm_s = time.perf_counter() - t
    dev = snap.device()
    n = dev.n_events
    times, cpu, bands, sizes = [], [], [], []
    for e0, e1 in windows(n, n_views):
        t, c = time.perf_counter(), time.process_time()
        v = data.view(0, dev.device, width=1300, height=420, e0=e0, e1=e1)
        body = json.dumps(v, separators=(",", ":"))
        times.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        bands.append(len(v["bands"]["row"]))
        sizes.append(len(body) / 1024)
    return {
        "index_build_s": warm_s,
        "view_ms_p50": pct(times, 50),
        "view_ms_p95": pct(times, 95),
        "view_ms_max": max(times),
        "view_cpu_ms_p50": pct(cpu, 50),
        "view_cpu_ms_p95": pct(cpu, 95),
        "full_view_ms": times[0],
        "bands_max": max(bands),
        "full_bands": bands[0],
        "json_kb_p50": pct(sizes, 50),
        "json_kb_max": max(sizes),
        "full_json_kb": sizes[0],
    }


PAN_JS = """async () => {
  const frames = []; let last = performance.now(), run = true;
  const tick = (t) => { frames.push(t - last); last = t; if (run) requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  window.__stopPan = () => { run = false; return frames.slice(2); };
}"""


def browser_session(browser, path: Path, cache_dir: str) -> dict[str, float]:
    """Pan and zoom in a real page: per-viewport latency, frame times, JS heap."""
    proc, url, *_ = start_server(path, cache_dir)
    try:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=300_000)
        box = page.locator("canvas.main").bounding_box()
        cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(cx, cy)
        for _ in range(6):  # zoom to ~1% of the trace, then pan across it
            page.mouse.wheel(0, -500)
            time.sleep(0.15)
        time.sleep(0.5)
        page.evaluate("() => { window.memlens.panes[0].timings.length = 0; }")
        page.evaluate(PAN_JS)
        page.mouse.down()
        for i in range(120):
            page.mouse.move(cx - (i % 60) * 8 + (300 if i >= 60 else 0), cy)
            time.sleep(1 / 60)
        page.mouse.up()
        time.sleep(0.8)
        frames = page.evaluate("() => window.__stopPan()")
        timings = page.evaluate("() => window.memlens.panes[0].timings")
        # zoom back out to everything, the heaviest view
        page.keyboard.press("0")
        time.sleep(1.0)
        metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
        page.close()
        return {
            "frame_ms_p50": pct(frames, 50),
            "frame_ms_p95": pct(frames, 95),
            "viewport_e2e_ms_p50": pct(timings, 50),
            "viewport_e2e_ms_p95": pct(timings, 95),
            "viewports_while_panning": len(timings),
            "js_heap_mb": metrics.get("JSHeapUsedSize", float("nan")) / 2**20,
            "js_heap_total_mb": metrics.get("JSHeapTotalSize", float("nan")) / 2**20,
        }
    finally:
        stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="100000,1000000,5000000")
    ap.add_argument("--files", default=None, help="comma-separated snapshots instead of sizes")
    ap.add_argument("--parts", default="paint,server,http,browser")
    ap.add_argument("--out", default=None, help="write a markdown table here")
    ap.add_argument("--warm-runs", type=int, default=1, help="warm paints; the median is kept")
    ap.add_argument("--cold-runs", type=int, default=1, help="cold paints (each with an empty "
                    "cache) and pickle.load runs; the median is kept")  # fmt: skip
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if not parts <= {"paint", "server", "http", "browser"}:
        ap.error("--parts takes paint, server, http, browser")
    from playwright.sync_api import sync_playwright

    import memlens

    if args.files:
        paths = [Path(f) for f in args.files.split(",")]
    else:
        paths = [snapshot_file(int(x)) for x in args.sizes.split(",")]
    if "paint" in parts:
        compile_package()
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for path in paths:
            row: dict = {"file_mb": path.stat().st_size / 2**20}
            with tempfile.TemporaryDirectory(prefix="memlens-bench-cache-") as cache:
                if "paint" in parts:  # first: cold is with the empty cache
                    row["loadavg_before"] = os.getloadavg()
                    colds = [first_paint(browser, path, cache)]
                    for _ in range(args.cold_runs - 1):
                        with tempfile.TemporaryDirectory(prefix="memlens-bench-cold-") as other:
                            colds.append(first_paint(browser, path, other))
                    loads = [pickle_load_s(path) for _ in range(args.cold_runs)]
                    # on a shared box one run says little: the median of several runs
                    warms = [first_paint(browser, path, cache) for _ in range(args.warm_runs)]
                    cold, cold_seen, cold_url, cold_cpu = (pct([c[i] for c in colds], 50)
                                                           for i in range(4))  # fmt: skip
                    warm, warm_seen, warm_url, warm_cpu = (pct([w[i] for w in warms], 50)
                                                           for i in range(4))  # fmt: skip
                    load = pct(loads, 50)
                    row.update(cold_paint_s=cold, cold_url_s=cold_url, warm_paint_s=warm,
                               warm_url_s=warm_url, warm_runs_s=[round(w[0], 3) for w in warms],
                               cold_runs_s=[round(c[0], 3) for c in colds],
                               cold_seen_s=cold_seen, warm_seen_s=warm_seen,
                               cold_server_cpu_s=cold_cpu, warm_server_cpu_s=warm_cpu,
                               pickle_load_s=load, pickle_runs_s=[round(x, 3) for x in loads],
                               cold_ratio=cold / load, warm_ratio=warm / load,
                               best_cold_ratio=min(c[0] for c in colds) / min(loads),
                               best_warm_ratio=min(w[0] for w in warms) / min(loads),
                               warm_phases_ms={k: round(pct([w[4][k] for w in warms], 50), 1)
                                               for k in warms[0][4]},
                               loadavg=os.getloadavg())  # fmt: skip
                os.environ["MEMLENS_CACHE_DIR"] = cache
                row["events"] = memlens.load(path, warn=False).device().n_events
                if "server" in parts:
                    row.update(server_viewports(path))
                if "http" in parts:
                    row.update(http_viewports(path, cache))
                if "browser" in parts:
                    row.update(browser_session(browser, path, cache))
            row["name"] = path.name
            rows.append(row)
            print(json.dumps(row), flush=True)
        browser.close()
    if args.out:
        write_markdown(rows, Path(args.out))


def write_markdown(rows: list[dict], out: Path) -> None:
    cols = [
        ("name", "snapshot", "{}"), ("events", "events", "{:,}"), ("file_mb", "pickle MiB", "{:.0f}"),
        ("cold_paint_s", "first paint cold (s)", "{:.2f}"), ("warm_paint_s", "first paint warm (s)", "{:.2f}"),
        ("pickle_load_s", "pickle.load (s)", "{:.2f}"), ("cold_ratio", "cold / pickle.load", "{:.2f}x"),
        ("warm_ratio", "warm / pickle.load", "{:.2f}x"),
        ("view_ms_p50", "server view p50 (ms)", "{:.1f}"), ("view_ms_p95", "server view p95 (ms)", "{:.1f}"),
        ("view_cpu_ms_p50", "server view CPU p50 (ms)", "{:.1f}"),
        ("view_cpu_ms_p95", "server view CPU p95 (ms)", "{:.1f}"),
        ("http_ms_p50", "HTTP view p50 (ms)", "{:.1f}"), ("http_ms_p95", "HTTP view p95 (ms)", "{:.1f}"),
        ("http_kb_max", "HTTP max (KiB)", "{:.0f}"),
        ("full_view_ms", "server full view (ms)", "{:.1f}"),
        ("full_bands", "bands full view", "{:,}"), ("full_json_kb", "JSON full view (KiB)", "{:.0f}"),
        ("json_kb_max", "JSON max (KiB)", "{:.0f}"),
        ("viewport_e2e_ms_p50", "viewport e2e p50 (ms)", "{:.1f}"),
        ("viewport_e2e_ms_p95", "viewport e2e p95 (ms)", "{:.1f}"),
        ("frame_ms_p50", "pan frame p50 (ms)", "{:.1f}"), ("frame_ms_p95", "pan frame p95 (ms)", "{:.1f}"),
        ("js_heap_mb", "JS heap (MiB)", "{:.1f}"), ("index_build_s", "index build (s)", "{:.2f}"),
    ]  # fmt: skip
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        "headless Chromium (Debian), software rendering.",
        "",
        "| " + " | ".join(c[1] for c in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in rows:
        lines.append(
            "| " + " | ".join(fmt.format(r[k]) if k in r else "–" for k, _, fmt in cols) + " |"
        )
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
