"""The static notebook display (views/notebook.py) and the viewer's framing rule, without a
kernel: what a saved notebook keeps must be self-contained HTML + SVG, never a script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import memlens
from memlens.simulation.synthetic import generate_snapshot
from memlens.units import format_bytes
from memlens.views.notebook import snapshot_html


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> memlens.Snapshot:
    path = tmp_path_factory.mktemp("repr") / "two.pickle"
    generate_snapshot(path, events=2000, devices=2)
    return memlens.load(path)


def test_every_device_with_figures_and_a_self_styled_timeline(snap: memlens.Snapshot) -> None:
    html = snap._repr_html_()
    assert html == snapshot_html(snap)
    assert html.count("<svg") == 2 and html.count("peak active") == 2
    assert "<script" not in html.lower() and "<style" not in html.lower()
    assert not re.search(r"\son\w+=", html)  # no event handler attributes
    # the report's CSS classes carry their look as attributes (no stylesheet in a notebook)
    assert 'class="active-max" d=' not in html
    assert re.search(r'class="active-max" fill="#[0-9a-f]{6}"', html)
    assert 'class="cursor"' not in html and 'class="timeline-hit"' not in html
    dev = snap.device()
    assert f"<b>{format_bytes(dev.peak_active_bytes)}</b>" in html
    one = dev._repr_html_()
    assert one.count("<svg") == 1 and "<script" not in one


def test_a_device_without_entries_has_figures_and_no_picture(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"segments": [], "device_traces": [[]]}')
    html = memlens.load(path)._repr_html_()
    assert "<svg" not in html and "trace entries" in html


def test_viewer_page_is_frameable_only_when_asked() -> None:
    from memlens.views.web.server import _page_headers

    default = _page_headers()
    assert default["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in default["Content-Security-Policy"]
    framed = _page_headers(("http://127.0.0.1:*", "vscode-webview:"))
    assert "X-Frame-Options" not in framed
    assert (
        "frame-ancestors http://127.0.0.1:* vscode-webview:;"
        in framed["Content-Security-Policy"] + ";"
    )
