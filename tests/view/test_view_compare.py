"""The viewer's compare page is analysis.diff (one site matching and one sort for `memlens
diff`, the report and the viewer), in the page's JSON shape: fields only added."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from browser_page import Page
from view_fixtures import serving, small_snapshot, stacked_snapshot

import memlens
from chromium import CHROMIUM
from memlens.analysis.diff import diff
from memlens.simulation.synthetic import generate_trace_dict
from memlens.views.web.data import ViewerData


def test_compare_is_analysis_diff():
    a = memlens.load(generate_trace_dict(events=3000, layers=4, seed=1))
    b = memlens.load(generate_trace_dict(events=3000, layers=6, hidden=320, seed=2))
    c = ViewerData([a, b], ["a", "b"]).compare([None, None], limit=5)
    ref = diff(a.device(0), b.device(0), top=5)
    assert ref["sites_total"] > 5  # the limit cuts: the order matters
    assert c["sites_total"] == ref["sites_total"]
    assert [s["site"] for s in c["sites"]] == [s["site"] for s in ref["sites"]]
    for got, want in zip(c["sites"], ref["sites"], strict=True):
        assert got == want
        assert got["change"] == got["b_bytes"] - got["a_bytes"]
    assert c["figures"] == ref["figures"]
    assert c["names"] == ["a", "b"]
    assert [p["peak_bytes"] for p in c["peaks"]] == [
        a.device(0).peak_active_bytes,
        b.device(0).peak_active_bytes,
    ]
    # the keys the page reads (static/js/compare.js) are all there
    assert set(c) == {"names", "peaks", "sites", "sites_total", "figures"}
    assert set(c["peaks"][0]) == {"device", "peak_bytes", "peak_event", "peak_reserved_bytes"}
    assert set(c["sites"][0]) >= {"site", "a_bytes", "b_bytes", "a_count", "b_count", "change"}


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_compare_shares_one_y_scale_with_a_toggle(browser):
    # A peaks at 410 bytes (reserved 1000), B at 780 (reserved 1000 too): same scale;
    # a B with twice the reserved memory shows the sharing
    a = memlens.load(small_snapshot())
    big = stacked_snapshot()
    big["device_traces"][0][0]["size"] = 2000
    b = memlens.load(big)
    with serving(ViewerData([a, b], ["small", "stacked"])) as url:
        pg = Page(browser, url)
        page = pg.page
        scales = "() => window.memlens.panes.map((p) => [p.view.ymin, p.view.ymax])"
        assert page.evaluate(scales) == [[0, 2000], [0, 2000]]  # the larger peak, both panes
        assert page.is_visible("#yscale-ctl")
        # the same 300-byte allocation is drawn equally tall in both: C of A / C of B
        pg.shot("compare_shared.png")
        before = [p for p in page.evaluate("() => window.memlens.panes.map((p) => p.reqCount)")]
        page.keyboard.press("y")
        page.wait_for_function(
            "(b) => window.memlens.panes.every((p, i) => p.reqCount > b[i] && !p.inflight)",
            arg=before,
        )
        assert page.evaluate(scales) == [[0, 1000], [0, 2000]]  # each fits its own
        assert page.is_checked("#yscale")
        pg.shot("compare_independent.png")
        page.click("#yscale")  # back to one scale
        page.wait_for_function(
            "() => window.memlens.panes.every((p) => p.view.ymax === 2000 && !p.inflight)"
        )
        assert not pg.errors


@contextmanager
def compare_page(
    browser: Any, make: Callable[[int], dict[str, Any]], scales: tuple[int, int], ready: str
) -> Iterator[Page]:
    """The page comparing make(scales[0]) (A) with make(scales[1]) (B), once `ready` is in."""
    a, b = (memlens.load(make(k)) for k in scales)
    with serving(ViewerData([a, b], ["a", "b"])) as url:
        pg = Page(browser, url)
        pg.page.wait_for_selector(ready)
        yield pg


def _same_function_snapshot(scale: int) -> dict[str, Any]:
    """Four sites of one long-named function in one long-named file, lines 22/57/78/79."""
    from snapshot_builders import ev

    name = "forward_of_a_transformer_block_with_a_long_name"
    path = "/home/someone/projects/assignment1/cs336_basics/transformer_blocks.py"
    trace = [ev("alloc", 0x1000 * (k + 1), scale * (k + 1) * 64, k,
                frames=[{"filename": path, "line": line, "name": name}])
             for k, line in enumerate((22, 57, 78, 79))]  # fmt: skip
    return {"segments": [], "device_traces": [trace]}


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_compare_rows_of_one_function_show_their_lines(browser):
    with compare_page(browser, _same_function_snapshot, (1, 3), "table.cmp td .ln") as pg:
        page = pg.page
        # per row: the location's text, and whether it lies wholly inside its cell
        rows = page.evaluate("""() => [...document.querySelectorAll('table.cmp td:first-child')]
          .map((td) => { const ln = td.querySelector('.ln'), nm = td.querySelector('.nm');
            const c = td.getBoundingClientRect(), r = ln.getBoundingClientRect();
            return [ln.textContent, r.right <= c.right + 0.5, nm.textContent]; })""")
        assert [r[0] for r in rows] == [f":{n})" for n in (79, 78, 57, 22)]
        assert all(r[1] for r in rows)  # every line number is on screen
        # the long name whole (wrapped), never cut
        assert {r[2] for r in rows} == {"forward_of_a_transformer_block_with_a_long_name"}
        assert not pg.errors


SOFTMAX = "softmax_over_the_last_dimension_with_numerical_stability"
NODES = ("MmBackward0", "BmmBackward0", "SoftmaxBackward0", "AddmmBackward0", "ViewBackward0")


def _long_names_snapshot(scale: int) -> dict[str, Any]:
    """A Python site with a long name in torch's and the user's `nn_utils.py`, and five
    allocations made in backward (C++ stacks only) by autograd nodes whose full names share
    their first 40 characters: `torch::autograd::generated::<Node>::apply`."""
    from snapshot_builders import ev

    engine = {"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function"}
    trace = [
        ev(
            "alloc",
            0x1000,
            scale * 4096,
            0,
            frames=[{"filename": "/home/u/proj/mylib/nn_utils.py", "line": 6, "name": SOFTMAX}],
        ),
        ev(
            "alloc",
            0x9000,
            scale * 512,
            1,
            frames=[{"filename": "/home/u/proj/other/nn_utils.py", "line": 9, "name": "f"}],
        ),
    ]
    trace += [ev("alloc", 0x10000 * (k + 2), scale * 64 * (k + 1), k + 2,
                 frames=[{"filename": "??", "line": 0,
                          "name": f"torch::autograd::generated::{n}::apply(std::vector<at::Tensor>&&)"},
                         engine])
              for k, n in enumerate(NODES)]  # fmt: skip
    return {"segments": [], "device_traces": [trace]}


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_compare_shows_whole_names_and_autograd_nodes_by_their_own(browser):
    with compare_page(browser, _long_names_snapshot, (1, 2), "table.cmp td .nm") as pg:
        page = pg.page
        rows = page.evaluate("""() => [...document.querySelectorAll('table.cmp td:first-child')]
          .map((td) => { const c = td.getBoundingClientRect();
            const inside = [...td.querySelectorAll('span')].every((s) => {
              const r = s.getBoundingClientRect(); return r.right <= c.right + 0.5; });
            return [td.querySelector('.lbl').textContent, td.title, inside]; })""")
        assert {r[0] for r in rows} == {
            f"{SOFTMAX}(mylib/nn_utils.py:6)",  # whole, and the folder that tells it apart
            "f(other/nn_utils.py:9)",
            *NODES,  # each node by its own name, not `torch::autograd:…`
        }
        assert all(r[2] for r in rows)  # nothing runs out of its cell: wrapped, not cut
        titles = {r[1] for r in rows}  # the whole site on hover
        assert "torch::autograd::generated::MmBackward0::apply" in titles
        assert f"{SOFTMAX} (/home/u/proj/mylib/nn_utils.py:6)" in titles
        pg.shot("compare_long_names.png")
        assert not pg.errors
