"""The allocator model against hand-worked cases (sizes in bytes, addresses from BASE)."""

from __future__ import annotations

import pytest

from memlens.analysis.allocator_model import (
    BASE_ADDRESS as B,
)
from memlens.analysis.allocator_model import (
    AllocatorSettings,
    CachingAllocator,
    SimulatedOOM,
    allocation_size,
    round_size,
)

MiB = 2**20


def events(alloc: CachingAllocator) -> list[tuple[str, int, int]]:
    return [
        (e["action"], (e["addr"] - B if "addr" in e else e["device_free"]), e["size"])
        for e in alloc.trace
    ]


@pytest.mark.parametrize(
    ("size", "rounded"),
    [
        (1, 512),
        (511, 512),
        (512, 512),
        (513, 1024),
        (MiB + 1, MiB + 512),
        (0, 512),
    ],
)
def test_round_size_to_512(size, rounded):
    assert round_size(size) == rounded


def test_roundup_power2_divisions():
    settings = AllocatorSettings(roundup_power2_divisions=[4] * 16)
    # floor power of two 1 MiB, quarter step 256 KiB: 1,300,000 -> 1 MiB + 256 KiB
    assert round_size(1_300_000, settings) == MiB + 256 * 1024
    assert round_size(2 * MiB, settings) == 2 * MiB  # powers of two stay
    assert round_size(1500, settings) == 1536  # below 512 * divisions: plain rounding


@pytest.mark.parametrize(
    ("size", "segment"),
    [
        (512, 2 * MiB),
        (MiB, 2 * MiB),
        (MiB + 512, 20 * MiB),
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),
        (11 * MiB + 512, 12 * MiB),
    ],
)
def test_segment_sizes(size, segment):
    assert allocation_size(size) == segment


def test_small_pool_packs_blocks_into_one_2mib_segment():
    a = CachingAllocator()
    assert a.malloc(1000) == B
    assert a.malloc(1000) == B + 1024
    assert events(a) == [("segment_alloc", 0, 2 * MiB), ("alloc", 0, 1000), ("alloc", 1024, 1000)]
    (seg,) = a.segments_snapshot()
    assert seg["segment_type"] == "small"
    assert [(b["size"], b["state"]) for b in seg["blocks"]] == [
        (1024, "active_allocated"),
        (1024, "active_allocated"),
        (2 * MiB - 2048, "inactive"),
    ]
    assert seg["allocated_size"] == 2048 and seg["requested_size"] == 2000


def test_large_pool_splits_only_when_more_than_1mib_remains():
    a = CachingAllocator()
    a.malloc(3 * MiB)  # 20 MiB segment, 17 MiB remain: split
    assert a.malloc(3 * MiB) == B + 3 * MiB
    b = CachingAllocator()
    b.malloc(19 * MiB)  # exactly 1 MiB would remain: not split, the block keeps 20 MiB
    (seg,) = b.segments_snapshot()
    assert [(blk["size"], blk["requested_size"]) for blk in seg["blocks"]] == [(20 * MiB, 19 * MiB)]
    assert b.allocated == 20 * MiB


def test_small_pool_splits_down_to_512():
    a = CachingAllocator()
    a.malloc(MiB)
    a.malloc(MiB - 512 - 100)  # rounds to 1 MiB - 512: the last 512 bytes are split off
    (seg,) = a.segments_snapshot()
    assert [blk["size"] for blk in seg["blocks"]] == [MiB, MiB - 512, 512]
    assert a.malloc(400) == B + 2 * MiB - 512


def test_best_fit_reuse_and_coalescing_then_empty_cache():
    a = CachingAllocator()
    x = a.malloc(4 * MiB)
    y = a.malloc(2 * MiB)
    z = a.malloc(6 * MiB)
    w = a.malloc(2 * MiB)  # keeps z's neighbour allocated
    assert (x, y, z, w) == (B, B + 4 * MiB, B + 6 * MiB, B + 12 * MiB)
    a.free(x)
    a.free(z)
    # best fit: a 5 MiB request takes the 6 MiB hole (z), not the 4 MiB one nor the 6 MiB tail
    assert a.malloc(5 * MiB) == z
    a.free(z)
    a.free(y)  # merges with x before and z after: one 12 MiB free block
    (seg,) = a.segments_snapshot()
    assert [(blk["address"] - B, blk["size"], blk["state"]) for blk in seg["blocks"]] == [
        (0, 12 * MiB, "inactive"),
        (12 * MiB, 2 * MiB, "active_allocated"),
        (14 * MiB, 6 * MiB, "inactive"),
    ]
    a.empty_cache()  # partly used: kept
    assert a.reserved == 20 * MiB
    a.free(w)
    a.empty_cache()
    assert a.reserved == 0 and a.segments_snapshot() == []
    assert events(a)[-1] == ("segment_free", 0, 20 * MiB)


@pytest.mark.parametrize("descend", [False, True])
def test_equal_free_blocks_go_to_the_lowest_address(descend):
    """Best fit breaks a tie between free blocks of one size by address: with segments
    placed downward (a GPU's cudaMalloc, the simulation's allocator) the newest segment's
    block is reused and the older one stays cached whole; placed upward, the reverse."""
    a = CachingAllocator(addresses_descend=descend)
    old = a.malloc(36 * MiB)
    new = a.malloc(36 * MiB)
    assert new - old == (-36 if descend else 36) * MiB
    a.free(old)
    a.free(new)
    reused = a.malloc(24 * MiB)  # splits one 36 MiB block, leaving 12 MiB of it free
    assert reused == (new if descend else old)
    assert a.malloc(36 * MiB) == (old if descend else new)  # the other one, still whole
    assert a.reserved == 72 * MiB


def test_free_records_requested_then_completed_with_requested_size():
    a = CachingAllocator()
    p = a.malloc(1000)
    a.free(p)
    assert events(a)[-2:] == [("free_requested", 0, 1000), ("free_completed", 0, 1000)]


def test_streams_do_not_share_blocks():
    a = CachingAllocator()
    a.free(a.malloc(1000, stream=0))
    assert a.malloc(1000, stream=7) == B + 2 * MiB  # a new segment for stream 7
    assert a.segments_snapshot()[1]["stream"] == 7


def test_max_split_size_keeps_oversize_blocks_whole():
    a = CachingAllocator(settings=AllocatorSettings(max_split_size=20 * MiB))
    big = a.malloc(30 * MiB)
    a.free(big)
    # a small request may not take (or split) the oversize block
    assert a.malloc(12 * MiB) == B + 30 * MiB
    # an oversize request reuses it only within 20 MiB of waste, and does not split it
    assert a.malloc(26 * MiB) == big
    assert a.live[big].size == 30 * MiB
    assert AllocatorSettings.parse("max_split_size_mb:20").max_split_size == 20 * MiB


def test_expandable_segments_map_pages_and_unmap_on_empty_cache():
    a = CachingAllocator(settings=AllocatorSettings(expandable_segments=True))
    x = a.malloc(3 * MiB)
    y = a.malloc(18 * MiB)  # 17 MiB free at the end: map one more 20 MiB page
    assert (x, y) == (B, B + 3 * MiB)
    assert events(a) == [
        ("segment_map", 0, 20 * MiB),
        ("alloc", 0, 3 * MiB),
        ("segment_map", 20 * MiB, 20 * MiB),
        ("alloc", 3 * MiB, 18 * MiB),
    ]
    (seg,) = a.segments_snapshot()
    assert seg["is_expandable"] and seg["total_size"] == 40 * MiB
    a.free(y)
    a.empty_cache()  # the free tail from 3 MiB: pages from 20 MiB on are unmapped
    assert events(a)[-1] == ("segment_unmap", 20 * MiB, 20 * MiB)
    assert a.reserved == 20 * MiB
    a.free(x)
    a.empty_cache()
    assert events(a)[-1] == ("segment_unmap", 0, 20 * MiB) and a.reserved == 0


def test_oom_after_freeing_the_cache_fails():
    a = CachingAllocator(device_memory=30 * MiB)
    a.malloc(20 * MiB)
    with pytest.raises(SimulatedOOM) as err:
        a.malloc(12 * MiB)
    assert err.value.size == 12 * MiB and err.value.device_free == 10 * MiB
    assert a.trace[-1]["action"] == "oom"
    assert a.trace[-1]["device_free"] == 10 * MiB and a.trace[-1]["size"] == 12 * MiB


def test_oom_retry_releases_cached_segments_first():
    a = CachingAllocator(device_memory=30 * MiB)
    a.free(a.malloc(20 * MiB))
    assert a.malloc(24 * MiB) == B + 20 * MiB
    assert [e[0] for e in events(a)][-3:] == ["segment_free", "segment_alloc", "alloc"]


def test_settings_dict_matches_pytorch_keys():
    d = AllocatorSettings().as_snapshot_dict()
    assert d["max_split_size"] == -1 and d["expandable_segments"] is False
    assert list(d["roundup_power2_divisions"])[:3] == ["1", "2", "4"]


def test_parse_alloc_conf_with_a_divisions_list():
    s = AllocatorSettings.parse(
        "expandable_segments:True,roundup_power2_divisions:[1:1,256:2,>:4],max_split_size_mb:64"
    )
    assert s.expandable_segments and s.max_split_size == 64 * MiB
    assert s.roundup_power2_divisions[:8] == [1] * 8  # 1 MiB .. 128 MiB
    assert s.roundup_power2_divisions[8] == 2  # from 256 MiB
    assert s.roundup_power2_divisions[9:] == [4] * 7


def test_oom_retry_with_max_split_frees_an_oversize_block_first():
    a = CachingAllocator(
        device_memory=60 * MiB, settings=AllocatorSettings(max_split_size=20 * MiB)
    )
    a.free(a.malloc(30 * MiB))  # oversize, cached
    keep = a.malloc(3 * MiB)  # a 20 MiB segment that stays in use
    assert a.malloc(40 * MiB) == B + 50 * MiB  # 30 + 20 + 40 > 60: the 30 MiB goes back
    assert [e[0] for e in events(a)][-3:] == ["segment_free", "segment_alloc", "alloc"]
    assert a.live[keep].size == 3 * MiB
