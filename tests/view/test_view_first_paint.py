"""What `memlens view`'s first paint does not wait for (issue 25): the column cache of a cold
load is written in the background after the URL is printed, the slow layout indexes are
built after the first viewport is answered, and the page asks for its modules and its first
answer at once (preload links) instead of one import round trip after another."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from browser_page import Page
from view_fixtures import serving

import memlens
from chromium import BROWSER_MARKS
from memlens.simulation.synthetic import generate_snapshot
from memlens.snapshot.loader import load_then_cache
from memlens.snapshot.store import cache
from memlens.views.web import data as web_data
from memlens.views.web.data import ViewerData

STATIC = Path(web_data.__file__).parent / "static"
IMPORT = re.compile(r'^import .*? from "(\.{1,2}/[^"]+)";', re.M)


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMLENS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "g.pickle"
    generate_snapshot(path, events=20_000, truncate=500)
    return path


def entries() -> list[Path]:
    root = cache.cache_root()
    return [p for p in root.iterdir() if (p / "meta.json").is_file()] if root.is_dir() else []


def test_a_cold_load_writes_its_cache_only_when_asked(generated: Path) -> None:
    snap, write = load_then_cache(generated, warn=False)
    assert snap.cache_key is None and entries() == []  # served from memory meanwhile
    write()
    assert len(entries()) == 1 and snap.cache_key == entries()[0].name
    hit, nothing = load_then_cache(generated, warn=False)
    assert hit.cache_key == snap.cache_key  # read back from the entry just written
    nothing()
    assert len(entries()) == 1
    same = memlens.load(generated, warn=False)
    assert same.device().n_events == snap.device().n_events == hit.device().n_events


def test_load_still_writes_at_once_and_no_cache_writes_nothing(generated: Path) -> None:
    _, write = load_then_cache(generated, cache=False, warn=False)
    write()
    assert entries() == []
    snap = memlens.load(generated, warn=False)
    assert snap.cache_key is not None and len(entries()) == 1


def test_warm_waits_for_the_first_viewport(generated: Path) -> None:
    data = ViewerData([memlens.load(generated, warn=False)])
    dev = data.snapshots[0].default_device
    data.defer_indexes()
    warm = threading.Thread(target=data.warm)
    warm.start()
    time.sleep(0.5)
    lay = data.layout(0, dev)
    assert warm.is_alive() and "live_index" not in lay._cache  # left to the first view
    deferred = data.view(0, dev, width=1300, height=420, min_px=1 / 16)
    warm.join(30)
    assert not warm.is_alive() and "live_index" in lay._cache and lay._kept is True
    assert lay._warming is False
    # the route without the checkpoints gave the answer the built indexes give
    built = data.view(0, dev, width=1300, height=420, min_px=1 / 16)
    assert json.dumps(deferred) == json.dumps(built)


def test_warm_leaves_the_first_viewports_drawing_alone(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_data, "DRAWING_WAIT_S", 60.0)
    data = ViewerData([memlens.load(generated, warn=False)])
    dev = data.snapshots[0].default_device
    data.defer_indexes()
    jobs: list[str] = []
    warm = threading.Thread(
        target=data.warm, kwargs={"after_first_view": [lambda: jobs.append("w")]}
    )
    warm.start()
    data.view_json(0, dev, width=1300, height=420)
    time.sleep(0.5)
    assert warm.is_alive() and jobs == []  # the page is drawing it
    data.summary(0, dev)  # what the page asks for once it has drawn its first viewport
    warm.join(30)
    assert not warm.is_alive() and jobs == ["w"]


def test_warm_goes_ahead_when_nobody_looks(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_data, "FIRST_VIEW_WAIT_S", 0.2)
    data = ViewerData([memlens.load(generated, warn=False)])
    data.defer_indexes()
    data.warm()
    assert "live_index" in data.layout(0, data.snapshots[0].default_device)._cache


def start_view(path: Path, cache_dir: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memlens", "view", str(path), "--no-browser", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "memlens view: serving" in line, (line, proc.stderr.read() if proc.stderr else "")
    return proc, line.split(" at ", 1)[1].split()[0]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.communicate(timeout=10)  # and close its pipes


def wait_for(what: str, ok: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


def test_the_server_writes_the_cache_then_keeps_the_indexes(generated: Path) -> None:
    cache_dir = cache.cache_root()
    proc, url = start_view(generated, cache_dir)
    try:
        view = httpx.get(url + "api/d/0/view?e0=0&e1=20000&width=900&height=300", timeout=30)
        assert view.status_code == 200
        # in the background: the column cache, then (after that first viewport) the indexes
        wait_for("the kept indexes", lambda: list(cache_dir.glob("*/derived/layout-*/meta.json")))
    finally:
        stop(proc)
    # the next start is a warm one, with the same answer
    proc, url = start_view(generated, cache_dir)
    try:
        again = httpx.get(url + "api/d/0/view?e0=0&e1=20000&width=900&height=300", timeout=30)
        assert again.content == view.content
    finally:
        stop(proc)
    assert len(entries()) == 1


def test_stopped_at_once_the_cache_is_still_complete(generated: Path) -> None:
    proc, _ = start_view(generated, cache.cache_root())
    proc.send_signal(signal.SIGINT)  # Ctrl+C as soon as the URL is out
    proc.communicate(timeout=60)
    (entry,) = entries()
    assert memlens.load(generated, warn=False).cache_key == entry.name


def module_closure() -> set[str]:
    """Every module main.js imports, directly or not, as /static/js/ paths."""
    js = STATIC / "js"
    seen: set[str] = set()
    todo = ["main.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in IMPORT.findall((js / name).read_text()):
            todo.append(str(((js / name).parent / spec).resolve().relative_to(js.resolve())))
    return {f"/static/js/{m}" for m in seen - {"main.js"}}


def test_the_page_preloads_every_module_it_imports() -> None:
    html = (STATIC / "index.html").read_text()
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)">', html))
    assert preloaded == module_closure() and len(preloaded) >= 10
    assert '<link rel="preload" href="/api/meta" as="fetch" crossorigin="anonymous">' in html


@pytest.mark.browser
@BROWSER_MARKS[1]
def test_the_page_asks_for_nothing_before_its_viewport(browser, generated) -> None:
    # `/` has the modules as one script, the stylesheet and /api/meta's answer written in
    # (issue 37)
    with serving(ViewerData([memlens.load(generated, warn=False)])) as url:
        pg = Page(browser, url)
        got = pg.page.evaluate(
            "() => performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)"
        )
        assert pg.errors == [] and pg.foreign == []
        first_view = got.index("/api/d/0/view")
        assert got[:first_view] == []
        assert not [p for p in got if p == "/api/meta" or p.startswith("/static/")]
        twice = {p for p in got if got.count(p) > 1} - {"/api/d/0/view"}
        assert twice == set()  # nothing asked for twice (the view: two sizes)
        # the benchmark's clock: the first paint, then the frame showing it rendered
        pg.page.wait_for_function("() => window.memlens.firstFrame !== null")
        painted, rendered = pg.page.evaluate(
            "() => [window.memlens.firstPaint, window.memlens.firstFrame]"
        )
        assert 0 < painted <= rendered


@pytest.mark.browser
@BROWSER_MARKS[1]
def test_the_unbundled_page_still_works_and_uses_its_preloads(browser, generated) -> None:
    # static/index.html as it is: the modules one by one, /api/meta from the preload
    with serving(ViewerData([memlens.load(generated, warn=False)])) as url:
        pg = Page(browser, url + "static/index.html")
        got = pg.page.evaluate(
            "() => performance.getEntriesByType('resource')"
            ".map(e => [new URL(e.name).pathname, e.initiatorType])"
        )
        # (Page calls foreign what is not below the URL it was given)
        assert pg.errors == [] and [u for u in pg.foreign if not u.startswith(url)] == []
        paths = [p for p, _ in got]
        assert [k for p, k in got if p == "/api/meta"] == ["link"]  # the preload, used
        js = {p for p in paths if p.startswith("/static/js/")} - {"/static/js/main.js"}
        assert js == module_closure()
        twice = {p for p in paths if paths.count(p) > 1} - {"/api/d/0/view"}
        assert twice == set()  # no module or answer asked for twice (the view: two sizes)
