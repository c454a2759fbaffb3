"""memlens in a real notebook: cells run by nbclient in a real ipykernel.

One kernel for the module (it takes seconds to start): a snapshot displays itself as
static HTML + SVG (no script, hostile strings escaped), memlens.notebook.view() serves
the viewer from the kernel (its iframe is then loaded in Chromium, framed by a loopback
page the way Jupyter frames it, and the page draws), `%%memlens record` with the capture
tests' fake backend, `%%memlens record` on this CPU-only machine (the CLI's one-line
error), `%%memlens simulate` for real on a tiny model; the viewer stops with the kernel.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memlens
from chromium import CHROMIUM, launch_browser

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("IPython")

RECORD_TESTS = Path(__file__).resolve().parents[1] / "record"
EVIL = "<img src=x onerror=alert(1)>"


def evil_snapshot(path: Path) -> None:
    """Three timed entries; the allocation alive at the peak has a hostile frame."""
    frame = {"filename": f"/home/u/{EVIL}.py", "line": 7, "name": EVIL}
    trace = [
        {"action": "segment_alloc", "addr": 4096, "size": 2 << 20, "stream": 0, "time_us": 1000},
        {"action": "alloc", "addr": 4096, "size": 1 << 20, "stream": 0, "time_us": 1010,
         "frames": [frame]},
        {"action": "free_completed", "addr": 4096, "size": 1 << 20, "stream": 0, "time_us": 1020},
    ]  # fmt: skip
    ann = [{"name": EVIL, "stage": "START", "device": 0, "time_us": 1005},
           {"name": EVIL, "stage": "END", "device": 0, "time_us": 1015}]  # fmt: skip
    path.write_text(
        json.dumps({"segments": [], "device_traces": [trace], "external_annotations": ann})
    )


CELLS = {
    "repr": "import memlens\nsnap = memlens.load({snap!r})\nsnap",
    "view": "import memlens.notebook\nviewer = memlens.notebook.view(snap, height=500)\nprint(viewer.url)\nviewer",
    "load_ext": "%load_ext memlens",
    "record": (
        "%%memlens record -o rec.pickle --no-report\n"
        "from memlens.capture.backend import get_backend\n"
        "b = get_backend()\n"
        "a = b.alloc(3 << 20)\n"
        "c = b.alloc(1 << 20)\n"
        "b.free(a)\n"
    ),
    "cpu_backend": (
        "from memlens.capture import backend as _backend\n"
        "_backend.set_backend(_backend.TorchCudaBackend())"
    ),
    "record_on_cpu": "%%memlens record -o cpu.pickle\nx = 1",
    "simulate": (
        "%%memlens simulate -o sim.pickle\n"
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),\n"
        "                            torch.nn.Linear(1024, 256)).cuda()\n"
        "loss = model(torch.randn(32, 256, device='cuda')).square().mean()\n"
        "loss.backward()\n"
    ),
    "cell_number": (
        "from memlens.notebook.magics import cell_number\nprint(cell_number(get_ipython()))"
    ),
    "simulate_fits": (
        "%%memlens simulate -o fits.pickle --device-memory 24GiB --cublas-workspace 0\n"
        "x = torch.empty(3 << 20, dtype=torch.uint8, device='cuda')\n"
    ),
    "cell_sites": (
        "from memlens.analysis.sites import top_sites\n"
        "d = memlens.load('fits.pickle').device(0)\n"
        "print([s['site'] for s in top_sites(d, d.live_at(d.n_events - 1))])"
    ),
    "simulate_oom": (
        "%%memlens simulate -o oom.pickle --device-memory 64MiB --cublas-workspace 0\n"
        "big = torch.empty(128 << 20, dtype=torch.uint8, device='cuda')\n"
    ),
}


class Run:
    """The executed notebook: each cell's outputs by name, the kernel still running."""

    def __init__(self, client: Any, nb: Any, folder: Path, names: list[str]) -> None:
        self.client, self.nb, self.folder = client, nb, folder
        self.outputs = {n: nb.cells[i].outputs for i, n in enumerate(names)}

    def html(self, name: str) -> str:
        return "".join(
            o["data"]["text/html"]
            for o in self.outputs[name]
            if o["output_type"] in ("display_data", "execute_result") and "text/html" in o["data"]
        )

    def stream(self, name: str, which: str = "stdout") -> str:
        return "".join(o["text"] for o in self.outputs[name] if o.get("name") == which)

    def errors(self, name: str) -> list[dict[str, Any]]:
        return [o for o in self.outputs[name] if o["output_type"] == "error"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    folder = tmp_path_factory.mktemp(f"nb {EVIL}".replace("/", ""))
    snap = folder / f"{EVIL}.json"
    evil_snapshot(snap)
    names = list(CELLS)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELLS[n].format(snap=str(snap))) for n in names]
    saved = {
        k: os.environ.get(k) for k in ("MEMLENS_RECORD_BACKEND", "PYTHONPATH", "MEMLENS_CACHE_DIR")
    }
    # the kernel inherits these: the capture tests' fake backend, a cache of its own
    os.environ["MEMLENS_RECORD_BACKEND"] = "record_fake_backend:FakeBackend"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(RECORD_TESTS), saved["PYTHONPATH"]) if p
    )
    os.environ["MEMLENS_CACHE_DIR"] = str(folder / "cache")
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    )  # fmt: skip
    try:
        with client.setup_kernel():
            for i, cell in enumerate(nb.cells):
                client.execute_cell(cell, i)
            yield Run(client, nb, folder, names)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_snapshot_displays_itself_as_static_html(run: Run) -> None:
    assert not run.errors("repr")
    html = run.html("repr")
    assert "<svg" in html and "</svg>" in html and "peak active" in html
    assert "<script" not in html.lower()
    assert EVIL not in html  # in the source path, the call site and the stage name
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 2
    assert "1.00 MiB" in html  # the peak
    # what the notebook stores beside the HTML is one line, not the columns (was 186 KB)
    plain = [
        o["data"]["text/plain"] for o in run.outputs["repr"] if "text/plain" in o.get("data", {})
    ]
    assert len(plain) == 1 and "\n" not in plain[0] and len(plain[0]) < 400
    assert plain[0].startswith("<memlens Snapshot ") and "peak active 1.00 MiB" in plain[0]


def test_viewer_iframe_serves_the_page_and_it_draws(run: Run) -> None:
    assert not run.errors("view")
    url = run.stream("view").strip()
    assert url.startswith("http://127.0.0.1:")
    html = run.html("view")
    assert f'<iframe src="{url}"' in html and "<script" not in html
    with urllib.request.urlopen(url, timeout=10) as r:
        csp = r.headers["Content-Security-Policy"]
    assert "frame-ancestors http://localhost:* http://127.0.0.1:*" in csp
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium")
    # a loopback page holding the cell's HTML, as Jupyter serves a notebook
    host = _serve_html(f"<!doctype html><body>{html}</body>")
    errors: list[str] = []
    try:
        for browser in launch_browser():
            page = browser.new_page(viewport={"width": 1200, "height": 700})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(host)
            frame = page.frame_locator("iframe")
            frame.locator("body[data-ready='1']").wait_for(timeout=30_000)
            inner = next(f for f in page.frames if f.url.startswith(url))
            painted = inner.evaluate(
                """() => { const c = document.querySelector('canvas.main'), r = window.devicePixelRatio || 1;
                const d = c.getContext('2d').getImageData(80 * r, 10 * r, c.width - 100 * r, c.height - 40 * r).data;
                let n = 0; for (let i = 3; i < d.length; i += 16) if (d[i] > 0) n++; return n / (d.length / 16); }"""
            )  # fmt: skip
            assert painted > 0.05, painted
            assert not errors, errors
    finally:
        _stop_html()


_httpd: list[http.server.HTTPServer] = []


def _serve_html(body: str) -> str:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _httpd.append(httpd)
    return f"http://127.0.0.1:{httpd.server_address[1]}/"


def _stop_html() -> None:
    while _httpd:
        _httpd.pop().shutdown()


def test_record_magic_with_the_fake_backend(run: Run) -> None:
    assert not run.errors("load_ext") and not run.errors("record")
    assert "memlens: snapshot written to rec.pickle" in run.stream("record")
    html = run.html("record")
    assert "<svg" in html and "<script" not in html.lower()
    dev = memlens.load(run.folder / "rec.pickle").device(0)
    assert dev.peak_active_bytes == 4 << 20 and dev.end_active_bytes == 1 << 20


def test_record_magic_on_cpu_is_the_cli_one_line_error(run: Run, tmp_path: Path) -> None:
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    env = {k: v for k, v in os.environ.items() if k != "MEMLENS_RECORD_BACKEND"}
    cli = subprocess.run(
        [sys.executable, "-m", "memlens", "run", "-o", str(tmp_path / "x.pickle"), str(script)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 2
    (line,) = cli.stderr.strip().splitlines()
    (error,) = run.errors("record_on_cpu")
    assert error["traceback"] == [line]
    assert not (run.folder / "cpu.pickle").exists()


def test_simulate_magic_runs_the_cell_on_fake_cuda(run: Run) -> None:
    assert not run.errors("simulate"), run.errors("simulate")
    assert "memlens: simulated snapshot written to sim.pickle" in run.stream("simulate")
    html = run.html("simulate")
    assert "<svg" in html and "<script" not in html.lower()
    dev = memlens.load(run.folder / "sim.pickle").device(0)
    params = (256 * 1024 + 1024 + 1024 * 256 + 256) * 4
    assert dev.peak_active_bytes > params  # weights, activations and gradients


def test_viewer_stops_with_the_kernel(run: Run) -> None:
    url = run.stream("view").strip()
    urllib.request.urlopen(url, timeout=10).close()  # running while the kernel is
    from nbclient.util import run_sync

    run_sync(run.client.km.shutdown_kernel)(now=False)  # a polite shutdown: atexit runs
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
        except (urllib.error.URLError, ConnectionError, OSError):
            return
        time.sleep(0.2)
    pytest.fail(f"{url} still answers after the kernel exited")


def test_a_cell_that_runs_out_of_memory_shows_its_snapshot_then_fails(run: Run) -> None:
    oom, last = run.errors("simulate_oom")  # the cell's own error, then the magic's line
    assert oom["ename"] == "OutOfMemoryError"
    assert last["traceback"] == [
        "memlens: the cell raised OutOfMemoryError (above); its snapshot is oom.pickle"
    ]
    assert "peak active" in run.html("simulate_oom")  # the snapshot, displayed
    dev = memlens.load(run.folder / "oom.pickle").device(0)
    assert dev.action_name(dev.n_events - 1) == "oom"


def test_simulate_with_device_memory_says_whether_it_fits_and_the_margin(run: Run) -> None:
    assert not run.errors("simulate_fits"), run.errors("simulate_fits")
    from memlens.units import format_bytes as fb

    dev = memlens.load(run.folder / "fits.pickle").device(0)
    reserved = dev.peak_reserved_bytes
    assert 3 << 20 <= reserved < 1 << 30
    assert (
        f"memlens: fits in 24.00 GiB: peak reserved {fb(reserved)}, "
        f"{fb(24 * 2**30 - reserved)} to spare (peak active {fb(dev.peak_active_bytes)})"
        in run.stream("simulate_fits")
    )
    assert "does not fit in 64.00 MiB: the cell ran out of memory" in run.stream("simulate_oom")


def test_call_sites_in_a_notebook_are_named_by_cell_and_line(run: Run) -> None:
    """`<module> (cell In [N], line 2)`, N the magic cell's In number, not the kernel's
    temporary file (`/tmp/ipykernel_4679/843182234.py:2`)."""
    n = run.nb.cells[list(CELLS).index("simulate_fits")].execution_count
    sites = run.stream("cell_sites")
    assert f"'<module> (cell In [{n}], line 1)'" in sites, sites
    assert "ipykernel_" not in sites


def test_the_magics_cell_number_is_the_in_number(run: Run) -> None:
    i = list(CELLS).index("cell_number")
    assert run.stream("cell_number").strip() == str(run.nb.cells[i].execution_count)
