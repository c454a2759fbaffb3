"""Frame classification and the first user frame."""

from __future__ import annotations

from typing import Any

import pytest

import memlens
from memlens import Snapshot
from memlens.analysis.sites import frame_label, top_sites
from memlens.snapshot.frames import (
    CPP,
    NOISE,
    PYTHON,
    autograd_node_mask,
    classify_frame,
    short_cpp_name,
)
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
    assert short_cpp_name(str(NODE["name"])) == "torch::autograd::generated::MmBackward0::apply"
    assert short_cpp_name("void at::f<int(long)>(int)") == "void at::f<int(long)>"
    assert (
        short_cpp_name("torch::cuda::(anonymous namespace)::gather_with_cpp()")
        == "torch::cuda::(anonymous namespace)::gather_with_cpp"
    )


def _snap(*stacks: list[dict[str, Any]]) -> Snapshot:
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
    sites = {s["bytes"]: s["site"] for s in top_sites(d, rows, top=None)}
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
    shown = {s["site"]: s["bytes"] for s in top_sites(d, rows, top=None, hide_patterns=[])}
    assert (
        shown["forward (/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125)"]
        == 400
    )
    # custom patterns that hide the user's file too: fall back to any Python frame
    custom = {
        s["site"]: s["bytes"]
        for s in top_sites(d, rows, top=None, hide_patterns=["model\\.py$", "torch", "contextlib"])
    }
    assert (
        custom["forward (/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:125)"]
        == 400
    )
    assert frame_label(snap, -1) == "<no stack recorded>"


def test_top_sites_group_and_order():
    snap = _snap([USER], [USER], [TORCH_PY, USER], [NODE])
    d = snap.device(0)
    sites = top_sites(d, d.live_at(3), top=2)
    assert [(s["site"], s["bytes"], s["count"]) for s in sites] == [
        ("block (/home/me/model.py:42)", 100 + 200 + 300, 3),
        ("torch::autograd::generated::MmBackward0::apply", 400, 1),
    ]
    assert sites[0]["filename"] == "/home/me/model.py" and sites[0]["line"] == 42


# Frames as PyTorch 2.x records them on autograd's backward thread (names shortened to the
# parts the rule reads; the real ones carry full parameter lists, as here).
def _cpp(name: str, filename: str = "??") -> dict[str, Any]:
    return {"filename": filename, "line": 0, "name": name}


WRAPPER = _cpp(
    "at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA__empty_strided("
    "c10::ArrayRef<c10::SymInt>, c10::ArrayRef<c10::SymInt>)",
    "RegisterCUDA_0.cpp",
)
EMPTY = _cpp("at::detail::empty_strided_cuda(c10::ArrayRef<long>, c10::ArrayRef<long>)")
OPS = _cpp("at::_ops::empty_strided::call(c10::ArrayRef<c10::SymInt>)")
VARTYPE = _cpp(
    "torch::autograd::VariableType::(anonymous namespace)::new_empty_strided(c10::DispatchKeySet)",
    "VariableType_2.cpp",
)
CLONE = _cpp("torch::autograd::utils::clone_obey_contract(at::Tensor const&, at::Tensor const&)")
ACC_IMPL = _cpp(
    "torch::autograd::(anonymous namespace)::AccumulateGrad_apply_impl(std::vector<at::Tensor>&&)",
    "accumulate_grad.cpp",
)
ACC = _cpp("torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)")
NODE_CALL = _cpp("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)")
EVALUATE = _cpp("torch::autograd::Engine::evaluate_function(std::shared_ptr<GraphTask>&)")
THREAD = _cpp("torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&)")
ENGINE_TAIL = [NODE_CALL, EVALUATE, THREAD, _cpp("__clone")]
COPY_IMPL = _cpp(
    "std::vector<at::Tensor> torch::autograd::CopySlices::apply_impl<torch::autograd::"
    "CopySlices::apply(std::vector<at::Tensor>&&)::{lambda(std::vector<at::Tensor>&&)#1}>"
    "(std::vector<at::Tensor>&&)"
)
COPY = _cpp("torch::autograd::CopySlices::apply(std::vector<at::Tensor>&&)")
REDUCE = _cpp("torch::autograd::InputMetadata::reduce_grad(at::Tensor&) const")
SUM_TO = _cpp("at::Tensor at::_sum_to<c10::SymInt>(at::Tensor, c10::ArrayRef<c10::SymInt>, bool)")
BINDING = _cpp(
    "_object* torch::autograd::TypeError_to_NotImplemented_<&torch::autograd::THPVariable_add>"
    "(_object*, _object*, _object*)"
)
FN_FORWARD = _cpp("at::Tensor torch::autograd::Function<MyFn>::apply<at::Tensor&>(at::Tensor&)")
MY_OP = _cpp("myext::fused_op(at::Tensor const&)", "fused.cpp")
OPTIM = {"filename": "/venv/lib/python3.11/site-packages/torch/optim/adamw.py", "line": 9,
         "name": "_multi_tensor_adamw"}  # fmt: skip

SITE_CASES = [
    # gradients: AccumulateGrad names them, not the dispatcher wrapper that allocated
    ([UNWIND, ALLOC, EMPTY, WRAPPER, OPS, VARTYPE, CLONE, ACC_IMPL, ACC, *ENGINE_TAIL],
     "torch::autograd::AccumulateGrad::apply"),
    # a generated node (and its helper frames) in the same position
    ([UNWIND, ALLOC, WRAPPER, NODE, *ENGINE_TAIL],
     "torch::autograd::generated::MmBackward0::apply"),
    # CopySlices: its apply_impl frame mentions `CopySlices::apply(` in a template
    # argument, but only the node's own frame is the node
    ([UNWIND, ALLOC, WRAPPER, COPY_IMPL, COPY, *ENGINE_TAIL], "torch::autograd::CopySlices::apply"),
    # engine work outside any node: the innermost engine frame, past op plumbing
    ([UNWIND, ALLOC, WRAPPER, OPS, VARTYPE, SUM_TO, REDUCE, EVALUATE, THREAD],
     "torch::autograd::InputMetadata::reduce_grad"),
    # a C++ extension's op with dispatcher frames inside it: the extension, not the wrapper
    ([UNWIND, ALLOC, EMPTY, WRAPPER, OPS, MY_OP], "myext::fused_op (fused.cpp)"),
    # only torch's own Python and its C++ bindings: the Python frame, never the binding
    ([UNWIND, ALLOC, WRAPPER, BINDING, EVAL, OPTIM],
     "_multi_tensor_adamw (/venv/lib/python3.11/site-packages/torch/optim/adamw.py:9)"),
    # a C++ custom function's forward entry is not a node: the user's frame wins anyway,
    # and without one the extension op inside it
    ([UNWIND, ALLOC, WRAPPER, MY_OP, FN_FORWARD, USER], "block (/home/me/model.py:42)"),
    ([UNWIND, ALLOC, WRAPPER, MY_OP, FN_FORWARD], "myext::fused_op (fused.cpp)"),
]  # fmt: skip


@pytest.mark.parametrize(("stack", "site"), SITE_CASES)
def test_site_is_the_innermost_meaningful_frame(stack, site):
    snap = _snap(stack)
    d = snap.device(0)
    (row,) = top_sites(d, d.live_at(0), top=None)
    assert row["site"] == site


def test_autograd_node_mask_reads_the_function_name_only():
    snap = _snap([ACC, COPY_IMPL, COPY, NODE, NODE_CALL, EVALUATE, FN_FORWARD, REDUCE, USER])
    names = [snap.strings[int(n)] for n in snap.frames.name]
    nodes = {short_cpp_name(n) for n, hit in zip(names, autograd_node_mask(snap)) if hit}
    assert nodes == {
        "torch::autograd::AccumulateGrad::apply",
        "torch::autograd::CopySlices::apply",
        "torch::autograd::generated::MmBackward0::apply",
    }
