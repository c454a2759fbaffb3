"""benchmarks/gpu_truth: the script that records ground truth on a GPU, run here end to end
without one (MEMLENS_GPU_TRUTH_FAKE=1: the fake capture backend records the "real" side, the
simulator the other), its helpers, and the tests that hold `memlens simulate` to a GPU run
committed under tests/data/gpu/ (they skip while there is none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from gpu_truth_data import (
    EXPLAINED,
    GPU_TRUTH,
    HELD,
    TruthCase,
    off_by_more,
    relative_error,
    resimulate,
    truth_cases,
)
from record_fake_backend import read_snapshot_file

import memlens
from shared_data import REPO_ROOT

sys.path.insert(0, str(GPU_TRUTH))
import truth  # noqa: E402
import truth_cases as spec  # noqa: E402

MiB = 2**20
STAGES = {"forward", "backward", "optimizer", "memlens.step"}
# what each capture API writes into the case's folder (the fake run and a GPU run alike)
FILES = {
    "cs336_train": {"step.pickle", "step.html"},
    "cs336_train_expandable": {"step.pickle", "step.html"},
    "cs336_forward": {"run.pickle", "run.html", "run.step000002.pickle"},
    "llama_trainer": {"memlens/steps1-1_rank0.pickle", "memlens/steps1-1_rank0.html"},
    "llama_compile": {"memlens/steps1-1_rank0.pickle", "memlens/steps1-1_rank0.html"},
}


# ---------------------------------------------------------------------- helpers, no run
@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"gpu": "NVIDIA H100 80GB HBM3", "capability": [9, 0], "free_memory_at_start": 5},
         ("h100", "5B")),
        ({"gpu": "NVIDIA H200", "capability": [9, 0], "free_memory_at_start": 7},
         ("hopper", "7B")),
        ({"gpu": "NVIDIA A100-SXM4-40GB", "capability": [8, 0]}, ("a100-40gb", None)),
        ({"gpu": "NVIDIA A100-SXM4-80GB", "capability": [8, 0]}, ("a100", None)),
        ({"gpu": "NVIDIA L4", "capability": [8, 9]}, ("ampere", None)),
    ],
)  # fmt: skip
def test_simulated_gpu_follows_the_detected_card(
    monkeypatch: pytest.MonkeyPatch, info: dict[str, Any], expected: tuple[str, str | None]
) -> None:
    monkeypatch.setattr(truth, "FAKE", False)
    assert truth.simulated_gpu(info)[:2] == expected


def test_errors_are_simulated_over_real_minus_one() -> None:
    real = {"peak_active": 100, "peak_reserved": 200, "baseline": 0, "events": 10}
    sim = {"peak_active": 102, "peak_reserved": 190, "baseline": 5, "events": 10}
    row = {"real": {"figures": real}, "sim": {"figures": sim}}
    assert truth.errors(row) == {
        "peak_active": 0.02,
        "peak_reserved": -0.05,
        "baseline": None,
        "events": 0.0,
    }
    assert truth.errors({"real": {}, "sim": {"figures": sim}}) == {}


def test_pack_fills_tars_real_first_and_names_what_does_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each file counts its size + 1024 against the limit: a 6024, b 6024, c 3024, d 21024
    monkeypatch.setattr(truth, "TAR_LIMIT", 10_000)
    monkeypatch.setattr(truth, "MAX_TARS", 2)
    run = truth.Run(tmp_path / "out", tmp_path / "work")
    run.out.mkdir()
    (run.work / "pack").mkdir(parents=True)
    sizes = {"sim-c": 2000, "real-a": 5000, "sim-d": 20_000, "real-b": 5000}
    for name, size in sizes.items():
        (run.work / "pack" / f"{name}.pickle.gz").write_bytes(b"x" * size)
    truth.pack(run)
    assert run.table["packed"] == {
        "recordings-1.tar": ["real-a.pickle.gz", "sim-c.pickle.gz"],
        "recordings-2.tar": ["real-b.pickle.gz"],
    }
    assert run.table["left_out"] == ["sim-d.pickle.gz (20000 bytes)"]
    with tarfile.open(run.out / "recordings-1.tar") as tar:
        assert tar.getnames() == ["real-a.pickle.gz", "sim-c.pickle.gz"]
        assert tar.extractfile("sim-c.pickle.gz").read() == b"x" * 2000  # type: ignore[union-attr]


def test_a_command_over_its_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    run = truth.Run(tmp_path / "out", tmp_path / "work")
    run.out.mkdir()
    # the child's own child would keep the pipe open if only the child were killed
    argv = ["bash", "-c", "sleep 30 & echo started; wait"]
    code, seconds = run.command("slow", argv, tmp_path, dict(os.environ), 2)
    assert code is None and 2 <= seconds < 10
    assert (run.work / "logs" / "slow.log").read_text() == "started\n"
    assert run.command("late", ["true"], tmp_path, dict(os.environ), 1.5) == (None, 0.0)
    run.save()
    log = (run.out / "run.log").read_text()
    assert "slow: killed after 2 s" in log and "late: skipped, out of time" in log


# ---------------------------------------------------------------------- the fake run
@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """run.sh with MEMLENS_GPU_TRUTH_FAKE=1, once for the module (about 50 s of CPU: seven
    simulations and six fake recordings, each a fresh interpreter)."""
    for needed in ("torch", "transformers", "einops", "einx", "jaxtyping"):
        pytest.importorskip(needed)
    base = tmp_path_factory.mktemp("gpu_truth")
    out, work = base / "out", base / "work"
    env = {
        **os.environ,
        "MEMLENS_GPU_TRUTH_FAKE": "1",
        "MEMLENS_GPU_TRUTH_WORK": str(work),
        "PYTHONPATH": str(REPO_ROOT / "src"),
        "MEMLENS_CACHE_DIR": str(base / "cache"),
    }
    env.pop("OUT", None)
    done = subprocess.run(
        ["bash", str(GPU_TRUTH / "run.sh"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, work, json.loads((out / "gpu_truth.json").read_text())


@pytest.mark.slow
def test_fake_run_writes_few_small_files(fake_run: tuple[Path, Path, dict[str, Any]]) -> None:
    out, _, table = fake_run
    names = sorted(p.name for p in out.iterdir())
    assert names == ["gpu_truth.json", "recordings-1.tar", "run.log"]
    assert all(p.stat().st_size < 16 * MiB for p in out.iterdir())
    assert table["schema"] == 1 and table["fake"] is True
    machine = table["machine"]
    assert machine["simulate_gpu"] == "h100" and machine["simulate_device_memory"] == "1GiB"
    assert {"torch", "python", "cuda", "transformers", "memlens_compiled_reader"} <= set(machine)
    assert list(table["cases"]) == [c.name for c in spec.CASES]
    for name, row in table["cases"].items():
        assert row["sim"]["ok"], name
        assert row["real"]["ok"] is (name != "cs336_unedited_train"), name
    unedited = table["cases"]["cs336_unedited_train"]
    assert unedited["real"]["note"] == "needs CUDA: fake run" and unedited["error"] == {}


@pytest.mark.slow
def test_fake_run_recordings_load_as_the_table_says(
    fake_run: tuple[Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _, table = fake_run
    with tarfile.open(out / "recordings-1.tar") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member)
            assert data is not None and "/" not in member.name
            (tmp_path / member.name).write_bytes(data.read())
    packed = sorted(p.name for p in tmp_path.iterdir())
    expected = sorted(
        row[side]["recording"]
        for row in table["cases"].values()
        for side in ("real", "sim")
        if "recording" in row[side]
    )
    assert packed == expected and len(packed) == 2 * len(spec.CASES) - 1
    for name, row in table["cases"].items():
        for side in ("real", "sim"):
            if "recording" not in row[side]:
                continue
            snap = memlens.load(tmp_path / row[side]["recording"], cache=False)
            figures = row[side]["figures"]
            assert snap.devices == figures["devices"], (name, side)
            if snap.devices:
                d = snap.device(0)
                got = (d.peak_active_bytes, d.peak_reserved_bytes, d.n_events)
                want = (figures["peak_active"], figures["peak_reserved"], figures["events"])
                assert got == want, (name, side)
        if "figures" in row["real"]:
            assert set(row["error"]) == set(truth.COMPARED)


@pytest.mark.slow
def test_fake_run_capture_files_are_what_each_api_writes(
    fake_run: tuple[Path, Path, dict[str, Any]],
) -> None:
    _, work, table = fake_run
    cases = table["cases"]
    for name, files in FILES.items():
        assert files <= set(cases[name]["real"]["files"]), name
        # inside the simulation memlens.record and the callback write the same files;
        # `memlens simulate -o` (the memlens run case's counterpart) writes no report
        sim_files = {"run.pickle"} if name == "cs336_forward" else files
        assert sim_files <= set(cases[name]["sim"]["files"]), name
    # the fake backend sees no CPU tensor: its snapshots hold only what it was told
    assert cases["cs336_train"]["real"]["figures"]["events"] == 0
    # the fake OOM: one `oom` entry, after 100 CPU chunks that never ran out
    real_oom = cases["oom"]["real"]
    assert real_oom["figures"]["events"] == 1 and real_oom["figures"]["oom_events"] == 1
    assert real_oom["snapshot"].startswith("oom/oom_pid") and real_oom["snapshot"].endswith(
        "_1.pickle"
    )
    # simulated 1 GiB: 64 chunks of 16 MiB fill it exactly (no matmul, no cuBLAS
    # workspace); the 65th fails and is dumped inside the failing allocation
    sim_oom = cases["oom"]["sim"]["figures"]
    assert sim_oom["peak_active"] == sim_oom["peak_reserved"] == 64 * 16 * MiB
    assert sim_oom["oom_events"] == 1
    for name in ("cs336_train", "llama_trainer", "llama_compile"):
        assert set(cases[name]["sim"]["figures"]["annotations"]) >= STAGES, name
    assert STAGES - {"backward", "optimizer"} <= set(
        cases["cs336_forward"]["sim"]["figures"]["annotations"]
    )
    for name, expandable in (("cs336_train", False), ("cs336_train_expandable", True)):
        raw = read_snapshot_file(work / "sim" / name / "step.pickle")
        assert raw["allocator_settings"]["expandable_segments"] is expandable
        assert {s["is_expandable"] for s in raw["segments"]} == {expandable}


# ---------------------------------------------------------------------- a GPU run, committed
def _cases() -> list[Any]:
    found = truth_cases()
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason="no GPU run in tests/data/gpu"))]
    return [pytest.param(c, id=c.id) for c in found]


def _held(case: TruthCase) -> None:
    if case.name in EXPLAINED:
        pytest.skip(f"{case.name}: {EXPLAINED[case.name]}")


@pytest.mark.parametrize("case", _cases())
def test_gpu_recordings_are_what_the_table_says(case: TruthCase) -> None:
    path = case.recording("real")
    assert path is not None, f"{case.id}: real recording missing beside gpu_truth.json"
    d = memlens.load(path, cache=False).device(0)
    figures = case.figures("real")
    assert figures is not None
    assert (d.peak_active_bytes, d.peak_reserved_bytes, d.n_events) == (
        figures["peak_active"],
        figures["peak_reserved"],
        figures["events"],
    )
    files = set(case.row["real"]["files"])
    assert FILES.get(case.name, set()) <= files
    if case.name == "oom":
        assert figures["oom_events"] == 1
    if case.name in ("cs336_train", "cs336_train_expandable", "llama_trainer"):
        assert set(figures["annotations"]) >= STAGES


@pytest.mark.parametrize("case", _cases())
def test_simulate_on_the_gpu_machine_within_2_percent(case: TruthCase) -> None:
    _held(case)
    sim, real = case.figures("sim"), case.figures("real")
    assert sim is not None and real is not None, f"{case.id}: no simulated figures"
    assert off_by_more(sim, real) == {}


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(
    not os.environ.get("MEMLENS_SLOW_SIMULATIONS"),
    reason="simulating the GPU sizes takes up to a minute a case: MEMLENS_SLOW_SIMULATIONS=1",
)
@pytest.mark.parametrize("case", _cases())
def test_simulate_here_within_2_percent(case: TruthCase, tmp_path: Path) -> None:
    """Today's simulator, run here, against the committed real recording."""
    _held(case)
    pytest.importorskip("torch")
    snapshot = resimulate(case, tmp_path)
    assert snapshot is not None, f"{case.id}: the simulation wrote no snapshot"
    d = memlens.load(snapshot, cache=False).device(0)
    sim = {"peak_active": d.peak_active_bytes, "peak_reserved": d.peak_reserved_bytes}
    real = case.figures("real")
    assert real is not None
    assert off_by_more(sim, real) == {}


def test_relative_error_and_the_tolerance() -> None:
    assert relative_error(102, 100) == pytest.approx(0.02)
    assert relative_error(0, 0) == 0.0 and relative_error(1, 0) == 1.0
    real = {"peak_active": 1000, "peak_reserved": 1000}
    assert off_by_more({"peak_active": 1020, "peak_reserved": 980}, real) == {}
    assert off_by_more({"peak_active": 1021, "peak_reserved": 1000}, real) == {
        "peak_active": "simulated 1,021 vs real 1,000 bytes"
    }
    assert HELD == ("peak_active", "peak_reserved")
