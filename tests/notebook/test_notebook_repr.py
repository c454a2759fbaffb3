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


def test_an_oom_snapshot_says_so_first() -> None:
    from snapshot_builders import MiB, block, ev, segment

    trace = [
        ev("segment_alloc", 0x100000, 2 * MiB, 0),
        ev("alloc", 0x100000, MiB, 1),
        {"action": "oom", "device_free": 3 * MiB, "size": 4 * MiB, "stream": 0,
         "time_us": 1002},
    ]  # fmt: skip
    blocks = [block(0x100000, MiB, MiB, "active_allocated"),
              block(0x200000, MiB, MiB, "inactive")]  # fmt: skip
    snap = memlens.load({"segments": [segment(0x100000, blocks)], "device_traces": [trace]})
    html = snap._repr_html_()
    text = ("out of memory at event 2: asked for 4.00 MiB with 3.00 MiB free on the device; "
            "memlens oom explains it")  # fmt: skip
    assert text in html
    assert html.index(text) < html.index("peak active")  # before the figures
    assert (
        "out of memory"
        not in memlens.load({"segments": [], "device_traces": [trace[:2]]})._repr_html_()
    )


def test_no_ipv6_literal_in_the_frame_ancestors() -> None:
    # CSP host-sources have no IP-literal form: Chromium rejects "http://[::1]:*" (and
    # logs it) while the other sources still apply
    from memlens.notebook.viewer import FRAME_ANCESTORS

    assert not [s for s in FRAME_ANCESTORS if "[" in s]
    assert "http://localhost:*" in FRAME_ANCESTORS and "http://127.0.0.1:*" in FRAME_ANCESTORS


def test_the_magic_names_its_file_by_the_cells_in_number() -> None:
    from types import SimpleNamespace

    pytest.importorskip("IPython")
    from memlens.notebook.magics import cell_number

    # IPython that counts up before the code runs: execution_count is already N + 1
    early = SimpleNamespace(execution_count=8,
                            displayhook=SimpleNamespace(exec_result=SimpleNamespace(
                                execution_count=7)))  # fmt: skip
    assert cell_number(early) == 7
    # older IPython, or no result to read: execution_count is N
    assert cell_number(SimpleNamespace(execution_count=7, displayhook=None)) == 7


def test_repr_is_one_line_of_headline_figures() -> None:
    """repr() (a console, a notebook's text/plain) is one line: the dataclass repr printed
    every column. docs/concepts.md's worked example: 10 events, peak 1,510 B, one 2 MiB
    segment."""
    from snapshot_builders import hand_snapshot

    snap = memlens.load(hand_snapshot())
    head = "device 0: 10 events, peak active 1.47 KiB, peak reserved 2.00 MiB"
    assert repr(snap.device()) == f"<memlens DeviceTrace {head}>"
    assert repr(snap) == f"<memlens Snapshot '<in-memory snapshot>': {head}>"


def test_repr_names_the_oom_and_the_other_devices(snap: memlens.Snapshot) -> None:
    from snapshot_builders import hand_snapshot

    raw = hand_snapshot()
    trace = raw["device_traces"][0]
    trace.append(
        {
            "action": "oom",
            "addr": 0,
            "size": 1 << 30,
            "stream": 0,
            "frames": [],
            "device_free": 0,
            "time_us": trace[-1]["time_us"] + 1,
        }
    )
    one = memlens.load(raw)
    assert repr(one.device()).endswith("peak reserved 2.00 MiB, 1 OOM>")
    assert repr(snap).endswith("(+1 device)>") and "\n" not in repr(snap)
