"""The viewer's HTTP API on hand-built snapshots: exact figures, errors, headers."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient
from view_fixtures import EVIL, small_snapshot

import memlens
from memlens.analysis.stages import stage_intervals
from memlens.views.web.data import ViewerData
from memlens.views.web.server import STATIC, create_app

BASE = "http://127.0.0.1"


@pytest.fixture
def client() -> TestClient:
    return TestClient(
        create_app(ViewerData([memlens.load(small_snapshot())], ["small"])), base_url=BASE
    )


@pytest.fixture
def pair() -> TestClient:
    a = small_snapshot()
    b = small_snapshot()
    b["device_traces"][0][3]["size"] = 500  # C grows by 200 bytes
    snaps = [memlens.load(a), memlens.load(b)]
    return TestClient(create_app(ViewerData(snaps, ["a", "b"])), base_url=BASE)


def test_meta(client):
    m = client.get("/api/meta").json()
    (s,) = m["snapshots"]
    assert s["name"] == "small" and s["default_device"] == 0
    (d,) = s["devices"]
    assert d["n_events"] == 7 and d["n_allocations"] == 4
    assert d["time_range"] == [1000, 1060]
    assert d["peak"] == {"peak_event_index": 3, "peak_time_us": 1030, "peak_active_bytes": 410,
                         "peak_reserved_bytes": 1000}  # fmt: skip
    summ = client.get("/api/d/0/summary").json()
    assert summ["peak_active_bytes"] == 410 and summ["allocations"] == 4
    assert summ["top_sites"][0]["site"] == "train_step (/home/u/train.py:10)"


def test_view_geometry(client):
    # min_px=1: only allocations a pixel tall are bands (50 bytes a pixel: B, 10, is not)
    v = client.get("/api/d/0/view?e0=0&e1=7&width=7&height=20&min_px=1").json()
    assert v["x"] == {"mode": "event", "e0": 0.0, "e1": 7.0}
    assert v["bounds"] == list(range(8))
    assert v["active"] == [0, 100, 110, 410, 400, 300, 350]
    assert v["reserved"] == [1000] * 7
    assert v["ymax"] == 1000 and v["bytes_per_px"] == 50
    b = v["bands"]
    assert b["row"] == [0, 2, 3] and b["size"] == [100, 300, 50]
    assert b["c0"] == [1, 3, 6] and b["c1"] == [5, 7, 7]
    assert b["run_start"] == [0, 1, 3, 4]
    assert b["run_col"] == [1, 3, 5, 6] and b["run_off"] == [0, 100, 0, 300]
    assert v["kind"] == "allocations"
    assert v["groups"] == ["train_step (/home/u/train.py:10)"]
    assert b["group"] == [0, 0, 0]
    assert v["small"] == {"offset": [0, 100, 100, 400, 400, 300, 350],
                          "bytes": [0, 0, 10, 10, 0, 0, 0], "count": [0, 0, 1, 1, 0, 0, 0],
                          "max_size": 49, "min_size": 50, "cut_count": [0] * 7,
                          "cut_bytes": [0] * 7}  # fmt: skip
    assert v["times"] == [1000, 1010, 1020, 1030, 1040, 1050, 1060, 1060]


def test_view_time_axis_and_overview(client):
    v = client.get("/api/d/0/view?t0=990&t1=1060&width=7&height=100&detail=0").json()
    assert v["x"]["mode"] == "time"
    assert v["sample"] == [-1, 0, 1, 2, 3, 4, 5]
    assert v["bands"]["row"] == []  # detail=0: the curves only (the overview strip)
    assert v["small"]["bytes"] == v["active"]


def test_view_defaults_to_everything_and_clamps_size(client):
    v = client.get("/api/d/0/view?width=100000&height=0").json()
    assert v["width"] == 8192 and v["height"] == 1
    assert v["bounds"][0] == 0 and v["bounds"][-1] == 7


def test_view_y_zoom(client):
    v = client.get("/api/d/0/view?e0=0&e1=7&width=7&height=20&ymin=300&ymax=500").json()
    assert (v["ymin"], v["ymax"], v["bytes_per_px"]) == (300, 500, 10)
    assert v["bands"]["row"] == [0, 1, 2, 3]


def test_view_draws_sub_pixel_allocations_for_the_page(client):
    # the page's default: down to 1/16 of a pixel (50 / 16 bytes), so B (10 bytes, a fifth
    # of a pixel) is a thin band on A; nothing is left to the aggregate band
    v = client.get("/api/d/0/view?e0=0&e1=7&width=7&height=20").json()
    b = v["bands"]
    assert b["row"] == [0, 1, 2, 3] and b["size"] == [100, 10, 300, 50]
    assert b["c0"] == [1, 2, 3, 6] and b["c1"] == [5, 4, 7, 7]
    assert b["run_col"] == [1, 2, 3, 4, 5, 6] and b["run_off"] == [0, 100, 110, 100, 0, 300]
    assert v["small"] == {"offset": v["active"], "bytes": [0] * 7, "count": [0] * 7,
                          "max_size": 3, "min_size": 4, "cut_count": [0] * 7,
                          "cut_bytes": [0] * 7}  # fmt: skip
    # min_px=0.25 (12.5 bytes): B is aggregated again, bounded by 12 bytes
    v = client.get("/api/d/0/view?e0=0&e1=7&width=7&height=20&min_px=0.25").json()
    assert v["bands"]["row"] == [0, 2, 3]
    assert v["small"]["bytes"] == [0, 0, 10, 10, 0, 0, 0] and v["small"]["max_size"] == 12


@pytest.mark.parametrize(
    "query",
    [
        "min_px=0",
        "min_px=1.5",
        "min_px=-1",
        "e0=5&e1=5",
        "e0=x",
        "t0=1&t1=nan",
        "t0=5&t1=1",
        "width=abc",
        "ymin=10&ymax=5",
    ],
)
def test_view_bad_parameters_are_400(client, query):
    r = client.get(f"/api/d/0/view?{query}")
    assert r.status_code == 400 and r.json()["error"]


def test_unknown_device_and_row(client):
    r = client.get("/api/d/3/view")
    assert r.status_code == 400 and "device 3" in r.json()["error"]
    assert client.get("/api/d/0/alloc/99").status_code == 400
    assert client.get("/api/d/x/view").status_code == 400


def test_allocation_details(client):
    a = client.get("/api/d/0/alloc/2").json()
    assert a["size"] == 300 and a["address"] == "0x3000" and a["version"] == 0
    assert a["alloc"] == {"event": 3, "time_us": 1030}
    assert a["free"] is None and a["free_requested"] is None
    assert a["stream"] == "0x0" and a["pool"] is None
    assert a["compile_context"] == "Torch-Compiled Region: 0/0"
    assert a["user_metadata"] == "step=1"
    assert a["flags"] == ["live_at_end"]
    assert [f["kind"] for f in a["frames"]] == ["cpp", "python"]
    assert a["frames"][1] == {"filename": "/home/u/train.py", "line": 10, "name": "train_step",
                              "kind": "python"}  # fmt: skip
    freed = client.get("/api/d/0/alloc/0").json()
    assert freed["free"] == {"event": 5, "time_us": 1050}


def test_live_tree(client):
    t = client.get("/api/d/0/live?event=3").json()
    assert t["event"] == 3 and t["time_us"] == 1030
    assert t["active"] == 410 and t["reserved"] == 1000
    root = t["tree"]
    assert root["bytes"] == 410 and root["count"] == 3
    (child,) = root["children"]  # Python frames only: everything under train_step
    assert child["label"] == "train_step (train.py:10)" and child["bytes"] == 410
    full = client.get("/api/d/0/live?event=3&python_only=0").json()["tree"]
    assert full["bytes"] == 410
    before = client.get("/api/d/0/live?event=-1").json()
    assert before["tree"]["bytes"] == 0 and before["time_us"] is None


def test_annotations_matched_and_nested(client):
    a = client.get("/api/d/0/annotations").json()
    got = [(s["name"], s["t0"], s["t1"], s["depth"], s["e0"], s["e1"]) for s in a["spans"]]
    assert got == [
        ("orphan", 1000, 1050, 0, 0, 6),  # END without START: from the trace start
        ("fwd", 1005, 1035, 1, 1, 4),
        ("inner", 1010, 1020, 2, 2, 3),  # event 1 is stamped 1010, with the START: before it
        ("open", 1055, 1060, 0, 6, 7),  # START without END: to the trace end
    ]
    # the same events as `memlens stages` counts inside each stage
    stages = stage_intervals(memlens.load(small_snapshot()).device(0))
    by_name = {s["name"]: (s["first_event"], s["last_event"] + 1) for s in stages}
    assert {name: (e0, e1) for name, *_, e0, e1 in got} == by_name


def test_compare(pair, client):
    c = pair.get("/api/compare").json()
    assert c["names"] == ["a", "b"]
    assert [p["peak_bytes"] for p in c["peaks"]] == [410, 610]
    (site,) = c["sites"]
    assert site["site"] == "train_step (/home/u/train.py:10)"
    assert (site["a_bytes"], site["b_bytes"], site["change"]) == (410, 610, 200)
    assert pair.get("/api/d/0/view?snap=1&width=7&height=20").json()["active"][3] == 610
    assert client.get("/api/compare").status_code == 400


def test_page_headers_and_assets(client):
    r = client.get("/")
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    assert client.get("/static/app.css").status_code == 200
    assert "http" not in (STATIC / "index.html").read_text().replace("http-equiv", "")


def _js_modules() -> list[str]:
    """The page's ES modules, as paths under /static (js/main.js, js/pane/pane.js, ...)."""
    root = STATIC / "js"
    out, todo = [], [("js", root)]
    while todo:
        prefix, d = todo.pop()
        for f in d.iterdir():
            if f.is_dir():
                todo.append((f"{prefix}/{f.name}", f))
            elif f.name.endswith(".js"):
                out.append(f"{prefix}/{f.name}")
    return sorted(out)


def test_page_loads_its_modules_with_a_javascript_type(client):
    # a module script is refused unless it is served with a JavaScript MIME type; `/`
    # has them as one, written in (views/web/bundle.py, page.py), /static/index.html loads
    # them one by one; the bundle is served too (for a page that cannot write it in)
    assert '<script type="module">' in client.get("/").text
    assert (
        '<script type="module" src="/static/js/main.js"></script>'
        in client.get("/static/index.html").text
    )
    bundled = client.get("/static/bundle.js")
    assert bundled.headers["content-type"].split(";")[0] == "text/javascript"
    modules = _js_modules()
    assert "js/main.js" in modules and "js/pane/pane.js" in modules
    for name in modules:
        r = client.get(f"/static/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"].split(";")[0] in (
            "text/javascript",
            "application/javascript",
        )
        assert r.headers["x-content-type-options"] == "nosniff"
        # only relative imports of other modules of the page: nothing from another origin
        for line in r.text.splitlines():
            if line.startswith("import "):
                relative = ' from "./' in line or ' from "../' in line
                assert relative and line.endswith('.js";'), line


def test_foreign_host_header_is_refused(client):
    # a DNS-rebinding page would send its own host name
    assert client.get("/api/meta", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/api/meta", headers={"host": "localhost:8000"}).status_code == 200


def test_hostile_strings_stay_json_data():
    c = TestClient(create_app(ViewerData([memlens.load(small_snapshot(evil=True))])), base_url=BASE)
    a = c.get("/api/d/0/alloc/2")
    assert a.headers["content-type"].startswith("application/json")
    body = a.json()
    assert body["frames"][0]["name"] == EVIL and body["user_metadata"] == EVIL
    assert any(s["name"] == EVIL for s in c.get("/api/d/0/annotations").json()["spans"])
    sites = c.get("/api/d/0/view?width=7&height=100").json()["groups"]
    assert any(EVIL in s for s in sites)


def test_page_never_builds_html_from_data():
    for name in _js_modules():
        js = (STATIC / name).read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in js, (name, sink)


def test_snapshot_without_trace_events_shows_its_final_state():
    # only the final segments: one live block (a "ghost"), no trace entries
    blk = {"address": 0x1000, "size": 1024, "requested_size": 1000, "state": "active_allocated",
           "frames": [{"filename": "/home/u/train.py", "line": 3, "name": "setup"}]}  # fmt: skip
    free = {
        "address": 0x1400,
        "size": 1024,
        "requested_size": 1024,
        "state": "inactive",
        "frames": [],
    }
    seg = {"device": 0, "address": 0x1000, "total_size": 2048, "allocated_size": 1024,
           "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": [blk, free]}  # fmt: skip
    snap = memlens.load({"segments": [seg], "device_traces": [[]]})
    c = TestClient(create_app(ViewerData([snap])), base_url=BASE)
    v = c.get("/api/d/0/view?width=5&height=10").json()
    assert v["sample"] == [-1] * 5 and v["active"] == [1000] * 5 and v["reserved"] == [2048] * 5
    assert v["bands"]["row"] == [0] and (v["bands"]["c0"], v["bands"]["c1"]) == ([0], [5])
    a = c.get("/api/d/0/alloc/0").json()
    assert a["flags"] == ["preexisting", "ghost", "live_at_end"] and a["pool"] == [0, 0]


def test_meta_marks_each_oom():
    """An OOM snapshot opens on what it is about: every `oom` entry, as `memlens oom` has it."""
    from memlens.analysis.oom import oom_report
    from memlens.simulation.synthetic import generate_snapshot

    snap = memlens.load(generate_snapshot(None, events=3000, oom=True), cache=False)
    data = ViewerData([snap], ["oom"])
    (dev_meta,) = data.meta()["snapshots"][0]["devices"]
    want = oom_report(snap.device(0))["ooms"]
    assert len(want) >= 1
    assert dev_meta["ooms"] == [
        {k: o[k] for k in ("event", "time_us", "requested_bytes", "device_free_bytes")}
        for o in want
    ]
    # a trace without one has an empty list
    plain = ViewerData([memlens.load(small_snapshot())], ["small"]).meta()
    assert plain["snapshots"][0]["devices"][0]["ooms"] == []
