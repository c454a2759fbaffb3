"""Host data keeps its values in a simulation (issue 36: modded-nanogpt's data loader,
unedited): a real host tensor the script reads (`torch.from_numpy` of its data,
`torch.tensor([...])`, one made before the block), a file read with `torch.from_file`,
and a host buffer filled through `.numpy()` hold what a GPU run's host holds, so a
loader's `assert header[0] == MAGIC` passes and token counts are right. Before, each of
these became a fake with no values: the assert failed, `from_file` raised (no fake
kernel) and `.numpy()` of a uint16 buffer raised. Its checkpoint at the last step
(`torch.save` of state dicts) raised too: fakes are saved as meta tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_simulate_compiled_gpu_rules import events  # noqa: E402

import memlens  # noqa: E402

pytestmark = pytest.mark.torch

MAGIC = 20240520


def write_shard(path: Path, tokens: list[int]) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (MAGIC, 1, len(tokens))
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype=np.uint16).tobytes())


def test_real_host_tensors_keep_their_values():
    made_before = torch.arange(4)
    with memlens.simulate(cublas_workspace=0):
        data = torch.from_numpy(np.array([MAGIC, 1, 7], dtype=np.int32))
        assert bool(data[0] == MAGIC) and int(data[2]) == 7
        listed = torch.tensor([3, 4, 5])
        assert int(listed.sum()) == 12 and listed.tolist() == [3, 4, 5]
        assert (made_before * 2).tolist() == [0, 2, 4, 6]
        # a real tensor's .numpy() is its own array (with the modes on, it was garbage)
        assert made_before.numpy().tolist() == [0, 1, 2, 3]


def test_a_shard_read_as_modded_nanogpt_reads_it(tmp_path):
    shard = tmp_path / "train_000.bin"
    tokens = [50256, 3, 3, 9, 50256, 3] * 10
    write_shard(shard, tokens)
    with memlens.simulate(cublas_workspace=0) as sim:
        header = torch.from_file(str(shard), False, 256, dtype=torch.int32)
        assert header[0] == MAGIC and header[1] == 1
        n = int(header[2])
        buffer = torch.empty(n, dtype=torch.uint16, pin_memory=True)
        with shard.open("rb", buffering=0) as f:
            f.seek(256 * 4)
            assert f.readinto(buffer.numpy()) == 2 * n
        inputs = buffer[:-1].to(device="cuda", dtype=torch.int32, non_blocking=True)
        assert inputs.device.type == "cuda"
        assert int((inputs == 50256).sum()) == tokens[:-1].count(50256)
        assert int((inputs == 3).sum()) == tokens[:-1].count(3)
    # the host tensors are no device memory: the 59 int32 inputs, then for each count the
    # comparison's 59 bools, the int64 sum and the bools widened to int64 for it
    count = [("+", 59), ("+", 8), ("+", 472), ("-", 472), ("-", 59), ("-", 8)]
    assert events(sim) == [("+", 59 * 4)] + count * 2
    assert "tensor values are fake: .item() answered 0" not in sim.notes


def test_values_too_large_to_keep_are_not_computed_on_the_host():
    with memlens.simulate(cublas_workspace=0) as sim:
        a = torch.from_numpy(np.ones(4096, dtype=np.float32))
        b = torch.from_numpy(np.ones(4096, dtype=np.float32))
        outer = torch.outer(a, b)  # 16M elements: past the values kept (4M)
        assert float(outer.sum()) == 0.0  # not known: answered 0, noted
        assert float(a.sum()) == 4096.0
    assert "tensor values are fake: .item() answered 0" in sim.notes


def test_a_checkpoint_of_fake_tensors_saves_their_shapes(tmp_path):
    """modded-nanogpt saves `dict(model=state_dict(), optimizers=[...])` at its last step:
    a fake does not pickle (it raised inside torch.save); it is saved as a meta tensor."""
    with memlens.simulate(cublas_workspace=0) as sim:
        model = torch.nn.Linear(4, 8, device="cuda")
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(2, 4, device="cuda")).sum().backward()
        optimizer.step()
        before = len(events(sim))
        state = dict(step=3, model=model.state_dict(), optimizers=[optimizer.state_dict()])
        torch.save(state, tmp_path / "state.pt")
        assert len(events(sim)) == before  # a save copies to the host: no device memory
    assert (
        "torch.save wrote the fake tensors' shapes and dtypes (meta tensors), not values"
        in sim.notes
    )
    saved = torch.load(tmp_path / "state.pt")
    assert saved["step"] == 3
    weight = saved["model"]["weight"]
    assert weight.is_meta and weight.shape == (8, 4) and weight.dtype == torch.float32
    assert saved["optimizers"][0]["state"][0]["exp_avg"].shape == (8, 4)
    assert (tmp_path / "state.pt").stat().st_size < 4096
