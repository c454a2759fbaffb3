"""The page as `/` serves it (issue 37): static/index.html with its modules as one script
(bundle.py) and /api/meta's answer written into it, so the page asks for neither before
it can ask for its first viewport.

The answer goes in a `<script type="application/json">` element, a data block the browser
never runs (the CSP's script-src is not involved). Inside a script element the HTML parser
ends it at `</script` and changes state at `<!--`: every `<`, `>` and `&` in the JSON is
written as a \\u escape, which JSON.parse reads back as the same character, so no snapshot
name, warning or other string from the snapshot can end the element or be read as markup.
"""

from __future__ import annotations

import json
import re
from typing import Any

from memlens.views.web.bundle import BundleError

# index.html's script block, replaced in the page `/` serves (static/index.html keeps it:
# opened as /static/index.html, the page fetches its modules and /api/meta itself)
SCRIPTS = re.compile(r"<!-- scripts -->\n.*?<!-- /scripts -->\n", re.S)
BUNDLE_URL = "/static/bundle.js"
META_ID = "meta"  # the data block's id (main.js reads it)
# the preload of /api/meta, for when the answer cannot be written in (main.js then asks)
META_PRELOAD = '<link rel="preload" href="/api/meta" as="fetch" crossorigin="anonymous">\n'


def script_json(value: Any) -> str:
    """`value` as JSON (as the API encodes it) that is safe inside a script element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def served_index(template: str, meta: Any | None) -> str:
    """The page `/` serves: `template` (index.html) with its script block replaced by the
    bundle and `meta` written in (None: a preload of /api/meta instead)."""
    block = (
        META_PRELOAD
        if meta is None
        else f'<script type="application/json" id="{META_ID}">{script_json(meta)}</script>\n'
    ) + f'<script type="module" src="{BUNDLE_URL}"></script>\n'
    page, n = SCRIPTS.subn(lambda _: block, template, count=1)
    if n != 1:
        raise BundleError("index.html has no <!-- scripts --> block")
    return page
