"""One size parser for every command (d1): a bare G is binary, GB decimal, GiB binary; a
fraction rounds to the nearest byte. Before, `check --max-peak 80G` meant 80 x 10^9 bytes
and `simulate --device-memory 80G` 80 x 2^30, and fractions rounded in one and truncated in
the other."""

from __future__ import annotations

import pickle

import pytest

import memlens
from memlens.cli.main import main
from memlens.errors import MemlensError
from memlens.units import parse_bytes
from snapshot_builders import ev

GiB = 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80G", 80 * GiB),
        ("80g", 80 * GiB),
        ("80GiB", 80 * GiB),
        ("80 gib", 80 * GiB),
        ("80GB", 80 * 10**9),
        ("1.5k", 1536),  # was 1500 in `check`
        ("1.5KB", 1500),
        ("0.3MiB", 314573),  # 314572.8: nearest byte (was truncated to 314572 in `simulate`)
        ("0.5", 1),  # a half rounds up
        ("2T", 2 * 2**40),
        ("4096", 4096),
        ("4096B", 4096),
        (4096, 4096),
    ],
)
def test_parse_bytes_convention(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["lots", "12XB", "-1G", "", "1.2.3G"])
def test_parse_bytes_refuses(text):
    with pytest.raises(MemlensError, match="cannot read the size"):
        parse_bytes(text)


def _exit_code(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_check_reads_80G_as_simulate_does(tmp_path):
    # one allocation of exactly 80 GiB: within `--max-peak 80G`, over `--max-peak 80GB`
    path = tmp_path / "80g.pickle"
    trace = [ev("segment_alloc", 0x1000000, 80 * GiB), ev("alloc", 0x1000000, 80 * GiB, 1)]
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    assert memlens.load(path).device(0).peak_active_bytes == 80 * GiB
    assert _exit_code(["check", str(path), "--max-peak", "80G"]) == 0
    assert _exit_code(["check", str(path), "--max-peak", "80GiB"]) == 0
    assert _exit_code(["check", str(path), "--max-peak", "80GB"]) == 1


def test_simulate_reads_80G_as_check_does():
    pytest.importorskip("torch")
    sim = memlens.simulate(None, device_memory="80G", cublas_workspace="0.3MiB")
    assert sim.allocator.device_memory == 80 * GiB
    assert sim.cublas_workspace == 314573
