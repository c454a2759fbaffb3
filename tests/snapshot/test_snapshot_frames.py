"""Frame classification and the first user frame."""

from __future__ import annotations

import memlens
from memlens.analysis.sites import frame_label, top_sites
from memlens.snapshot.frames import CPP, NOISE, PYTHON, classify_frame, short_cpp_name
from snapshot_builders import ev

UNWIND = {"filename": "??", "line": 0, "name": "torch::unwind::unwind()"}
ALLOC = {
    "filename": "CUDACachingAllocator.cpp",
    "line": 0,
    "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
}
NODE = {
    "filename": "??",
    "line": 0,
    "name": "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
}
EVAL = {"filename": "ceval.c", "line": 0, "name": "_PyEval_EvalFrameDefault"}
TORCH_PY = {
    "filename": "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",
    "line": 125,
    "name": "forward",
}
STDLIB = {"filename": "/usr/lib/python3.11/contextlib.py", "line": 81, "name": "inner"}
USER = {"filename": "/home/me/model.py", "line": 42, "name": "block"}


def test_classify():
    assert classify_frame("model.py", "f") == PYTHON
    assert classify_frame("<frozen runpy>", "_run_code") == PYTHON
    assert classify_frame("??", "torch::unwind::unwind()") == NOISE
    assert classify_frame("ceval.c", "_PyEval_EvalFrameDefault") == NOISE
    assert classify_frame("Blas.cpp", "at::native::bmm") == CPP


def test_short_cpp_name():
    assert short_cpp_name(NODE["name"]) == "torch::autograd::generated::MmBackward0::apply"
    assert short_cpp_name("void at::f<int(long)>(int)") == "void at::f<int(long)>"
    assert (
        short_cpp_name("torch::cuda::(anonymous namespace)::gather_with_cpp()")
        == "torch::cuda::(anonymous namespace)::gather_with_cpp"
    )


def _snap(*stacks):
    trace = [
        ev("alloc", 0x100 * (k + 1), 100 * (k + 1), frames=list(s)) for k, s in enumerate(stacks)
    ]
    return memlens.load({"segments": [], "device_traces": [trace]})


def test_first_user_frame_tiers_and_hide_patterns():
    snap = _snap(
        [UNWIND, ALLOC, EVAL, TORCH_PY, STDLIB, USER],  # user code wins over torch and stdlib
        [UNWIND, ALLOC, NODE],  # backward: the autograd node names the op
        [UNWIND, ALLOC, TORCH_PY],  # only torch internals: fall back to them
        [UNWIND, ALLOC],  # only allocator plumbing
        [],
    )
    d = snap.device(0)
    rows = d.live_at(d.n_events - 1)
    sites = {s["bytes"]: s["site"] for s in top_sites(d, rows, limit=None)}
    assert sites[100] == "block (/home/me/model.py:42)"
    assert sites[200] == "torch::autograd::generated::MmBackward0::apply"
    assert (
        sites[300]
        == "forward (/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125)"
    )
    assert sites[400].startswith(
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc (CUDACachingAllocator.cpp)"
    )
    assert sites[500] == "<no stack recorded>"
    # hide nothing: the innermost Python frame wins, even torch's (rows 100 and 300 merge)
    shown = {s["site"]: s["bytes"] for s in top_sites(d, rows, limit=None, hide_patterns=[])}
    assert (
        shown["forward (/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125)"]
        == 400
    )
    # custom patterns that hide the user's file too: fall back to any Python frame
    custom = {
        s["site"]: s["bytes"]
        for s in top_sites(
            d, rows, limit=None, hide_patterns=["model\\.py$", "torch", "contextlib"]
        )
    }
    assert (
        custom["forward (/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125)"]
        == 400
    )
    assert frame_label(snap, -1) == "<no stack recorded>"


def test_top_sites_group_and_order():
    snap = _snap([USER], [USER], [TORCH_PY, USER], [NODE])
    d = snap.device(0)
    sites = top_sites(d, d.live_at(3), limit=2)
    assert [(s["site"], s["bytes"], s["count"]) for s in sites] == [
        ("block (/home/me/model.py:42)", 100 + 200 + 300, 3),
        ("torch::autograd::generated::MmBackward0::apply", 400, 1),
    ]
    assert sites[0]["filename"] == "/home/me/model.py" and sites[0]["line"] == 42
