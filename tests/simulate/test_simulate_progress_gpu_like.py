"""Issue 34's small parts of `memlens simulate`: progress while it runs, `--gpu
like:SNAPSHOT`, `--compare SNAPSHOT`, and a headline that never reads 0.00 GiB for a
nonzero figure."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memlens.cli.simulate import compare_lines
from memlens.simulation.gpu_inference import _pick, infer_gpu, resolve_gpu
from memlens.simulation.progress import SimProgress
from memlens.units import format_bytes

GiB = 2**30
SNAPSHOTS = Path(__file__).resolve().parents[2].parent / "shared" / "snapshots"


def test_the_headline_unit_shows_a_small_nonzero_figure():
    """The headline prints with format_bytes, whose unit always shows the figure."""
    assert format_bytes(0) == "0 B"
    assert format_bytes(768 * 1024) == "768.00 KiB"  # 0.00 GiB before
    assert format_bytes(3 * 2**20) == "3.00 MiB"
    assert format_bytes(GiB + GiB // 4) == "1.25 GiB"


def test_progress_reports_steps_events_and_peaks_while_the_block_runs():
    torch = pytest.importorskip("torch")
    import memlens

    heard: list[SimProgress] = []
    sim = memlens.simulate(cublas_workspace=0)
    sim.on_progress, sim.progress_every = heard.append, 0.02
    with sim:
        w = torch.nn.Parameter(torch.zeros(1024, device="cuda"))
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(2):
            (w * 2).sum().backward()
            opt.step()
        deadline = time.monotonic() + 5
        while not (heard and heard[-1].steps == 2) and time.monotonic() < deadline:
            time.sleep(0.02)
    last = heard[-1]
    assert last.steps == 2
    assert last.events == len(sim.allocator.trace) > 0
    assert last.peak_active == sim.allocator.peak_allocated > 0
    assert last.peak_reserved == 2 * 2**20  # one small segment
    n = len(heard)
    time.sleep(0.1)
    assert len(heard) == n  # the ticker stopped with the block


def test_the_smallest_card_of_the_class_that_holds_the_capacity_is_picked():
    assert _pick(False, 23 * GiB).key == "rtx4090"  # an A10 or L4 holds less
    assert _pick(False, 15 * GiB).key == "t4"
    assert _pick(False, None).key == "a100"
    assert _pick(True, None).key == "h100"
    assert _pick(False, 500 * GiB).key == "a100"  # none holds it: the largest
    assert resolve_gpu("t4", print) == ("t4", None)


@pytest.mark.skipif(not SNAPSHOTS.is_dir(), reason="../shared is absent")
def test_a_recording_made_before_hopper_is_simulated_as_an_a100():
    got = infer_gpu(f"like:{SNAPSHOTS / 'wedson_medium_128_training.pickle'}")
    assert (got.gpu, got.alloc_conf) == ("a100", "")
    assert "8,519,680 bytes" in got.reasons[0]


@pytest.mark.skipif(not SNAPSHOTS.is_dir(), reason="../shared is absent")
def test_compare_prints_the_difference_against_the_recording():
    path = SNAPSHOTS / "wedson_medium_128_inference.pickle"
    lines = compare_lines(str(path), str(path))
    assert (
        lines[1]
        == "  peak active: simulated 1,736,962,048 bytes, recorded 1,736,962,048 bytes: equal"
    )
