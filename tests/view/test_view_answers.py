"""The viewer API's contract: each endpoint's answer has exactly the keys its type in
views/web/answers.py declares, and static/js/types.js (what `tsc --checkJs` checks the
page's reads against) declares the same keys for the same objects."""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest
from starlette.testclient import TestClient
from view_fixtures import small_snapshot

import memlens
from memlens.analysis import results
from memlens.simulation.synthetic import generate_trace_dict
from memlens.views.web import answers
from memlens.views.web.data import ViewerData
from memlens.views.web.server import STATIC, create_app

TYPEDEF = re.compile(r"@typedef \{object\} (\w+)((?:\s*\*\s*@property \{[^}]*\} \S+.*)*)")
PROPERTY = re.compile(r"@property \{[^}]*\} (\[?)(\w+)\]?")
# the page reads a part of `memlens summary`'s figures: these may be a subset
SUBSET = {"DeviceSummary"}


def js_typedefs() -> dict[str, tuple[set[str], set[str]]]:
    """types.js: typedef name -> (required keys, optional keys)."""
    text = (STATIC / "js" / "types.js").read_text()
    out = {}
    for name, body in TYPEDEF.findall(text):
        props = PROPERTY.findall(body)
        out[name] = ({k for opt, k in props if not opt}, {k for opt, k in props if opt})
    return out


def python_type(name: str) -> typing.Any:
    return getattr(answers, name, None) or getattr(results, name)


def test_types_js_declares_what_answers_py_declares():
    js = js_typedefs()
    assert {"MetaAnswer", "ChartAnswer", "AllocationAnswer", "LiveAnswer", "StateAnswer",
            "AnnotationsAnswer", "CompareAnswer", "ErrorAnswer", "DeviceSummary"} <= set(js)  # fmt: skip
    for name, (required, optional) in js.items():
        py = python_type(name)
        if name in SUBSET:
            assert required | optional <= py.__required_keys__ | py.__optional_keys__, name
            continue
        assert (required, optional) == (set(py.__required_keys__), set(py.__optional_keys__)), name


def test_every_answer_type_has_its_typedef():
    declared = {
        name
        for name, t in vars(answers).items()
        if typing.is_typeddict(t) and t.__module__ == answers.__name__ and name[0] != "_"
    }
    assert declared - set(js_typedefs()) == set()


@pytest.fixture
def client() -> TestClient:
    a, b = memlens.load(small_snapshot()), memlens.load(small_snapshot())
    return TestClient(create_app(ViewerData([a, b], ["a", "b"])), base_url="http://127.0.0.1")


def keys_fit(answer: dict[str, Any], cls: typing.Any) -> None:
    assert cls.__required_keys__ <= set(answer) <= cls.__required_keys__ | cls.__optional_keys__


@pytest.mark.parametrize(
    ("url", "cls", "nested"),
    [
        ("/api/meta", "MetaAnswer", {}),
        ("/api/d/0/view?width=7&height=20&q=0x3000", "ChartAnswer",
         {"bands": "Bands", "small": "Small", "x": "XRange", "address_hits": "AddressHits"}),
        ("/api/d/0/view?width=7&height=20&t0=1000&t1=1060", "ChartAnswer", {"x": "XRange"}),
        ("/api/d/0/segments?width=7&height=20", "ChartAnswer", {"bands": "Bands"}),
        ("/api/d/0/alloc/2", "AllocationAnswer", {"alloc": "EventInfo"}),
        ("/api/d/0/live?event=3", "LiveAnswer", {}),
        ("/api/d/0/state?event=3", "StateAnswer", {}),
        ("/api/d/0/annotations", "AnnotationsAnswer", {}),
        ("/api/compare", "CompareAnswer", {}),
        ("/api/d/0/summary", "DeviceSummary", {}),
        ("/api/d/0/alloc/99", "ErrorAnswer", {}),
    ],
)  # fmt: skip
def test_each_answer_has_the_declared_keys(client, url, cls, nested):
    answer = client.get(url).json()
    keys_fit(answer, python_type(cls))
    for key, inner in nested.items():
        keys_fit(answer[key], python_type(inner))


def test_the_charts_say_which_they_are(client):
    view = client.get("/api/d/0/view?width=7&height=20").json()
    segs = client.get("/api/d/0/segments?width=7&height=20").json()
    assert (view["kind"], segs["kind"]) == ("allocations", "segments")
    # an allocation band carries its flags, a segment band its address; never both
    assert "flags" in view["bands"] and "address" not in view["bands"]
    assert "address" in segs["bands"] and "flags" not in segs["bands"]
    assert (view["groups"], view["group_keys"]) == (["train_step (/home/u/train.py:10)"], [0])


def test_a_segment_is_grouped_by_its_stream():
    snap = memlens.load(generate_trace_dict(events=600, seed=3))
    segs = ViewerData([snap]).segments(0, 0, width=50, height=200)
    # the group keys are indices into the snapshot's streams, the labels their handles
    assert list(snap.streams) == [0, 0x55D000001000]
    assert segs["groups"] == ["segment on stream 0x0", "segment on stream 0x55d000001000"]
    assert segs["group_keys"] == [0, 1] and set(segs["bands"]["group"]) == {0, 1}
