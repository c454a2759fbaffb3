"""The viewer's error statuses and its concurrency: a user's mistake (MemlensError) is a 400
with its message; anything else is a bug, a 500 with its traceback logged; and a handler's
work runs off the event loop, so two panes' requests are served side by side."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import cast

import httpx
import pytest
from starlette.testclient import TestClient
from view_fixtures import small_snapshot

import memlens
from memlens.analysis.results import DeviceSummary
from memlens.views.web.answers import AnnotationsAnswer, StateAnswer
from memlens.views.web.data import ViewerData
from memlens.views.web.server import create_app

BASE = "http://127.0.0.1"
WORK_S = 0.4  # one request's (blocking) work


class Buggy(ViewerData):
    """A viewer whose summary has a bug of the kind 400 used to hide, and whose state
    endpoint holds its thread for WORK_S seconds as numpy work on a large trace does."""

    def summary(self, s: int, device: int) -> DeviceSummary:
        none: dict[str, DeviceSummary] = {}
        return none["no such key"]

    def annotations(self, s: int, device: int) -> AnnotationsAnswer:
        none: list[AnnotationsAnswer] = []
        return none[s]

    def state(self, s: int, device: int, event: int) -> StateAnswer:
        time.sleep(WORK_S)
        # a partial answer: these tests time the requests and read no other key
        return cast(StateAnswer, {"event": event})


@pytest.fixture
def app():
    return create_app(Buggy([memlens.load(small_snapshot())], ["small"]))


@pytest.mark.parametrize(
    ("path", "name"), [("/api/d/0/summary", "KeyError"), ("/api/d/0/annotations", "IndexError")]
)
def test_a_bug_is_a_500_with_its_traceback_logged(app, caplog, path, name):
    with caplog.at_level(logging.ERROR, logger="memlens.view"):
        r = TestClient(app, base_url=BASE).get(path)
    assert r.status_code == 500
    assert r.json() == {"error": f"internal error ({name})"}
    (rec,) = caplog.records
    assert rec.getMessage() == f"internal error on {path}"
    assert rec.exc_info is not None and rec.exc_info[0].__name__ == name


def test_a_user_error_is_a_400_with_its_message(app):
    r = TestClient(app, base_url=BASE).get("/api/d/7/view")
    assert r.status_code == 400 and "device 7" in r.json()["error"]


def test_two_requests_are_served_side_by_side(app):
    async def both() -> float:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
            t = time.perf_counter()
            rs = await asyncio.gather(
                c.get("/api/d/0/state?event=1"), c.get("/api/d/0/state?event=2")
            )
            wall = time.perf_counter() - t
        assert [r.json() for r in rs] == [{"event": 1}, {"event": 2}]
        return wall

    # one after the other would take 2 * WORK_S; side by side about WORK_S
    assert asyncio.run(both()) < 1.5 * WORK_S
