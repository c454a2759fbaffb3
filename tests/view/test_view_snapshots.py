"""The viewer's API on the real snapshots and on generated multi-device traces."""

from __future__ import annotations

import numpy as np
import pytest
from starlette.testclient import TestClient

import memlens
from memlens.simulation.synthetic import generate_snapshot
from memlens.views.web.data import ViewerData
from memlens.views.web.server import create_app

BASE = "http://127.0.0.1"


def test_real_snapshots_peak_and_stack_totals(shared_snapshots_dir, expected_figures):
    for name, exp in expected_figures.items():
        path = shared_snapshots_dir / name
        if not path.exists():
            continue
        snap = memlens.load(path, warn=False)
        c = TestClient(create_app(ViewerData([snap], [name])), base_url=BASE)
        (s,) = c.get("/api/meta").json()["snapshots"]
        d = next(x for x in s["devices"] if x["device"] == exp["device"])
        assert d["n_events"] == exp["trace_entries"]
        assert d["peak"]["peak_active_bytes"] == exp["peak_active_bytes"]
        assert d["peak"]["peak_event_index"] == exp["peak_event_index"]
        v = c.get(f"/api/d/{exp['device']}/view?width=600&height=400").json()
        # the tallest column is the peak, and the reserved line reaches the reserved peak
        assert max(v["active"]) == exp["peak_active_bytes"]
        assert max(v["reserved"]) == exp["peak_reserved_bytes"]
        small = v["small"]
        stack_top = np.add(small["offset"], small["bytes"])
        assert stack_top.tolist() == v["active"]
        # y zoom into the top tenth separates more allocations than the full height
        lo = int(exp["peak_active_bytes"] * 0.9)
        z = c.get(f"/api/d/{exp['device']}/view?width=600&height=400&ymin={lo}"
                  f"&ymax={exp['peak_reserved_bytes']}").json()  # fmt: skip
        assert len(z["bands"]["row"]) >= len(v["bands"]["row"])
        peak = exp["peak_event_index"]
        tree = c.get(f"/api/d/{exp['device']}/live?event={peak}").json()["tree"]
        assert tree["bytes"] == exp["peak_active_bytes"]


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "two.pickle"
    generate_snapshot(path, events=3000, devices=2)
    return memlens.load(path, cache=False, warn=False)


def test_every_device_is_listed_and_viewable(two_devices):
    c = TestClient(create_app(ViewerData([two_devices])), base_url=BASE)
    (s,) = c.get("/api/meta").json()["snapshots"]
    assert [d["device"] for d in s["devices"]] == [0, 1]
    for d in (0, 1):
        dev = two_devices.device(d)
        v = c.get(f"/api/d/{d}/view?width=50&height=100").json()
        assert max(v["active"]) == dev.peak_active_bytes
        assert c.get(f"/api/d/{d}/annotations").status_code == 200
        assert c.get(f"/api/d/{d}/summary").json()["device"] == d
