"""Module plumbing (nn.Module's `_wrapped_call_impl`/`_call_impl`, the optimizer's
`wrapper`) is left out of every tree by default, by one definition
(analysis.tree.internal_frame_mask) that `memlens peak`, the report's icicle, the viewer and
the TUI share; `--show-internal` brings it back, `--hide` hides more; equal basenames are
shown with enough parent folders to tell them apart."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from click.testing import CliRunner

import memlens
from memlens.analysis.paths import unique_suffixes
from memlens.analysis.peak import peak
from memlens.cli.main import cli
from memlens.views.report.icicle import peak_trees
from memlens.views.tui.trees import live_stack_tree
from snapshot_builders import block, ev, segment

TORCH = "/usr/lib/python3.11/site-packages/torch"
USER_MAIN = {"filename": "/home/u/train.py", "line": 9, "name": "<module>"}
WRAPPED = {"filename": f"{TORCH}/nn/modules/module.py", "line": 1773, "name": "_wrapped_call_impl"}
CALL = {"filename": f"{TORCH}/nn/modules/module.py", "line": 1784, "name": "_call_impl"}
MODEL = {"filename": "/home/u/model.py", "line": 20, "name": "forward"}
LAYER = {"filename": "/home/u/layers.py", "line": 7, "name": "forward"}
TORCH_OPT = {"filename": f"{TORCH}/optim/optimizer.py", "line": 533, "name": "wrapper"}
USER_OPT = {"filename": "/home/u/mylib/optimizer.py", "line": 73, "name": "step"}

# innermost first, as PyTorch records them
FORWARD = [LAYER, CALL, WRAPPED, MODEL, CALL, WRAPPED, USER_MAIN]
STEP = [USER_OPT, TORCH_OPT, USER_MAIN]


def plumbing_snapshot() -> dict[str, Any]:
    """Two allocations live at the end: 1000 bytes in a layer's forward under two module
    calls, 24 in the user's optimizer step called through torch's optimizer wrapper."""
    S = 0x100000
    trace = [
        ev("segment_alloc", S, 2 << 20, 0),
        ev("alloc", S, 1000, 1, frames=FORWARD),
        ev("alloc", S + 1024, 24, 2, frames=STEP),
    ]
    blocks = [
        block(S, 1024, 1000, "active_allocated", FORWARD),
        block(S + 1024, 1024, 24, "active_allocated", STEP),
        block(S + 2048, (2 << 20) - 2048, (2 << 20) - 2048, "inactive"),
    ]
    return {"segments": [segment(S, blocks)], "device_traces": [trace]}


@pytest.fixture(scope="module")
def dev():
    return memlens.load(plumbing_snapshot()).device(0)


def labels(node: Any, depth: int = 0) -> list[str]:
    out = [("  " * (depth - 1)) + node["label"]] if depth else []
    for c in node["children"]:
        out += labels(c, depth + 1)
    return out


def test_peak_tree_hides_module_plumbing_by_default(dev):
    tree = peak(dev, tree_min_share=0)["tree"]
    assert labels(tree) == [
        "<module> (train.py:9)",
        "  forward (model.py:20)",
        "    forward (layers.py:7)",
        "  step (mylib/optimizer.py:73)",
    ]


def test_show_internal_brings_every_python_frame_back(dev):
    tree = peak(dev, tree_min_share=0, show_internal=True)["tree"]
    assert labels(tree) == [
        "<module> (train.py:9)",
        "  _wrapped_call_impl (module.py:1773)",
        "    _call_impl (module.py:1784)",
        "      forward (model.py:20)",
        "        _wrapped_call_impl (module.py:1773)",
        "          _call_impl (module.py:1784)",
        "            forward (layers.py:7)",
        "  wrapper (optim/optimizer.py:533)",
        "    step (mylib/optimizer.py:73)",
    ]


def test_hide_patterns_hide_tree_frames_too(dev):
    tree = peak(dev, tree_min_share=0, hide_patterns=[r"[/\\]torch[/\\]", r"model\.py$"])["tree"]
    assert labels(tree) == [
        "<module> (train.py:9)",
        "  forward (layers.py:7)",
        "  step (mylib/optimizer.py:73)",
    ]


def test_cli_peak_and_at_take_show_internal(tmp_path):
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(plumbing_snapshot(), protocol=4))
    for args in (["peak", str(p)], ["at", str(p), "--event", "2"]):
        text = CliRunner().invoke(cli, args, catch_exceptions=False).output
        assert "_call_impl" not in text and "forward (layers.py:7)" in text, text
        shown = CliRunner().invoke(cli, [*args, "--show-internal"], catch_exceptions=False)
        assert "_call_impl (module.py:1784)" in shown.output, shown.output
    hidden = CliRunner().invoke(cli, ["peak", str(p), "--hide", r"layers\.py$", "--json"])
    tree = json.loads(hidden.output)["tree"]
    assert "  forward (layers.py:7)" not in labels(tree)


def test_report_icicle_python_view_has_no_plumbing(dev):
    trees = peak_trees(dev)
    text = json.dumps(trees["python"])
    assert "_call_impl" not in text and "forward (layers.py:7)" in text
    assert "_call_impl" in json.dumps(trees["all"])


def test_tui_user_frames_view_uses_the_same_definition(dev):
    root = live_stack_tree(dev, dev.n_events - 1, hide_internals=True)
    names = [n.label for n in root.walk()]
    assert "_call_impl (module.py:1784)" not in names
    assert "step (mylib/optimizer.py:73)" in names


def test_unique_suffixes_tell_equal_basenames_apart():
    assert unique_suffixes(
        [f"{TORCH}/optim/optimizer.py", "/home/u/mylib/optimizer.py", "/home/u/model.py"]
    ) == {
        f"{TORCH}/optim/optimizer.py": "optim/optimizer.py",
        "/home/u/mylib/optimizer.py": "mylib/optimizer.py",
        "/home/u/model.py": "model.py",
    }
    # a shared parent folder is not enough: go up until they differ
    assert unique_suffixes(["/a/x/utils/io.py", "/b/y/utils/io.py", "io.py"]) == {
        "/a/x/utils/io.py": "x/utils/io.py",
        "/b/y/utils/io.py": "y/utils/io.py",
        "io.py": "io.py",
    }
