"""The page as `/` serves it (issue 37): static/index.html with its modules as one script
(bundle.py), that script and the stylesheet written in, and /api/meta's answer written
into it, so the page asks for nothing before its first viewport (the stylesheet and the
script were two more requests, 50-130 ms on a warm start, while the server's loading
thread had the GIL).

The script and the stylesheet are the package's own files, never anything from a
snapshot; the page's CSP allows them by their SHA-256 (`InlineAssets.csp`), not by
'unsafe-inline'. A file holding text that would end its element early (`</script`,
`</style`) or change the HTML parser's state inside it (`<!--`) is not written in: the
page then loads it by URL, as before.

The answer goes in a `<script type="application/json">` element, a data block the browser
never runs (the CSP's script-src is not involved). Inside a script element the HTML parser
ends it at `</script` and changes state at `<!--`: every `<`, `>` and `&` in the JSON is
written as a \\u escape, which JSON.parse reads back as the same character, so no snapshot
name, warning or other string from the snapshot can end the element or be read as markup.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from memlens.views.web.bundle import BundleError

# index.html's script block, replaced in the page `/` serves (static/index.html keeps it:
# opened as /static/index.html, the page fetches its modules and /api/meta itself)
SCRIPTS = re.compile(r"<!-- scripts -->\n.*?<!-- /scripts -->\n", re.S)
BUNDLE_URL = "/static/bundle.js"
STYLESHEET = '<link rel="stylesheet" href="/static/app.css">\n'
META_ID = "meta"  # the data block's id (main.js reads it)
# the preload of /api/meta, for when the answer cannot be written in (main.js then asks)
META_PRELOAD = '<link rel="preload" href="/api/meta" as="fetch" crossorigin="anonymous">\n'


def script_json(value: Any) -> str:
    """`value` as JSON (as the API encodes it) that is safe inside a script element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass(frozen=True)
class InlineAssets:
    """The script (the bundle) and the stylesheet as the page `/` writes them in; None
    where one cannot be (it is then loaded by URL)."""

    script: str | None
    style: str | None

    def csp(self, policy: str) -> str:
        """`policy` (script-src and style-src 'self') allowing these two by their hash."""
        if self.script is not None:
            policy = policy.replace("script-src 'self'", f"script-src 'self' {_hash(self.script)}")
        if self.style is not None:
            policy = policy.replace("style-src 'self'", f"style-src 'self' {_hash(self.style)}")
        return policy


def inline_assets(script: str, style: str) -> InlineAssets:
    """The bundle and the stylesheet, each where it can be written into its element."""
    return InlineAssets(
        script if _inlinable(script, "script") else None,
        style if _inlinable(style, "style") else None,
    )


def _inlinable(text: str, tag: str) -> bool:
    low = text.lower()
    return f"</{tag}" not in low and "<!--" not in low


def _hash(text: str) -> str:
    """CSP's hash-source of an element's text (the exact characters between its tags)."""
    digest = hashlib.sha256(text.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def served_index(template: str, meta: Any | None, inline: InlineAssets | None = None) -> str:
    """The page `/` serves: `template` (index.html) with its script block replaced by the
    bundle (written in where `inline` has it) and `meta` written in (None: a preload of
    /api/meta instead), its stylesheet written in where `inline` has it."""
    script = (
        f'<script type="module">{inline.script}</script>\n'
        if inline is not None and inline.script is not None
        else f'<script type="module" src="{BUNDLE_URL}"></script>\n'
    )
    block = (
        META_PRELOAD
        if meta is None
        else f'<script type="application/json" id="{META_ID}">{script_json(meta)}</script>\n'
    ) + script
    # (the stylesheet first: nothing written in afterwards is searched)
    if inline is not None and inline.style is not None and template.count(STYLESHEET) == 1:
        template = template.replace(STYLESHEET, f"<style>{inline.style}</style>\n")
    page, n = SCRIPTS.subn(lambda _: block, template, count=1)
    if n != 1:
        raise BundleError("index.html has no <!-- scripts --> block")
    return page
