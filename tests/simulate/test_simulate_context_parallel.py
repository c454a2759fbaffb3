"""Context parallel's block mask (issue 36): torch's `_create_cp_block_mask` compiles
`create_block_mask` (fullgraph) over a mask function that indexes a captured index tensor
(`qkv_rearrange_indices[0][q_idx]`). Dynamo turns the int index into
`torch.tensor(0, device="cuda")`, and make_fx computed that one-element constant for real,
on a device a simulation does not have: the trace failed, left its vmap levels on
functorch's stack and Dynamo stopped on "Guard failed on the same frame it was created".
The host values the simulation keeps (simulation/distributed/values.py) are computed with
every device argument read as the host's.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.nn.attention.flex_attention import create_block_mask  # noqa: E402

import memlens  # noqa: E402


def test_a_compiled_block_mask_over_a_captured_index_tensor_runs_compiled():
    with memlens.simulate(cublas_workspace=0) as sim:
        # CP 2's rank 1 of 256 positions: its 128 queries are the second half
        rearrange = torch.arange(256, device="cuda").view(1, 256)

        def mask(b, h, q_idx, kv_idx):
            return rearrange[0][q_idx + 128] >= rearrange[0][kv_idx]

        compiled = torch.compile(create_block_mask, dynamic=False, fullgraph=True)
        block_mask = compiled(mask, 2, None, 128, 256, device="cuda", BLOCK_SIZE=(128, 128))
        assert block_mask.shape == (2, 1, 128, 256)
        assert torch._C._functorch.peek_interpreter_stack() is None
        # the trace's `device_put` to the GPU ran on the host's values for real, on a real
        # CUDA device: C++ then took CUDA as initialised for the rest of the process, and
        # this (and every later simulation's) failed: "not linked with support for cuda"
        assert torch.tensor([3, 4], device="cuda").is_cuda
    assert not any("ran eagerly" in note for note in sim.notes)
    assert any(note.startswith("torch.compile: Dynamo's graphs") for note in sim.notes)
