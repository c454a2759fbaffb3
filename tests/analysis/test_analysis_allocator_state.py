"""Allocator state at any event (backwards from the final state), fragmentation, OOMs."""

from __future__ import annotations

import pytest
from analysis_snapshots import BIG_SIZE, MiB, expandable_snapshot, oom_snapshot, training_snapshot
from hand_replay import HandReplay

import memlens
from memlens.analysis.allocator_state import fragmentation, state_at
from memlens.analysis.oom import oom_report


@pytest.fixture(scope="module")
def dev():
    return memlens.load(training_snapshot()).device(0)


def test_state_at_peak(dev):
    s = state_at(dev, 11)
    assert [(x["address"], x["size"]) for x in s["segments"]] == [
        ("0x100000", MiB), ("0x200000", 2 * MiB)]  # fmt: skip
    assert s["segments_bytes"] == s["reserved_bytes"] == 3 * MiB
    assert s["allocated_bytes"] == s["active_bytes"] == 1610 + BIG_SIZE
    assert (s["n_blocks"], s["blocks_outside_segments"]) == (6, 0)
    # blocks rounded up to 512 B: P 1024, A2/G/L1/O 512 each; BIG 1,500,160
    s1, s2 = s["segments"]
    assert s1["free_bytes"] == MiB - 1024 - 4 * 512
    assert s1["largest_free_bytes"] == 0x200000 - 0x101600
    assert s2["free_bytes"] == s2["largest_free_bytes"] == 2 * MiB - 1_500_160
    assert s["free_bytes"] == s1["free_bytes"] + s2["free_bytes"]
    assert s["largest_free_bytes"] == 0x200000 - 0x101600
    assert s["fragmentation"] == pytest.approx(
        1 - s["largest_free_bytes"] / s["free_bytes"], abs=1e-6
    )
    assert [b["address"] for b in s1["blocks"]] == [
        "0x100000", "0x100400", "0x100c00", "0x101000", "0x101400"]  # fmt: skip
    assert s1["blocks"][1]["version"] == 1


def test_state_pending_and_edges(dev):
    s = state_at(dev, 17)  # A2's free requested, not completed
    states = {b["address"]: b["state"] for seg in s["segments"] for b in seg["blocks"]}
    assert states["0x100400"] == "active_pending_free"
    s = state_at(dev, -1)
    assert s["n_segments"] == 1 and s["n_blocks"] == 1 and s["reserved_bytes"] == MiB
    s = state_at(dev, 21, blocks=False)
    assert "segments" not in s and s["n_segments"] == 1 and s["n_blocks"] == 6
    assert s["largest_free_bytes"] == 0x200000 - (0x101C00 + 512)


def test_expandable_segments_map_unmap():
    dev = memlens.load(expandable_snapshot()).device(0)

    def seg(e: int) -> list[tuple[str, int]]:
        return [(x["address"], x["size"]) for x in state_at(dev, e)["segments"]]

    assert seg(6) == [("0x400000", 4 * MiB)]
    assert seg(5) == [("0x400000", 6 * MiB)]  # undoing the unmap merges the range back
    assert seg(1) == [("0x400000", 2 * MiB)]  # undoing the second map carves it out
    assert seg(-1) == []
    for e in range(-1, 7):
        s = state_at(dev, e, blocks=False)
        assert s["segments_bytes"] == s["reserved_bytes"]
        assert s["blocks_outside_segments"] == 0


def test_fragmentation_curve(dev):
    f = fragmentation(dev, points=50)
    c = f["curve"]
    assert c["event"] == list(range(22))
    assert c["gap_bytes"] == (dev.reserved_after - dev.active_after).tolist()
    assert (f["max_gap_bytes"], f["max_gap_event"]) == (3 * MiB - 1510, 18)
    assert c["largest_free_bytes"][11] == state_at(dev, 11)["largest_free_bytes"]
    assert c["n_segments"][9:12] == [1, 2, 2]
    assert f["at_peak"] is not None and f["end"] is not None
    assert f["at_peak"]["event"] == 11 and f["end"]["event"] == 21


def test_oom():
    dev = memlens.load(oom_snapshot()).device(0)
    r = oom_report(dev)
    assert r["count"] == 1
    (o,) = r["ooms"]
    assert (o["event"], o["requested_bytes"], o["device_free_bytes"]) == (2, 4 * MiB, 3 * MiB)
    assert (o["active_bytes"], o["reserved_bytes"], o["reserved_unused_bytes"]) == (
        MiB,
        2 * MiB,
        MiB,
    )
    assert (o["largest_free_bytes"], o["fits_in_a_free_block"], o["live_count"]) == (MiB, False, 1)
    assert o["site"] == "train (/home/u/train.py:50)"
    assert o["top_sites"][0]["site"] == "forward (/home/u/model.py:20)"
    # 3 MiB free + 1 MiB cached but unused = the 4 MiB asked; the unused MiB shares its
    # segment with the live block, so it could not be released: fragmentation
    assert (o["verdict"], o["outside_bytes"]) == ("fragmentation", None)
    assert oom_report(memlens.load(training_snapshot()).device(0))["count"] == 0


@pytest.mark.parametrize(
    "args, verdict",
    [
        # requested, driver free, cached unused, largest free block, reserved, device size
        ((4 * MiB, 3 * MiB, MiB, 4 * MiB, 2 * MiB, None), ("stream_or_pool", None)),
        ((4 * MiB, 3 * MiB, MiB, MiB, 2 * MiB, None), ("fragmentation", None)),
        ((4 * MiB, 3 * MiB, 0, 0, 2 * MiB, None), ("device_full", None)),
        # 80 GiB device: this process reserves 20 GiB and sees 1 GiB free: 59 GiB outside
        ((2 << 30, 1 << 30, 0, 0, 20 << 30, 80 << 30), ("another_process", 59 << 30)),
        # 24 GiB device, 22.5 GiB reserved, 0.5 GiB free: 1 GiB outside is the context
        ((1 << 30, 1 << 29, 0, 0, 45 << 29, 24 << 30), ("device_full", 1 << 30)),
    ],
)
def test_oom_verdict(args, verdict):
    from memlens.analysis.oom import oom_verdict

    assert oom_verdict(*args) == verdict


def test_real_state_matches_reserved_and_final_blocks(shared_snapshots_dir, expected_figures):
    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        n = dev.n_events
        for e in (-1, n // 4, exp["peak_event_index"], n - 1):
            s = state_at(dev, e, blocks=False)
            assert s["segments_bytes"] == s["reserved_bytes"]
            assert s["blocks_outside_segments"] == 0
        end = state_at(dev, n - 1)
        seg = dev.snapshot.segments
        rows = seg.of_device(dev.device)
        assert end["n_segments"] == len(rows)
        final_active = sum(
            int((seg.block_state[seg.block_offsets[r] : seg.block_offsets[r + 1]] != 0).sum())
            for r in rows
        )
        assert end["n_blocks"] == final_active


def test_vectorized_segments_equal_the_backward_walk(shared_snapshots_dir, expected_figures):
    """Without map/unmap, segment lifetimes replace the walk: both give the same segments."""
    from memlens.analysis.allocator_state import SegmentIntervals, SegmentWalker

    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        fast, walk = SegmentIntervals(dev), SegmentWalker(dev)
        n = dev.n_events
        for e in sorted({n - 1, 3 * n // 4, n // 2, n // 5, 10, 0, -1}, reverse=True):
            walk.rewind_to(e)
            fast.rewind_to(e)
            for x, y in zip(fast.arrays(), walk.arrays()):
                assert x.tolist() == y.tolist(), (name, e)
        assert fast.problems == walk.problems == 0


def test_vectorized_segments_hand(dev):
    from memlens.analysis.allocator_state import SegmentIntervals

    t = SegmentIntervals(dev)
    for e, want in ((-1, 1), (9, 1), (10, 2), (19, 2), (20, 1), (21, 1)):
        t.rewind_to(e)
        assert len(t.arrays()[0]) == want


def test_oom_of_a_generated_training_loop_against_a_hand_replay():
    raw = memlens.generate_snapshot(events=3000, oom=True)
    hand = HandReplay(raw)
    (i,) = [k for k, e in enumerate(hand.trace) if e["action"] == "oom"]
    entry = hand.trace[i]
    (o,) = oom_report(memlens.load(raw).device(0))["ooms"]
    # the state right before the failed request (which allocates nothing)
    live = hand.live_at(i - 1)
    assert o["event"] == i
    assert (o["requested_bytes"], o["device_free_bytes"]) == (entry["size"], entry["device_free"])
    assert (o["active_bytes"], o["live_count"]) == (sum(live), len(live))
    assert o["reserved_unused_bytes"] == o["reserved_bytes"] - sum(live)
    assert o["fits_in_a_free_block"] == (o["largest_free_bytes"] >= entry["size"])
    assert o["site"] == "{name} ({filename}:{line})".format(**entry["frames"][0])
