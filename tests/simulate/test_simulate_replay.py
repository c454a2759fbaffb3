"""simulation.replay against the allocator model itself: a snapshot the model wrote, its
trace cut anywhere (as a recording started mid-run), replayed with the recorded settings,
gives back the recorded reserved bytes after every alloc and free and every address.

The cuts here reproduce exactly; not every cut does. A block older than the trace may hold
an unsplit tail of up to 1 MiB followed by free space, and the trace tells where the tail
ends only when it allocates in that space while the block lives. Over 388 cuts of 20
random recordings (5 settings, 4 seeds), 374 reproduced exactly; every shared GPU snapshot
does (tests/analysis/test_analysis_advise.py). A difference shows as mismatched events and
makes the advise finding an estimate."""

from __future__ import annotations

import random

import pytest

import memlens
from memlens.analysis.allocator_model import MB, AllocatorSettings, CachingAllocator
from memlens.analysis.allocator_replay import recorded_settings, replay


def simulated(settings: AllocatorSettings, n: int = 1500, seed: int = 1) -> CachingAllocator:
    """n random requests of every size class (small, 1-10 MiB, large), frees of random live
    blocks, and an occasional empty_cache."""
    rnd = random.Random(seed)
    a = CachingAllocator(None, settings, clock=iter(range(10**9)).__next__)
    live: list[int] = []
    for _ in range(n):
        if live and rnd.random() < 0.45:
            a.free(live.pop(rnd.randrange(len(live))))
        elif rnd.random() < 0.01:
            a.empty_cache()
        else:
            size = rnd.choice([rnd.randrange(1, 4096), rnd.randrange(1, 2 * MB),
                               rnd.randrange(MB, 30 * MB), rnd.randrange(10 * MB, 200 * MB)])  # fmt: skip
            live.append(a.malloc(size))
    return a


def cut(a: CachingAllocator, at: int, settings: AllocatorSettings) -> memlens.Snapshot:
    return memlens.load(
        {
            "segments": a.segments_snapshot(),
            "device_traces": [a.trace[at:]],
            "allocator_settings": settings.as_snapshot_dict(),
        }  # fmt: skip
    )


CONFS = ["", "expandable_segments:True", "roundup_power2_divisions:[256:1,>:8]",
         "expandable_segments:True,roundup_power2_divisions:4", "max_split_size_mb:64",
         "roundup_power2_divisions:4"]  # fmt: skip


@pytest.mark.parametrize("conf", CONFS)
@pytest.mark.parametrize("at", [0, 100, 333, 700])
def test_replay_gives_back_the_model_own_recording(conf, at):
    settings = AllocatorSettings.parse(conf)
    a = simulated(settings)
    dev = cut(a, at, settings).device(0)
    assert recorded_settings(dev.snapshot.allocator_settings) == settings
    r = replay(dev)
    assert (r.mismatches, r.moved) == (0, 0)
    assert r.compared > 1000
    assert r.peak_reserved == dev.peak_reserved_bytes
