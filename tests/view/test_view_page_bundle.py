"""The page as `/` serves it (issue 37): its ES modules joined into one script
(views/web/bundle.py), that script, the stylesheet and /api/meta's answer written in
(views/web/page.py), the answer escaped so that nothing from a snapshot can end the
element or be read as markup, the script and the stylesheet allowed by their hash."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from browser_page import Page
from starlette.testclient import TestClient
from view_fixtures import EVIL, serving, small_snapshot

import memlens
from chromium import BROWSER_MARKS
from memlens.views.web.answers import MetaAnswer
from memlens.views.web.assets import PageFiles
from memlens.views.web.bundle import BundleError, bundle
from memlens.views.web.data import ViewerData
from memlens.views.web.page import BUNDLE_URL, inline_assets, script_json, served_index
from memlens.views.web.server import CSP, STATIC, create_app

BASE = "http://127.0.0.1"
# what a snapshot may hold that would end a script element or open markup in one
HOSTILE = '</script><script>alert(1)</script><!--<script>&amp;\u2028"'
DATA_BLOCK = re.compile(r'<script type="application/json" id="meta">(.*?)</script>', re.S)
FILES = PageFiles(Path(str(STATIC)))
# what the server writes into the page (the bundle and the stylesheet)
INLINE = inline_assets(FILES.text(BUNDLE_URL.removeprefix("/static")), FILES.text("/app.css"))

A = """// @ts-check
export const X = 1,
  Y = 2;
export function f(a) {
  return a + X;
}
export class K {}
"""
B = """import { f, X as Z } from "./a.js";
import {
  K,
} from "./a.js";
export async function g() {
  return f(Z) + new K();
}
"""
MAIN = """import { g } from "./lib/b.js";
g();
"""


def test_bundle_of_hand_made_modules_exactly():
    out = bundle({"js/main.js": MAIN, "js/lib/b.js": B, "js/lib/a.js": A}, "js/main.js")
    assert out == (
        "// memlens view: the page's modules (static/js/) in one script, made by the\n"
        "// server when it starts (memlens/views/web/bundle.py)\n"
        "// ---- js/lib/a.js\nconst __m0 = (() => {\n"
        "// @ts-check\nconst X = 1,\n  Y = 2;\nfunction f(a) {\n  return a + X;\n}\n"
        "class K {}\nreturn { K, X, f };\n})();\n"
        "// ---- js/lib/b.js\nconst __m1 = (() => {\n"
        "const { f, X: Z } = __m0;\nconst { K } = __m0;\n"
        "async function g() {\n  return f(Z) + new K();\n}\nreturn { g };\n})();\n"
        "// ---- js/main.js\nconst __m2 = (() => {\nconst { g } = __m1;\ng();\nreturn {  };\n})();\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        "export default function f() {}\n",
        "export let n = 1;\n",
        "export var n = 1;\n",
        "const f = 1;\nexport { f };\n",
        'export * from "./a.js";\n',
        'import a from "./a.js";\n',
        'import * as a from "./a.js";\n',
        'import "./a.js";\n',
        'import { f } from "https://example.com/a.js";\n',
        'import { f-g } from "./a.js";\n',
    ],
)
def test_forms_the_bundle_does_not_rewrite_are_refused(source):
    with pytest.raises(BundleError):
        bundle({"js/main.js": source, "js/a.js": A}, "js/main.js")


def test_cycles_and_missing_modules_are_refused():
    cycle = {
        "js/main.js": 'import { a } from "./a.js";\n',
        "js/a.js": MAIN.replace("lib/b", "main"),
    }
    with pytest.raises(BundleError, match="cycle"):
        bundle(cycle, "js/main.js")
    with pytest.raises(BundleError, match="not there"):
        bundle({"js/main.js": MAIN}, "js/main.js")
    with pytest.raises(BundleError, match="outside"):
        bundle({"js/main.js": 'import { a } from "../../a.js";\n'}, "js/main.js")


def test_the_real_modules_bundle_into_a_script_node_can_parse(tmp_path):
    root = Path(str(STATIC))
    modules = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.js")}
    out = bundle(modules, "js/main.js")
    # every module main.js needs, once, each after what it imports; types.js (JSDoc only) not
    order = re.findall(r"^// ---- (\S+)$", out, re.M)
    assert order[-1] == "js/main.js" and len(order) == len(set(order)) >= 15
    assert "js/types.js" not in order and "js/pane/pane.js" in order
    assert order.index("js/api.js") < order.index("js/pane/pane.js")
    assert not re.search(r"^(?:import|export)\b", out, re.M)
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = tmp_path / "bundle.mjs"
    script.write_text(out)
    subprocess.run([node, "--check", str(script)], check=True, capture_output=True, timeout=60)


def test_script_json_escapes_what_ends_a_script_element():
    text = script_json({"name": HOSTILE})
    assert not set("<>&") & set(text)
    assert json.loads(text) == {"name": HOSTILE}  # the same value read back
    assert text == (
        '{"name":"\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e'
        '\\u003c!--\\u003cscript\\u003e\\u0026amp;\\u2028\\""}'
    )


def hostile_client() -> TestClient:
    # a hostile file name and hostile frame names in the snapshot
    snap = memlens.load(small_snapshot(evil=True))
    return TestClient(create_app(ViewerData([snap], [HOSTILE + EVIL])), base_url=BASE)


def test_the_served_page_holds_the_meta_answer_and_nothing_else_from_the_snapshot():
    client = hostile_client()
    page = client.get("/").text
    meta = client.get("/api/meta").json()
    assert meta["snapshots"][0]["name"] == HOSTILE + EVIL
    (block,) = DATA_BLOCK.findall(page)
    assert json.loads(block) == meta
    template = (Path(str(STATIC)) / "index.html").read_text()
    # the element ends where the server ended it: no other script, markup or comment opened
    assert page.count("</script") == template.count("</script") - 1 + 2
    assert page.count("<script") == template.count("<script") - 1 + 2
    assert page.count("<!--") == template.count("<!--") - 2  # (the block's markers, gone)
    assert "alert" not in page.replace(block, "")
    assert f'<script type="module">{INLINE.script}</script>' in page
    assert "/static/" not in page and 'href="/api/meta"' not in page


def test_without_a_meta_answer_the_page_asks_for_it():
    data = ViewerData([memlens.load(small_snapshot())])

    def broken() -> MetaAnswer:
        raise RuntimeError("a bug")

    working = data.meta
    data.meta = broken  # type: ignore[method-assign]
    client = TestClient(create_app(data), base_url=BASE)
    page = client.get("/").text
    template = (Path(str(STATIC)) / "index.html").read_text()
    assert page == served_index(template, None, INLINE)
    assert '<link rel="preload" href="/api/meta" as="fetch" crossorigin="anonymous">' in page
    assert "application/json" not in page
    data.meta = working  # type: ignore[method-assign]
    assert client.get("/").text == served_index(template, working(), INLINE)  # (not kept)


def sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_allows_its_written_in_script_and_stylesheet_by_hash_only():
    client = TestClient(create_app(ViewerData([memlens.load(small_snapshot())])), base_url=BASE)
    r = client.get("/")
    (script,) = re.findall(r'<script type="module">(.*?)</script>', r.text, re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", r.text, re.S)
    assert script == FILES.text("/bundle.js") and style == FILES.text("/app.css")
    csp = r.headers["content-security-policy"]
    assert f"script-src 'self' {sha256_source(script)};" in csp
    assert f"style-src 'self' {sha256_source(style)};" in csp
    assert "unsafe-inline" not in csp
    # the files by URL still exist (the unbundled page, a file that cannot be written in)
    assert client.get(BUNDLE_URL).text == script


@pytest.mark.parametrize("ending", ["</script >", "</SCRIPT", "<!-- x"])
def test_a_script_or_stylesheet_that_could_end_its_element_is_loaded_by_url(ending):
    template = (Path(str(STATIC)) / "index.html").read_text()
    inline = inline_assets(
        f"const s = '{ending}';", ending.replace("script", "style").replace("SCRIPT", "STYLE")
    )
    assert inline.script is None and inline.style is None
    page = served_index(template, None, inline)
    assert '<script type="module" src="/static/bundle.js"></script>' in page
    assert '<link rel="stylesheet" href="/static/app.css">' in page
    assert inline.csp(CSP) == CSP  # nothing to allow


def test_a_template_without_its_scripts_block_is_refused():
    with pytest.raises(BundleError):
        served_index("<html><head></head></html>", {"snapshots": []})


@pytest.mark.browser
@BROWSER_MARKS[1]
def test_a_hostile_name_is_shown_as_text_from_the_written_meta(browser):
    snap = memlens.load(small_snapshot(evil=True))
    with serving(ViewerData([snap], [HOSTILE + EVIL])) as url:
        pg = Page(browser, url)
        assert pg.errors == [] and pg.dialogs == [] and pg.foreign == []
        # the header shows the name after its last "/" (the whole of it on hover)
        assert pg.page.inner_text("#title") == (HOSTILE + EVIL).rsplit("/", 1)[1]
        assert pg.page.get_attribute("#title", "title") == HOSTILE + EVIL
        assert pg.page.evaluate("() => document.querySelectorAll('script').length") == 2
        assert pg.page.evaluate("() => document.querySelectorAll('img').length") == 0
