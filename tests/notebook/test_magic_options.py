"""`%%memlens simulate`'s options are SimulateConfig's fields (no kernel needed): the same
names and the same defaults as `memlens.simulate`, and the CLI's escaped error line."""

from __future__ import annotations

import dataclasses

import pytest

from memlens.simulation.config import SimulateConfig

pytest.importorskip("IPython")
from memlens.notebook import magics  # noqa: E402 - needs IPython


def simulate_config(*words: str) -> SimulateConfig:
    return SimulateConfig.pick(vars(magics.SIMULATE.parse_args(list(words))))


def test_simulate_options_are_the_config_fields_with_their_defaults():
    flags = {a.dest for a in magics.SIMULATE._actions} - {"help", "output", "no_show"}
    assert flags == {f.name for f in dataclasses.fields(SimulateConfig)}
    # nothing given: SimulateConfig's own defaults (the cuBLAS workspace is decided at the
    # first GEMM from $CUBLAS_WORKSPACE_CONFIG or the card, not a fixed 32MiB)
    assert simulate_config() == SimulateConfig()
    assert simulate_config().cublas_workspace is None
    given = simulate_config(
        "--device-memory", "24GiB", "--cublas-workspace", "0", "--expandable-segments",
        "--max-split-size-mb", "256", "--no-nvtx-annotations", "--gpu", "a100",
    )  # fmt: skip
    assert given == SimulateConfig(
        device_memory="24GiB", cublas_workspace="0", expandable_segments=True,
        max_split_size_mb=256, nvtx_annotations=False, gpu="a100",
    )  # fmt: skip
    with pytest.raises(magics.MagicError, match="--max-split-size-mb: invalid int value"):
        magics.SIMULATE.parse_args(["--max-split-size-mb", "lots"])


def test_the_magics_error_line_is_the_clis_escaped():
    line = magics.MagicError("no such file: evil\x1b[2J.pickle")._render_traceback_()
    assert line == ["memlens: error: no such file: evil\\x1b[2J.pickle"]
