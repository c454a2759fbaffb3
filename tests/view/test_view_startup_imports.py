"""What `memlens view` imports on its way to the first paint (issue 37: every import is
start-up time before the page can draw): none of the heavy optional packages, nor the
browser launcher with --no-browser, nor the analyses only the page's later requests use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("uvicorn")

# the view command up to serving, then the page's first two requests, in process
SCRIPT = """
import json, sys
import uvicorn
from memlens.cli.main import main

def serve(self, sockets=None):
    data = self.config.app.state.loading.wait()  # loaded beside the server
    snap = data.snapshots[0]
    data.meta()
    data.view(0, snap.default_device, width=1300, height=420)
    print(json.dumps(sorted(sys.modules)))
    raise SystemExit(0)

uvicorn.Server.run = serve
main(["view", sys.argv[1], "--no-browser", "--port", "0"])
"""
HEAVY = ["pandas", "pyarrow", "rich", "matplotlib", "torch", "scipy", "textual", "jinja2",
         "webbrowser"]  # fmt: skip
LATER = ["memlens.analysis.summary", "memlens.analysis.diff", "memlens.analysis.tree",
         "memlens.analysis.stages", "memlens.views.layout.segments"]  # fmt: skip


def test_first_paint_imports_nothing_it_does_not_use(hand_file):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(hand_file)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "memlens.views.web.server" in loaded  # it did get that far
    assert not [m for m in HEAVY if m in loaded]
    assert not [m for m in LATER if m in loaded]
