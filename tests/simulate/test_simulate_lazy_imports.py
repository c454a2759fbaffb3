"""A simulation does not import torch's CUDA graph trees (inductor's compile_fx, about 2 s
of CPU) unless the simulated code asks for them; then they come as a CPU build's, and the
step counter is back at zero afterwards, as when memlens imported them up front. Nor does
it import DTensor or Dynamo (beyond the config a fake mode reads) until the code uses them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = """
import sys, torch, memlens
name = "torch._inductor.cudagraph_trees"
with memlens.simulate(cublas_workspace=0):
    print("imported at start:", name in sys.modules)
    torch.compiler.cudagraph_mark_step_begin()
    trees = sys.modules[name]
    print("as a CPU build:", trees.AllocatorState.__module__ == name)
    print("counter inside:", trees.MarkStepBox.mark_step_counter)
print("counter after:", trees.MarkStepBox.mark_step_counter)
print("finder left:", any("CpuBuild" in type(f).__name__ for f in sys.meta_path))
with memlens.simulate(cublas_workspace=0):
    print("second counter:", trees.MarkStepBox.mark_step_counter)
"""


def test_cudagraph_trees_imported_only_when_asked_for_as_a_cpu_build() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [
        "imported at start: False",
        "as a CPU build: True",  # the fallback class, not the CUDA binding
        "counter inside: -1",  # mark_step_begin counts down from zero
        "counter after: 0",
        "finder left: False",
        "second counter: 0",
    ]


# A plain simulation imports neither DTensor nor Dynamo's code (only torch._dynamo.config,
# which a fake mode reads); the first use of Dynamo (an optimizer's step calls
# torch._dynamo.graph_break) imports it then, as `import torch._dynamo` would have.
PLAIN = """
import sys, torch, memlens
with memlens.simulate(cublas_workspace=0) as sim:
    x = torch.ones(1024, device="cuda")
    y = (x * 2).sum()
print("dtensor:", "torch.distributed.tensor" in sys.modules)
print("dynamo code:", "torch._dynamo.convert_frame" in sys.modules)
print("dynamo config:", "torch._dynamo.config" in sys.modules)
print("peak:", sim.allocator.peak_allocated)
with memlens.simulate(cublas_workspace=0) as sim:
    w = torch.nn.Parameter(torch.ones(256, device="cuda"))
    opt = torch.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
print("dynamo after a step:", "torch._dynamo.convert_frame" in sys.modules)
print("seed wrapped:", torch.manual_seed is not torch.random.manual_seed)
print("peak:", sim.allocator.peak_allocated)
from torch._subclasses.fake_tensor import FakeTensorMode
fn = FakeTensorMode.__dict__["__torch_dispatch__"].__wrapped__
print("dispatch disabled by Dynamo:", getattr(fn, "__dynamo_disable")._torchdynamo_disable)
"""


def run_python(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()


def test_a_plain_simulation_imports_neither_dtensor_nor_dynamo_until_used() -> None:
    assert run_python(PLAIN) == [
        "dtensor: False",
        "dynamo code: False",
        "dynamo config: True",
        "peak: 8704",  # the ones, their double (4096 bytes each) and its sum (512, rounded)
        "dynamo after a step: True",
        "seed wrapped: True",  # torch._dynamo's own __init__ ran
        "peak: 4096",
        "dispatch disabled by Dynamo: True",
    ]


# Importing a submodule of Dynamo first (torch does `from torch._dynamo.utils import ...`)
# runs the package's __init__ first, once: one module object per name, as without memlens.
SUBMODULE = """
import sys, torch, memlens
with memlens.simulate(cublas_workspace=0):
    torch.ones(8, device="cuda")
    from torch._dynamo.utils import counters
    import torch._dynamo.eval_frame as eval_frame
print("package ran:", torch.manual_seed is not torch.random.manual_seed)
print("same modules:", torch._dynamo.eval_frame is eval_frame is sys.modules[eval_frame.__name__])
print("same counters:", torch._dynamo.utils.counters is counters)
print("finder left:", any("Package" in type(f).__name__ for f in sys.meta_path))
print("compiles:", torch.compile(lambda t: t * 2, backend="eager")(torch.ones(2)).tolist())
"""


def test_importing_a_dynamo_submodule_first_runs_the_package_first() -> None:
    assert run_python(SUBMODULE) == [
        "package ran: True",
        "same modules: True",
        "same counters: True",
        "finder left: False",
        "compiles: [2.0, 2.0]",
    ]
