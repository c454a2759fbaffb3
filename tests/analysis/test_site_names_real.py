"""The site-naming rule (snapshot.frames.first_user_frames) on the stacks of every shared
real snapshot, and the same names in every view: peak, summary, diff, the viewer's live
tree, the TUI. Skips cleanly when ../shared/snapshots is absent."""

from __future__ import annotations

import numpy as np
import pytest

import memlens
from memlens.analysis.diff import diff
from memlens.analysis.peak import peak
from memlens.analysis.sites import NO_PYTHON_LABEL, frame_label, user_frame_of_stacks
from memlens.analysis.summary import device_summary
from memlens.analysis.tree import stack_has_python
from memlens.snapshot.frames import ALLOCATOR_NAME, CPP, autograd_node_mask, short_cpp_name
from memlens.views.tui.trees import live_stack_tree
from memlens.views.web.data import ViewerData
from shared_data import real_snapshot_names

ACCUMULATE = "torch::autograd::AccumulateGrad::apply"


@pytest.mark.parametrize("name", real_snapshot_names() or ["(absent)"])
def test_backward_stacks_are_named_by_their_autograd_node(name, shared_snapshots_dir):
    snap = memlens.load(shared_snapshots_dir / name)
    site = user_frame_of_stacks(snap)
    node = autograd_node_mask(snap)
    has_py = stack_has_python(snap)
    kind = snap.frames.kind
    plumbing = {
        int(u)
        for u in np.unique(snap.frames.name)
        if ALLOCATOR_NAME.search(short_cpp_name(snap.strings[int(u)]))
    }
    named_by_node = 0
    for s in range(len(snap.stacks)):
        frames = snap.stacks.frames_of(s).tolist()
        if has_py[s]:
            assert kind[site[s]] != CPP or not any(kind[f] != CPP for f in frames), name
            continue
        nodes = [f for f in frames if node[f]]
        if nodes:  # innermost node, whatever dispatcher frames lie inside it
            assert site[s] == nodes[0], (name, s, frame_label(snap, int(site[s])))
            named_by_node += 1
        elif any(kind[f] == CPP and int(snap.frames.name[f]) not in plumbing for f in frames):
            # never the allocator / factory / dispatcher plumbing when anything else is there
            assert int(snap.frames.name[site[s]]) not in plumbing, frame_label(snap, int(site[s]))
    has_backward = bool(node.any())
    assert (named_by_node > 0) == has_backward, name


@pytest.fixture(scope="module")
def training(shared_snapshots_dir):
    path = shared_snapshots_dir / "wedson_medium_128_training.pickle"
    if not path.exists():
        pytest.skip("wedson_medium_128_training.pickle is absent")
    return memlens.load(path)


# at the peak of wedson_medium_128_training: 169 gradients written by AccumulateGrad
GRAD_BYTES, GRAD_COUNT = 1_651_572_736, 169


def test_gradients_at_the_peak_are_named_by_accumulate_grad_in_every_view(training):
    dev = training.device(0)
    p = peak(dev)
    sites = {s["site"]: (s["bytes"], s["count"]) for s in p["by_site"]}
    assert sites[ACCUMULATE] == (GRAD_BYTES, GRAD_COUNT)
    assert not any("wrapper_CUDA" in s for s in sites)
    # the tree (Python frames only): under the C++ / backward group, by the same name
    assert p["tree"] is not None
    (group,) = [c for c in p["tree"]["children"] if c["label"] == NO_PYTHON_LABEL]
    kids = {c["label"]: (c["bytes"], c["count"]) for c in group["children"]}
    assert kids[ACCUMULATE] == (GRAD_BYTES, GRAD_COUNT)
    # summary (its top sites are at the peak too) and diff (sites at both peaks)
    summary_sites = {s["site"]: s["bytes"] for s in device_summary(dev, top=20)["top_sites"]}
    assert summary_sites[ACCUMULATE] == GRAD_BYTES
    changes = {s["site"]: s for s in diff(dev, dev, top=None)["sites"]}
    assert changes[ACCUMULATE]["a_bytes"] == changes[ACCUMULATE]["b_bytes"] == GRAD_BYTES
    # the viewer's live tree at the peak, Python frames only
    tree = ViewerData([training], ["t"]).live(0, 0, dev.peak_event_index)["tree"]
    (group,) = [c for c in tree["children"] if c["label"] == NO_PYTHON_LABEL]
    kids = {c["label"]: (c["bytes"], c["count"]) for c in group["children"]}
    assert kids[ACCUMULATE] == (GRAD_BYTES, GRAD_COUNT)
    # the TUI's live tree (user frames)
    tui = live_stack_tree(dev, dev.peak_event_index, hide_internals=True)
    (node,) = [c for c in tui.children if c.label == NO_PYTHON_LABEL]
    kids = {c.label: (c.value, c.count) for c in node.children}
    assert kids[ACCUMULATE] == (GRAD_BYTES, GRAD_COUNT)
