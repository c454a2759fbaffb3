"""The page's files served from memory (views/web/assets.py, issue 37): every file under
static/ byte for byte with StaticFiles' content types, nothing else (404), GET and HEAD
only (405)."""

from __future__ import annotations

from mimetypes import guess_type
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from view_fixtures import small_snapshot

import memlens
from memlens.views.web.assets import PageFiles
from memlens.views.web.data import ViewerData
from memlens.views.web.page import inline_assets, served_index
from memlens.views.web.server import STATIC, create_app

ROOT = Path(str(STATIC))


@pytest.fixture
def client() -> TestClient:
    app = create_app(ViewerData([memlens.load(small_snapshot())]))
    return TestClient(app, base_url="http://127.0.0.1")


def test_every_file_byte_for_byte(client):
    files = sorted(p for p in ROOT.rglob("*") if p.is_file())
    assert len(files) > 10
    for p in files:
        r = client.get("/static/" + p.relative_to(ROOT).as_posix())
        assert r.status_code == 200 and r.content == p.read_bytes(), p
        # the type StaticFiles gave (mimetypes': text/javascript or application/javascript)
        assert r.headers["content-type"] == f"{guess_type(p.name)[0]}; charset=utf-8", p
        assert r.headers["x-content-type-options"] == "nosniff"
    # `/`: index.html with the modules as one script, the stylesheet and /api/meta written
    # in (page.py)
    page = client.get("/")
    meta = client.get("/api/meta").json()
    served = PageFiles(ROOT)
    inline = inline_assets(served.text("/bundle.js"), served.text("/app.css"))
    assert page.text == served_index((ROOT / "index.html").read_text(), meta, inline)
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in page.headers["content-security-policy"]


@pytest.mark.parametrize(
    "path", ["/static/nope.js", "/static/../server.py", "/static/%2e%2e/data.py", "/static/",
             "/static/js", "/static//app.css"],
)  # fmt: skip
def test_nothing_else(client, path):
    assert client.get(path).status_code == 404


def test_get_and_head_only(client):
    assert client.post("/static/app.css").status_code == 405
    head = client.head("/static/app.css")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len((ROOT / "app.css").read_bytes()))
