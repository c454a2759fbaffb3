"""How `memlens simulate` runs the code: `-m MODULE`, stacks as a real run records them
(no memlens / click / runpy frames; the script under its absolute path), and
CUBLAS_WORKSPACE_CONFIG from the environment or set by the script (issue 21)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memlens.simulation.gpus import (  # noqa: E402
    HOPPER_WORKSPACE,
    OLDER_WORKSPACE,
    cublas_workspace_from_config,
)

MiB = 2**20
MAKE = """
import sys, torch
def make():
    return torch.empty(256, device="cuda")
x = make()
print(sys.argv)
"""


def simulate(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "-o", "out.pickle", *args],
        capture_output=True, text=True, cwd=cwd, timeout=300, env=env,
    )  # fmt: skip


def frames_of_first_alloc(path) -> list[tuple[str, int, str]]:
    trace = pickle.loads(path.read_bytes())["device_traces"][0]
    alloc = next(e for e in trace if e["action"] == "alloc")
    return [(f["filename"], f["line"], f["name"]) for f in alloc["frames"]]


def test_a_script_stack_ends_at_its_module_frame_under_its_absolute_path(tmp_path):
    (tmp_path / "train.py").write_text(MAKE)
    done = simulate(tmp_path, "train.py", "--lr", "1")
    assert done.returncode == 0, done.stderr
    assert "['train.py', '--lr', '1']" in done.stdout  # argv[0] as typed, as python sets it
    script = str(tmp_path / "train.py")
    # `python train.py` records exactly these two frames: nothing of memlens, click, runpy
    assert frames_of_first_alloc(tmp_path / "out.pickle") == [
        (script, 4, "make"),
        (script, 5, "<module>"),
    ]


def test_dash_m_runs_a_module_as_python_dash_m_does(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(MAKE)
    done = simulate(tmp_path, "-m", "pkg.train", "--lr", "1")
    assert done.returncode == 0, done.stderr
    module = str(tmp_path / "pkg" / "train.py")
    assert f"[{module!r}, '--lr', '1']" in done.stdout
    # `python -m pkg.train` records runpy's two frozen frames below the module's
    assert frames_of_first_alloc(tmp_path / "out.pickle") == [
        (module, 4, "make"),
        (module, 5, "<module>"),
        ("<frozen runpy>", 88, "_run_code"),
        ("<frozen runpy>", 198, "_run_module_as_main"),
    ]


def test_dash_m_with_no_such_module_is_one_line(tmp_path):
    done = simulate(tmp_path, "-m", "no_such_pkg_here.train")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "memlens: error: no module named 'no_such_pkg_here.train': "
        "No module named 'no_such_pkg_here'"
    )


@pytest.mark.parametrize(
    "config, expected",
    [
        (None, OLDER_WORKSPACE),  # the card's default (an A100 here)
        (":4096:8", 32 * MiB),
        (":4096:2:16:8", 4096 * 1024 * 2 + 16 * 1024 * 8),
        (":16:8", 128 * 1024),
        (":0:0", 0),
    ],
)
def test_cublas_workspace_config_is_read_as_pytorch_reads_it(config, expected):
    assert cublas_workspace_from_config(config, OLDER_WORKSPACE) == expected


def test_an_unreadable_cublas_workspace_config_warns_and_keeps_the_default():
    with pytest.warns(UserWarning, match="Could not parse CUBLAS_WORKSPACE_CONFIG"):
        assert cublas_workspace_from_config("4096:8", HOPPER_WORKSPACE) == HOPPER_WORKSPACE


MATMUL = """
import os, torch
{set_it}
a = torch.randn(16, 16, device="cuda")
a @ a
"""


@pytest.mark.parametrize("where", ["environment", "script"])
def test_cublas_workspace_config_sets_the_workspace(tmp_path, monkeypatch, where):
    set_it = 'os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"' if where == "script" else ""
    if where == "environment":
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    (tmp_path / "mm.py").write_text(MATMUL.format(set_it=set_it))
    done = simulate(tmp_path, "--gpu", "a100", "mm.py")
    assert done.returncode == 0, done.stderr
    sizes = [
        e["size"]
        for e in pickle.loads((tmp_path / "out.pickle").read_bytes())["device_traces"][0]
        if e["action"] == "alloc"
    ]
    assert sizes == [1024, 1024, 128 * 1024]  # a, a @ a, the workspace: 16 KiB x 8
    assert (
        "cuBLAS workspace 128.00 KiB per thread, from CUBLAS_WORKSPACE_CONFIG=:16:8" in done.stderr
    )
    if where == "environment":  # known before the run: the first line says it
        assert (
            "131,072 bytes (128.000 KiB) per thread (CUBLAS_WORKSPACE_CONFIG=:16:8)"
            in (done.stderr.splitlines()[0])
        )


def test_the_cublas_workspace_flag_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    (tmp_path / "mm.py").write_text(MATMUL.format(set_it=""))
    done = simulate(tmp_path, "--cublas-workspace", "1MiB", "mm.py")
    assert done.returncode == 0, done.stderr
    trace = pickle.loads((tmp_path / "out.pickle").read_bytes())["device_traces"][0]
    assert [e["size"] for e in trace if e["action"] == "alloc"][-1] == MiB
    assert "from CUBLAS_WORKSPACE_CONFIG" not in done.stderr


def test_stacks_under_the_python_api_keep_the_callers_frames():
    # memlens.simulate() in the user's own code: nothing is cut (no runpy runner)
    import memlens

    def inner() -> object:
        return torch.empty(256, device="cuda")

    with memlens.simulate() as sim:
        x = inner()
    assert sim.snapshot is not None
    names = [f["name"] for f in sim.snapshot["device_traces"][0][0]["frames"]]
    assert names[:2] == ["inner", "test_stacks_under_the_python_api_keep_the_callers_frames"]
    del x


def test_a_dataloader_with_workers_and_pinned_memory_runs(recwarn):
    # Workers crashed (fake batches cannot cross processes) and pin_memory warned that no
    # accelerator was found. Loading runs in the main process; the device sees the same.
    from torch.utils.data import DataLoader, TensorDataset

    import memlens

    with memlens.simulate(cublas_workspace=0) as sim:
        data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
        loader = DataLoader(data, batch_size=8, num_workers=2, pin_memory=True,
                            persistent_workers=True)  # fmt: skip
        shapes = []
        for _ in range(2):  # a persistent loader's second epoch resets its iterator
            for x, y in loader:
                assert not x.is_cuda
                xc, yc = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
                shapes.append((tuple(xc.shape), tuple(yc.shape)))
                del xc, yc
        assert loader.num_workers == 2  # what the code sees is unchanged
    assert shapes == [((8, 16), (8,))] * 16
    # each batch: x (8 x 16 x 4 B) and y (8 x 8 B), both 512-byte blocks, freed in turn
    assert sim.snapshot is not None
    allocs = [e["size"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert allocs == [512, 64] * 16
    assert any("DataLoader workers ran in the main process" in n for n in sim.notes)
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]


def test_a_workspace_size_set_by_the_script_applies_at_the_next_matmul():
    # torch.backends.cuda.cublas_workspace_size(n): a larger size replaces the handle's
    # workspace at its next GEMM (new one first, then the old one freed); smaller keeps it
    import memlens

    with memlens.simulate(gpu="a100") as sim:
        a = torch.randn(16, 16, device="cuda")
        a @ a
        assert torch.backends.cuda.cublas_workspace_size() == OLDER_WORKSPACE
        torch.backends.cuda.cublas_workspace_size(32 * MiB)
        a @ a
        torch.backends.cuda.cublas_workspace_size(MiB)
        a @ a
    assert sim.snapshot is not None
    trace = sim.snapshot["device_traces"][0]
    workspaces = [(e["action"], e["size"]) for e in trace if e["size"] >= OLDER_WORKSPACE
                  and e["action"] in ("alloc", "free_completed")]  # fmt: skip
    assert workspaces == [("alloc", OLDER_WORKSPACE), ("alloc", 32 * MiB),
                          ("free_completed", OLDER_WORKSPACE)]  # fmt: skip
