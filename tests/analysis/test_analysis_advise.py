"""`memlens advise`: each finding on a hand-built snapshot that has it and one that does not
(every expected value worked out by hand in the comments), and the allocator replay on the
real snapshots (with the recorded settings it must reproduce their reserved curve)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from analysis_snapshots import training_snapshot

import memlens
from memlens.analysis import registry
from memlens.analysis.advise import advise
from memlens.analysis.advise_replays import replays
from memlens.analysis.allocator_model import AllocatorSettings
from memlens.analysis.allocator_replay import replay, what_if
from memlens.errors import MemlensError
from shared_data import SHARED_SNAPSHOTS, real_snapshot_names
from snapshot_builders import MiB, block, ev, segment

S1, S2, S3 = 0x10000000, 0x20000000, 0x30000000
USER = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]


def large(addr: int, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return segment(addr, blocks, segment_type="large")


def fragmented() -> dict[str, Any]:
    """A 100, B 100, free B, C 120 MiB (large pool, nothing before the trace).

    Recorded (no expandable segments): A and B reserve 100 MiB segments S1, S2; B's freed
    S2 (100 MiB) is too small for C: a third segment S3 of 120 MiB. Reserved after the
    alloc/free events 1, 3, 4, 5, 7: 100, 200, 200, 200, 320 MiB; peak active 220 (A + C).
    With expandable_segments (20 MiB pages in the large pool): A maps 100 MiB, B grows the
    segment to 200, free B leaves a 100 MiB free tail, C grows it by ceil(20/20) pages =
    20 MiB: 220 MiB, 100 MiB less than recorded."""
    trace = [
        ev("segment_alloc", S1, 100 * MiB, 0, frames=USER),  # 0
        ev("alloc", S1, 100 * MiB, 1, frames=USER),  # 1 A
        ev("segment_alloc", S2, 100 * MiB, 2, frames=USER),  # 2
        ev("alloc", S2, 100 * MiB, 3, frames=USER),  # 3 B
        ev("free_requested", S2, 100 * MiB, 4, frames=USER),  # 4
        ev("free_completed", S2, 100 * MiB, 5, frames=USER),  # 5
        ev("segment_alloc", S3, 120 * MiB, 6, frames=USER),  # 6
        ev("alloc", S3, 120 * MiB, 7, frames=USER),  # 7 C
    ]
    segs = [
        large(S1, [block(S1, 100 * MiB, 100 * MiB, "active_allocated")]),
        large(S2, [block(S2, 100 * MiB, 0, "inactive")]),
        large(S3, [block(S3, 120 * MiB, 120 * MiB, "active_allocated")]),
    ]
    return {"segments": segs, "device_traces": [trace]}


def reuse(second: int) -> list[dict[str, Any]]:
    """Events 0-4: a 100 MiB segment S1, A (100 MiB) in it, free A, then `second` at S1."""
    return [
        ev("segment_alloc", S1, 100 * MiB, 0),
        ev("alloc", S1, 100 * MiB, 1),
        ev("free_requested", S1, 100 * MiB, 2),
        ev("free_completed", S1, 100 * MiB, 3),
        ev("alloc", S1, second, 4),
    ]


def reused() -> dict[str, Any]:
    """A 100 MiB, free A, B 100 MiB: B reuses A's segment; reserved 100 = peak active."""
    trace = reuse(100 * MiB)
    segs = [large(S1, [block(S1, 100 * MiB, 100 * MiB, "active_allocated")])]
    return {"segments": segs, "device_traces": [trace]}


def test_replay_reproduces_a_hand_worked_sequence():
    dev = memlens.load(fragmented()).device(0)
    r = replay(dev)
    assert (r.mismatches, r.moved, r.compared) == (0, 0, 5)
    assert r.reserved_after[[1, 3, 4, 5, 7]].tolist() == [
        m * MiB for m in (100, 200, 200, 200, 320)
    ]
    assert r.peak_reserved == 320 * MiB == dev.peak_reserved_bytes
    e = replay(dev, AllocatorSettings(expandable_segments=True))
    assert e.peak_reserved == 220 * MiB
    assert e.reserved_after[[1, 3, 5, 7]].tolist() == [m * MiB for m in (100, 200, 200, 220)]
    assert e.mismatches == 1  # event 7: 220 MiB instead of the recorded 320 MiB


def test_replay_seeds_the_state_older_than_the_trace():
    """A 20 MiB segment made before the trace, a ghost block G of 1.5 MiB at its start:
    X (4 MiB) fits in the free 18.5 MiB after G, at S1 + 1.5 MiB, reserving nothing."""
    g, x = 3 * MiB // 2, S1 + 3 * MiB // 2
    trace = [ev("alloc", x, 4 * MiB, 1)]
    segs = [large(S1, [block(S1, g, g, "active_allocated"), block(x, 4 * MiB, 4 * MiB,
            "active_allocated"), block(x + 4 * MiB, 20 * MiB - g - 4 * MiB, 0, "inactive")])]  # fmt: skip
    dev = memlens.load({"segments": segs, "device_traces": [trace]}).device(0)
    r = replay(dev)
    assert (r.mismatches, r.moved, r.peak_reserved) == (0, 0, 20 * MiB)


def test_fragmentation_finding_is_the_exact_replay_saving():
    dev = memlens.load(fragmented()).device(0)
    result = advise(dev, replays=replays(dev, ["expandable_segments:True"]))
    rec, exp = result["replays"]
    assert (rec["recorded"], rec["peak_reserved_bytes"], rec["saving_bytes"]) == (
        True,
        320 * MiB,
        0,
    )
    assert (exp["peak_reserved_bytes"], exp["saving_bytes"], exp["oom_fits"]) == (
        220 * MiB,
        100 * MiB,
        None,
    )
    (f,) = result["findings"]
    assert (f["kind"], f["bytes"], f["certainty"]) == ("fragmentation", 100 * MiB, "exact")
    # the requests that reserved a segment: A, B, C, all at train.py:7
    assert [(s["site"], s["bytes"], s["count"]) for s in f["sites"]] == [
        ("step (/home/u/train.py:7)", 320 * MiB, 3)]  # fmt: skip


def test_no_fragmentation_when_the_cache_is_reused():
    dev = memlens.load(reused()).device(0)
    result = advise(dev, replays=replays(dev, ["expandable_segments:True"]))
    assert [r["peak_reserved_bytes"] for r in result["replays"]] == [100 * MiB, 100 * MiB]
    assert result["findings"] == []


def oom(tail_free: bool) -> dict[str, Any]:
    """Capacity 140 MiB (reserved 100 + 40 free at the OOM); a request of 60 MiB fails.

    tail_free: S1 (100 MiB) held A 100, freed, then A2 50 at its start: 50 MiB cached at
    its end, 40 free on the device: cached + free = 90 >= 60, fragmentation; the device
    alone was short by 60 - 40 = 20 MiB. With expandable segments C grows the segment's
    free 50 MiB tail by one 20 MiB page: 120 <= 140, it fits. With max_split_size_mb:20
    A2 is not cut from the cached 100 MiB block (oversize blocks serve only requests that
    waste under 20 MiB of them): its 50 MiB segment does not fit beside S1, so S1 (wholly
    free) is released first; C then takes a 60 MiB segment: 50 + 60 = 110 <= 140, it fits.
    Otherwise: A (100 MiB) is live, nothing cached: device full, short 60 - 40 = 20 MiB,
    and expandable segments need 100 + 60 = 160 > 140: no what-if fits."""
    if tail_free:
        trace = [*reuse(50 * MiB), ev("oom", 40 * MiB, 60 * MiB, 5)]
        blocks = [block(S1, 50 * MiB, 50 * MiB, "active_allocated"),
                  block(S1 + 50 * MiB, 50 * MiB, 0, "inactive")]  # fmt: skip
    else:
        trace = [ev("segment_alloc", S1, 100 * MiB, 0), ev("alloc", S1, 100 * MiB, 1),
                 ev("oom", 40 * MiB, 60 * MiB, 2)]  # fmt: skip
        blocks = [block(S1, 100 * MiB, 100 * MiB, "active_allocated")]
    return {"segments": [large(S1, blocks)], "device_traces": [trace]}


def test_oom_from_fragmentation_passes_with_expandable_segments():
    dev = memlens.load(oom(tail_free=True)).device(0)
    result = advise(dev, replays=replays(dev, ["expandable_segments:True", "max_split_size_mb:20"]))
    assert [r["oom_fits"] for r in result["replays"]] == [None, True, True]
    (f,) = [f for f in result["findings"] if f["kind"] == "oom"]
    assert f["bytes"] == 20 * MiB
    assert "fragmentation: 50.00 MiB was cached" in f["summary"]
    assert "smallest change: expandable_segments:True replays the trace" in f["summary"]


def test_oom_on_a_full_device_names_the_bytes_to_free():
    dev = memlens.load(oom(tail_free=False)).device(0)
    result = advise(dev, replays=replays(dev, ["expandable_segments:True"]))
    assert [r["oom_fits"] for r in result["replays"]] == [None, False]
    (f,) = result["findings"]
    assert (f["kind"], f["bytes"], f["certainty"]) == ("oom", 20 * MiB, "exact")
    assert "device full" in f["summary"] and "free 20.00 MiB of what is live" in f["summary"]


ATTN = {"filename": "/home/u/model.py", "line": 30, "name": "attention"}
SOFTMAX = {"filename": "/usr/lib/python3.11/site-packages/torch/nn/functional.py", "line": 1,
           "name": "softmax"}  # fmt: skip
MATMUL = {"filename": "/home/u/model.py", "line": 29, "name": "attention"}
FUSED = {"filename": "??", "line": 0,
         "name": "at::_ops::_scaled_dot_product_efficient_attention::call(x)"}  # fmt: skip


def attention(softmax: list[dict[str, Any]]) -> dict[str, Any]:
    """Scores (4 MiB, the matmul in attention()), the softmax's max (32 KiB, S = 128 times
    smaller: not a matrix) freed at once, then its output P (4 MiB): peak after event 3
    with scores + P = 8 MiB live; a 4 MiB buffer made elsewhere (no attention frame) is
    not counted."""
    trace = [
        ev("alloc", 0x100000, 4 * MiB, 0, frames=[MATMUL]),  # scores
        ev("alloc", 0x500000, 32 * 1024, 1, frames=[*softmax, ATTN]),  # max
        ev("free_completed", 0x500000, 32 * 1024, 2, frames=[*softmax, ATTN]),
        ev("alloc", 0x600000, 4 * MiB, 3, frames=[*softmax, ATTN]),  # P
        ev("free_completed", 0x600000, 4 * MiB, 4, frames=[ATTN]),
    ]
    segs = [large(0, [block(0x100000, 4 * MiB, 4 * MiB, "active_allocated", [MATMUL]),
                      block(0xA00000, 4 * MiB, 4 * MiB, "active_allocated", USER)])]  # fmt: skip
    return {"segments": segs, "device_traces": [trace]}


def test_attention_matrices_of_a_hand_written_softmax():
    dev = memlens.load(attention([SOFTMAX])).device(0)
    (f,) = advise(dev)["findings"]
    assert (f["kind"], f["bytes"], f["certainty"]) == ("attention", 8 * MiB, "estimate")
    assert [(s["site"], s["bytes"]) for s in f["sites"]] == [
        ("attention (/home/u/model.py:29)", 4 * MiB), ("attention (/home/u/model.py:30)", 4 * MiB)]  # fmt: skip


@pytest.mark.parametrize("frames", [[], [FUSED, SOFTMAX]], ids=["no-softmax", "fused-sdpa"])
def test_no_attention_finding_without_a_hand_written_softmax(frames):
    dev = memlens.load(attention(frames)).device(0)
    assert advise(dev)["findings"] == []


def test_sharding_and_leaks_on_the_training_snapshot():
    """At the peak (event 11): gradient G (200 B) and optimizer state O (300 B) are live:
    500 B over 8 ranks keeps ceil(500 / 8) = 63 B per rank, 437 B saved; over 1 rank,
    none. Leaks: L1 and L2 (10 B each, model.py forward) left alive by both ProfilerSteps."""
    dev = memlens.load(training_snapshot()).device(0)
    by_kind = {f["kind"]: f for f in advise(dev, ranks=8)["findings"]}
    assert (by_kind["sharding"]["bytes"], by_kind["sharding"]["certainty"]) == (437, "estimate")
    assert (by_kind["leak"]["bytes"], by_kind["leak"]["certainty"]) == (20, "exact")
    assert "sharding" not in {f["kind"] for f in advise(dev, ranks=1)["findings"]}
    # without --ranks: no sharding finding, a note sizes it (gradients and state: 500 B)
    plain = advise(dev)
    assert "sharding" not in {f["kind"] for f in plain["findings"]}
    assert any(n.startswith("with N GPUs: --ranks N") and "500 B" in n for n in plain["notes"])


def test_findings_are_ranked_and_the_command_checks_its_settings():
    dev = memlens.load(training_snapshot()).device(0)
    found = [f["bytes"] for f in advise(dev)["findings"]]
    assert found == sorted(found, reverse=True)
    with pytest.raises(MemlensError, match="'garbage_collection_threshold' is not modelled"):
        registry.get("advise").check({"what_if": ["garbage_collection_threshold:0.6"]})
    s = what_if(AllocatorSettings(max_split_size=64 * MiB), "expandable_segments:True")
    assert (s.expandable_segments, s.max_split_size) == (True, 64 * MiB)


REAL = real_snapshot_names()


@pytest.mark.skipif(not REAL, reason="no shared snapshots")
@pytest.mark.parametrize("name", REAL)
def test_replay_reproduces_every_real_snapshot(name):
    """With the recorded settings, the reserved bytes after every alloc and free equal the
    recording, and every allocation lands at its recorded address."""
    dev = memlens.load(SHARED_SNAPSHOTS / name).device()
    r = replay(dev)
    assert (r.mismatches, r.moved) == (0, 0)
    assert r.compared == int(np.count_nonzero(dev.action <= 2))
    assert r.peak_reserved == dev.peak_reserved_bytes


@pytest.mark.skipif(not REAL, reason="no shared snapshots")
def test_advise_on_real_snapshots():
    """Measured once, kept as regressions: expandable segments would have saved 5.05 GiB
    on the full step (61,111,009,280 -> 55,683,579,904 bytes); the forward pass at context
    512 holds 64 attention matrices of 128 MiB = 8 GiB at its peak (its hand-written
    softmax, transformer.py lines 138 and 142, 32 layers each); ftcourse uses fused SDPA:
    no attention finding."""
    full = memlens.load(SHARED_SNAPSHOTS / "cs336_memory_ctx128_fullstep.pickle").device()
    e = replay(full, AllocatorSettings(expandable_segments=True))
    assert e.peak_reserved == 55_683_579_904
    ctx512 = memlens.load(SHARED_SNAPSHOTS / "cs336_memory_ctx512_forward.pickle").device()
    kinds = {f["kind"]: f for f in advise(ctx512)["findings"]}
    assert kinds["attention"]["bytes"] == 64 * 128 * MiB
    ft = memlens.load(SHARED_SNAPSHOTS / "ftcourse_finetune.pickle").device()
    assert "attention" not in {f["kind"] for f in advise(ft)["findings"]}


def test_oom_from_memory_held_outside_pytorch():
    """The full-device OOM on a 160 MiB GPU: 160 - 100 reserved - 40 free = 20 MiB was held
    outside PyTorch, exactly what the 60 MiB request lacked: another process. On a 140 MiB
    GPU nothing is outside: the device is full."""
    dev = memlens.load(oom(tail_free=False)).device(0)
    (f,) = advise(dev, device_memory=160 * MiB)["findings"]
    assert f["bytes"] == 20 * MiB
    assert "another process: 20.00 MiB of the 160.00 MiB device" in f["summary"]
    assert "or held by the other process" in f["summary"]
    run = registry.get("advise").run(
        dev, device_memory="140MiB", what_if=["expandable_segments:True"]
    )
    assert "device full" in run["findings"][0]["summary"]
    with pytest.raises(MemlensError):
        registry.get("advise").check({"device_memory": "lots"})


def test_the_command_prints_a_ranked_table_and_refuses_unknown_settings(tmp_path):
    import pickle
    import subprocess
    import sys

    from click.testing import CliRunner

    from memlens.cli.main import cli

    path = tmp_path / "fragmented.pickle"
    path.write_bytes(pickle.dumps(fragmented()))
    out = CliRunner().invoke(cli, ["advise", str(path), "--what-if", "expandable_segments:True"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert (
        "  recorded: expandable_segments:False     320.00 MiB         0 B  reproduces the recording"
        in lines
    )
    assert "  1  fragmentation      100.00 MiB  exact" in lines
    bad = subprocess.run(
        [sys.executable, "-m", "memlens", "advise", str(path), "--what-if", "pinned_num_register_threads:2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.startswith("memlens: error: allocator setting 'pinned_num_register_threads'")
