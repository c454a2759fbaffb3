"""A bare device index (`model.to(rank)`, `x.to(local_rank)`) means the simulated CUDA
device, also on a CPU-only build of PyTorch.

PyTorch reads an integer device as "this index of the build's accelerator". A CPU-only
build has none, so `Tensor.to(0)` and `nn.Module.to(rank)` (PyTorch's own DDP tutorial)
raise "Cannot access accelerator device when none is available" there, before any
simulated kernel runs; a CUDA build answers `cuda:0`, with or without a GPU. The check is
in C++ (`at::accelerator::getAccelerator` asks whether CUDA's hooks are built), so the
simulation reads the index where a script's call passes through Python first:
`Tensor.to` (simulation/patches/fake_cuda.py), `nn.Module.to` (here) and FSDP's
`device_id` (simulation/distributed/process_group.py).

`torch.device(i)` and a factory's `device=i` (`torch.zeros(n, device=rank)`) are parsed in
C++ with no Python step in between: in the script memlens runs they are rewritten when it
is compiled (`script_code`); in the modules it imports they still raise. Standing in for
the `torch.device` class itself was tried and left out: Dynamo, imported during a
simulation, keeps `torch.device` in tables it fills once (the constant types, its guards'
globals) and would keep a stand-in after the simulation ends. `torch._C._nn._parse_to`,
behind both `.to`s, is left alone for the same reason (Dynamo registers a polyfill for
that very function). `hint` adds what to write instead to the error a bare index raises.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from typing import Any

import torch

from memlens.simulation.patches.fake_cuda import Patches, cuda_indices

NO_ACCELERATOR = "Cannot access accelerator device when none is available"


@functools.cache  # a property of the build: asked at each simulation and script
def build_reads_indices() -> bool:
    """Whether this build of PyTorch turns a bare index into a device by itself."""
    try:
        torch.device(0)
    except RuntimeError:
        return False
    return True


def _module_to(original: Callable[..., Any]) -> Callable[..., Any]:
    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return original(self, *cuda_indices(args, kwargs), **kwargs)

    return to


def install(patches: Patches) -> None:
    """On a build without an accelerator, `nn.Module.to(i)` moves to the simulated CUDA
    device i. A build that reads indices itself is left alone: there, Dynamo keeps
    tracing `Module.to` inside a compiled function as torch's own code."""
    if not build_reads_indices():
        patches.set(torch.nn.Module, "to", _module_to(torch.nn.Module.to))


# `torch.device(*ARGS(X))`: X evaluated once, an int (not a bool) read as CUDA's index
_ARGS = "(lambda d: ('cuda', d) if isinstance(d, int) and not isinstance(d, bool) else (d,))"
# `torch.zeros(n, device=NAMED(X))`: the same, as a device string for a `device=` keyword
_NAMED = "(lambda d: f'cuda:{d}' if isinstance(d, int) and not isinstance(d, bool) else d)"


def _call_of(template: str, arg: ast.expr, at: ast.AST) -> ast.Call:
    """`template(arg)`, placed on `at`'s line (for tracebacks)."""
    read = ast.parse(template, mode="eval").body
    for part in ast.walk(read):
        ast.copy_location(part, at)
    return ast.copy_location(ast.Call(read, [arg], []), at)


class _DeviceCalls(ast.NodeTransformer):
    """In calls of `torch.X`: `torch.device(X)` -> `torch.device(*ARGS(X))` and
    `device=X` -> `device=NAMED(X)`: what a CUDA build answers, in plain Python that
    Dynamo traces as the script's own code (lambdas in the script's file). Only `torch.X`
    itself: its `device=` takes a device wherever it takes an index (a script's own
    function may not, and `torch.cuda.X` reads indices itself)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 (ast's visitor names)
        self.generic_visit(node)
        func = node.func
        if not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "torch"
        ):
            return node
        for keyword in node.keywords:
            if keyword.arg == "device":
                keyword.value = _call_of(_NAMED, keyword.value, keyword.value)
        if (
            func.attr == "device"
            and len(node.args) == 1
            and not node.keywords
            and not isinstance(node.args[0], ast.Starred)
        ):
            node.args = [ast.Starred(_call_of(_ARGS, node.args[0], node), ast.Load())]
        return node


def script_code(source: bytes, path: str) -> Any:
    """The script's code object, as `compile` makes it; on a build that cannot read a bare
    device index, with the script's own `torch.device(i)` and `torch.X(..., device=i)`
    read as `cuda:i` (`dist.init_process_group(device_id=torch.device(local_rank))` in
    modded-nanogpt's 2025 records, `torch.zeros(n, device=rank)`). Line numbers and names
    are the source's."""
    if build_reads_indices():
        return compile(source, path, "exec", dont_inherit=True)
    tree = ast.fix_missing_locations(_DeviceCalls().visit(ast.parse(source, path)))
    return compile(tree, path, "exec", dont_inherit=True)


def hint(exc: BaseException) -> str:
    """What to add to a script's error where a bare device index failed on this build."""
    if not isinstance(exc, RuntimeError) or NO_ACCELERATOR not in str(exc):
        return ""
    return (
        " [a CPU-only PyTorch has no accelerator for a bare device index; memlens reads"
        " .to(i) and the script's own torch.device(i) and torch.X(device=i) itself, not"
        " other calls' or imported modules': write torch.device(\"cuda\", i), or run"
        " memlens under a CUDA build of torch, no GPU needed]"
    )
