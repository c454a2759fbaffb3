"""A simulation does not import torch's CUDA graph trees (inductor's compile_fx, about 2 s
of CPU) unless the simulated code asks for them; then they come as a CPU build's, and the
step counter is back at zero afterwards, as when memlens imported them up front."""

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
