"""SimulateConfig: the one place simulate's settings are written, and every way in to it
(keywords, config=, the command line's options, the notebook magic's) ends in the same one."""

from __future__ import annotations

import inspect

import pytest

from memlens.errors import MemlensError
from memlens.simulation.config import SimulateConfig


def test_defaults_resolve_to_an_unlimited_h100() -> None:
    config = SimulateConfig()
    assert config.card().name.startswith("NVIDIA H100")
    assert config.device_memory_bytes() is None  # unlimited without gpu=
    assert config.cublas_workspace_bytes() is None  # decided at the first GEMM


def test_gpu_sets_the_memory_and_device_memory_overrides_it() -> None:
    assert SimulateConfig(gpu="t4").device_memory_bytes() == SimulateConfig(gpu="t4").card().memory
    assert SimulateConfig(gpu="t4", device_memory="2GiB").device_memory_bytes() == 2 * 2**30
    assert SimulateConfig(cublas_workspace="1MiB").cublas_workspace_bytes() == 2**20


def test_keyword_options_override_alloc_conf() -> None:
    config = SimulateConfig(
        alloc_conf="max_split_size_mb:64,expandable_segments:True",
        expandable_segments=False,
        roundup_power2_divisions=4,
    )
    settings = config.allocator_settings()
    assert settings.max_split_size == 64 * 2**20  # from the string
    assert settings.expandable_segments is False  # the keyword wins
    assert settings.roundup_power2_divisions == [4] * 16
    assert config.allocator_conf() == "max_split_size_mb:64,expandable_segments:True"


def test_alloc_conf_defaults_to_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:20")
    assert SimulateConfig().allocator_settings().max_split_size == 20 * 2**20


def test_bad_values_fail_at_construction() -> None:
    with pytest.raises(MemlensError, match="stacks must be"):
        SimulateConfig(stacks="cpp")
    with pytest.raises(MemlensError, match="unknown GPU 'x'"):
        SimulateConfig(gpu="x")
    with pytest.raises(MemlensError):
        SimulateConfig(device_memory="lots")
    assert SimulateConfig(stacks="none").stacks is None  # the command line's spelling


def test_of_and_pick() -> None:
    base = SimulateConfig(gpu="a100", max_entries=9)
    assert SimulateConfig.of(base, {"max_entries": 3}) == SimulateConfig(gpu="a100", max_entries=3)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['stack'\]"):
        SimulateConfig.of(None, {"stack": None})
    picked = SimulateConfig.pick({"device_memory": "1GiB", "no_show": True, "output": None})
    assert picked == SimulateConfig(device_memory="1GiB")


def test_simulate_shows_the_fields_as_keywords() -> None:
    from memlens.simulation.api import simulate

    params = inspect.signature(simulate).parameters
    assert list(params)[:2] == ["output", "config"]
    assert params["gpu"].default is None and params["nvtx_annotations"].default is True
    assert len(params) == 2 + 12


@pytest.mark.torch
def test_keywords_and_config_give_the_same_simulation() -> None:
    pytest.importorskip("torch")
    from memlens.simulation.api import simulate

    by_keywords = simulate(gpu="t4", max_entries=5, early_stacks=True, cublas_workspace=0)
    config = SimulateConfig(gpu="t4", max_entries=5, early_stacks=True, cublas_workspace=0)
    by_config = simulate(config=config)
    for sim in (by_keywords, by_config):
        assert sim.allocator.device_memory == config.card().memory
        assert (sim.max_entries, sim.early_stacks, sim.cublas_workspace) == (5, True, 0)
    assert by_keywords.allocator.device_memory == by_config.allocator.device_memory
    assert by_keywords.config == by_config.config
    # keywords override config=
    mixed = simulate(config=SimulateConfig(gpu="t4"), gpu="a100")
    assert mixed.gpu.name == SimulateConfig(gpu="a100").card().name
    with pytest.raises(TypeError):
        simulate(stack=None)
