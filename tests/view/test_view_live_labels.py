"""One labelling rule for allocations without a site frame, in every view: C++-only stacks
(autograd's backward threads) are "<no Python frames: C++ / backward>" with a child per
site, stackless ones "<no stack recorded>". The viewer's live tree gets the labels from
the server (analysis.tree), never from the page."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

import memlens
from memlens.analysis.peak import live_set
from memlens.analysis.results import TreeNode
from memlens.analysis.sites import NO_PYTHON_LABEL, NO_STACK_LABEL
from memlens.views.tui.trees import live_stack_tree, rows_under
from memlens.views.web.data import ViewerData
from memlens.views.web.server import create_app
from snapshot_builders import FRAME_USER, ev

ACC = {"filename": "??", "line": 0,
       "name": "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)"}  # fmt: skip
WRAPPER = {"filename": "RegisterCUDA_0.cpp", "line": 0,
           "name": "at::(anonymous namespace)::wrapper_CUDA__empty_strided(long)"}  # fmt: skip
ENGINE = {"filename": "??", "line": 0, "name": "torch::autograd::Engine::thread_main()"}


def _snapshot() -> memlens.Snapshot:
    trace = [
        ev("alloc", 0x1000, 100, 0, frames=[FRAME_USER]),  # user code
        ev("alloc", 0x2000, 200, 1, frames=[WRAPPER, ACC, ENGINE]),  # a gradient, backward
        ev("alloc", 0x3000, 400, 2, frames=[]),  # no stack recorded
    ]
    return memlens.load({"segments": [], "device_traces": [trace]})


EXPECTED = {
    "train_step (train.py:10)": (100, 1),
    NO_PYTHON_LABEL: (200, 1),
    NO_STACK_LABEL: (400, 1),
}


def _kids(node: TreeNode) -> dict[str, tuple[int, int]]:
    return {c["label"]: (c["bytes"], c["count"]) for c in node["children"]}


def test_viewer_live_tree_labels_come_from_the_server():
    client = TestClient(create_app(ViewerData([_snapshot()], ["s"])), base_url="http://127.0.0.1")
    tree = client.get("/api/d/0/live?event=2").json()["tree"]
    assert _kids(tree) == EXPECTED
    (group,) = [c for c in tree["children"] if c["label"] == NO_PYTHON_LABEL]
    assert _kids(group) == {"torch::autograd::AccumulateGrad::apply": (200, 1)}
    assert group["children"][0]["frame"]["kind"] == "cpp"
    # all frames: the C++ frames are levels of the tree, and only the stackless is unnamed
    full = client.get("/api/d/0/live?event=2&python_only=0").json()["tree"]
    assert NO_PYTHON_LABEL not in _kids(full)
    assert _kids(full)[NO_STACK_LABEL] == (400, 1)


def test_cli_tree_uses_the_same_labels():
    tree = live_set(_snapshot().device(0), 2)["tree"]
    assert tree is not None and _kids(tree) == EXPECTED


@pytest.mark.parametrize("hide", [True, False])
def test_tui_tree_uses_the_same_labels(hide):
    dev = _snapshot().device(0)
    root = live_stack_tree(dev, 2, hide_internals=hide)
    labels = {c.label: (c.value, c.count) for c in root.children}
    if hide:  # user frames: as the CLI and the viewer
        assert labels == EXPECTED
        (group,) = [c for c in root.children if c.label == NO_PYTHON_LABEL]
        (site,) = group.children
        assert site.label == "torch::autograd::AccumulateGrad::apply"
        # `a` on the group or its site lists exactly the gradient's allocation
        live = dev.live_at(2)
        assert rows_under(dev, live, group.path(), hide_internals=True).tolist() == [1]
        assert rows_under(dev, live, site.path(), hide_internals=True).tolist() == [1]
        (nostack,) = [c for c in root.children if c.label == NO_STACK_LABEL]
        assert rows_under(dev, live, nostack.path(), hide_internals=True).tolist() == [2]
    else:
        assert NO_PYTHON_LABEL not in labels and labels[NO_STACK_LABEL] == (400, 1)
