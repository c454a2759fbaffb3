"""The viewer's compare page is analysis.diff (one site matching and one sort for `memlens
diff`, the report and the viewer), in the page's JSON shape: fields only added."""

from __future__ import annotations

import memlens
from memlens.analysis.diff import diff
from memlens.simulation.synthetic import generate_trace_dict
from memlens.views.web.data import ViewerData


def test_compare_is_analysis_diff():
    a = memlens.load(generate_trace_dict(events=3000, layers=4, seed=1))
    b = memlens.load(generate_trace_dict(events=3000, layers=6, hidden=320, seed=2))
    c = ViewerData([a, b], ["a", "b"]).compare([None, None], limit=5)
    ref = diff(a.device(0), b.device(0), limit=5)
    assert ref["sites_total"] > 5  # the limit cuts: the order matters
    assert c["n_sites"] == ref["sites_total"]
    assert [s["site"] for s in c["sites"]] == [s["site"] for s in ref["sites"]]
    for got, want in zip(c["sites"], ref["sites"], strict=True):
        assert got == {**want, "diff": want["change"]}
        assert got["diff"] == got["b_bytes"] - got["a_bytes"]
    assert c["figures"] == ref["figures"]
    assert c["names"] == ["a", "b"]
    assert [p["peak_bytes"] for p in c["peaks"]] == [
        a.device(0).peak_active_bytes,
        b.device(0).peak_active_bytes,
    ]
    # the keys the page reads (static/js/compare.js) are all there
    assert set(c) >= {"names", "peaks", "sites", "n_sites"}
    assert set(c["peaks"][0]) == {"device", "peak_bytes", "peak_event", "peak_reserved_bytes"}
    assert set(c["sites"][0]) >= {"site", "a_bytes", "b_bytes", "a_count", "b_count", "diff"}
