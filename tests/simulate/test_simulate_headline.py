"""What `memlens simulate` prints and writes when the script records its own window: the
headline is always the whole run's peak, every snapshot the script wrote is listed with
the window it holds, -o is the script's last one (or the whole run), and a failing script
still leaves the run up to the failure (issue 21)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402

MiB, GiB = 2**20, 2**30

# Blocks of 256 MiB and 1 GiB (each its own segment), the 1 GiB one freed; then history on,
# 512 MiB taken from the cached 1 GiB segment (split), and the snapshot saved the way
# PyTorch's blog post does it. Whole run: peak active 1.25 GiB (256 MiB + 1 GiB), reserved
# 1.25 GiB; the saved window holds one entry (the 512 MiB alloc), 0.75 GiB active.
BLOG = """
import pickle, torch
keep = torch.empty(2**26, device="cuda")        # 256 MiB
big = torch.empty(2**28, device="cuda")         # 1 GiB
del big
torch.cuda.memory._record_memory_history()
mid = torch.empty(2**27, device="cuda")         # 512 MiB
snap = torch.cuda.memory._snapshot()
with open("blog.pickle", "wb") as f:
    pickle.dump(snap, f)
torch.cuda.memory._record_memory_history(enabled=None)
"""


def simulate_cli(tmp_path, source: str, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "script.py").write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "-o", "out.pickle", *extra, "script.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip


def test_the_headline_is_the_whole_runs_peak_and_each_own_file_is_listed(tmp_path):
    done = simulate_cli(tmp_path, BLOG)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()[1:]
    assert lines == [
        # 7 entries: 2 x (segment_alloc, alloc), free_requested, free_completed, alloc; the
        # run ends where the script returns, `keep` and `mid` alive (issue 36)
        "memlens: whole run: predicted peak active 1.25 GiB, peak reserved 1.25 GiB, 7 events",
        "memlens: the script wrote 1 snapshot itself:",
        "memlens:   blog.pickle (pickle.dump(torch.cuda.memory._snapshot())): trace entry 7 "
        "of the run's 7, the state when written",
        "memlens: simulated snapshot written to out.pickle: the script's last snapshot "
        "(blog.pickle), the same window and state: predicted peak active 768.00 MiB, peak "
        "reserved 1.25 GiB, 1 event",
        "memlens: view it with: memlens view out.pickle",
    ]
    own = pickle.loads((tmp_path / "blog.pickle").read_bytes())
    assert pickle.loads((tmp_path / "out.pickle").read_bytes()) == own
    assert [(e["action"], e["size"]) for e in own["device_traces"][0]] == [("alloc", 512 * MiB)]


def test_whole_run_writes_every_entry_and_the_state_at_exit(tmp_path):
    done = simulate_cli(tmp_path, BLOG, "--whole-run")
    assert done.returncode == 0, done.stderr
    assert "out.pickle: the whole run, the state at exit" in done.stderr
    dev = memlens.load(tmp_path / "out.pickle").device(0)
    assert (dev.n_events, dev.peak_active_bytes, dev.peak_reserved_bytes) == (
        7, 1.25 * GiB, 1.25 * GiB,
    )  # fmt: skip
    # the state when the script returns: `keep` and `mid` alive, both segments reserved
    assert (dev.end_active_bytes, dev.end_reserved_bytes) == (0.75 * GiB, 1.25 * GiB)


def test_without_own_snapshots_the_output_is_the_whole_run_even_with_a_window(tmp_path):
    # history switched on late and never dumped: -o is still every entry (it was the
    # window with the state at exit, whose peak missed the 1 GiB)
    source = BLOG.replace('with open("blog.pickle", "wb") as f:\n    pickle.dump(snap, f)\n', "")
    done = simulate_cli(tmp_path, source)
    assert done.returncode == 0, done.stderr
    assert "the script wrote" not in done.stderr
    dev = memlens.load(tmp_path / "out.pickle").device(0)
    assert (dev.n_events, dev.peak_active_bytes) == (7, 1.25 * GiB)


def test_dump_snapshot_and_an_atomic_writer_are_followed_to_their_files(tmp_path, monkeypatch):
    # memlens.record writes through a temporary file renamed into place (os.replace)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.py").write_text(
        textwrap.dedent(
            """
            import memlens, torch
            a = torch.empty(2**18, device="cuda")          # 1 MiB: entries 1-2
            with memlens.record("rec.pickle", report=False):
                b = torch.empty(2**18, device="cuda")      # entry 3
            torch.cuda.memory._record_memory_history()
            c = torch.empty(2**18, device="cuda")          # entries 4-5 (a new segment)
            torch.cuda.memory._dump_snapshot("dump.pickle")
            """
        )
    )
    run = run_script("script.py", [], tmp_path / "out.pickle", cublas_workspace=0)
    got = [(str(o.path), o.how, o.first, o.stop, o.run_entries) for o in run.own]
    assert got == [
        ("rec.pickle", "pickle.dump(torch.cuda.memory._snapshot())", 2, 3, 3),
        ("dump.pickle", "torch.cuda.memory._dump_snapshot", 3, 5, 5),
    ]
    assert run.own_dump and run.snapshot is run.own[-1].snapshot
    assert (tmp_path / "out.pickle").read_bytes() == (tmp_path / "dump.pickle").read_bytes()
    assert not list(tmp_path.glob(".rec.pickle.*"))  # the temporary file was renamed


@pytest.mark.slow
def test_a_lightning_callback_window_is_listed_and_the_headline_is_the_whole_run(tmp_path):
    pytest.importorskip("lightning")
    (tmp_path / "script.py").write_text(
        textwrap.dedent(
            """
            import torch, lightning as L
            from memlens.integrations.lightning import MemlensCallback

            class M(L.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.net = torch.nn.Linear(256, 256)
                def training_step(self, batch, i):
                    return self.net(batch[0]).pow(2).mean()
                def configure_optimizers(self):
                    return torch.optim.AdamW(self.parameters())

            data = torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(torch.randn(64, 256)), batch_size=16)
            L.Trainer(max_steps=4, accelerator="gpu", devices=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir="pl",
                      callbacks=[MemlensCallback(record_steps=(2, 3), report=False)],
                      ).fit(M(), data)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "-o", "out.pickle", "script.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    window = tmp_path / "pl" / "memlens" / "steps2-3_rank0.pickle"
    lines = [line for line in done.stderr.splitlines() if line.startswith("memlens:")]
    whole = next(line for line in lines if line.startswith("memlens: whole run: "))
    listed = next(line for line in lines if "steps2-3_rank0.pickle (" in line)
    assert "trace entries " in listed and listed.endswith("the state when written")
    assert (tmp_path / "out.pickle").read_bytes() == pickle.dumps(
        pickle.loads(window.read_bytes()), protocol=4
    )
    # the headline counts every entry of the four steps, more than the window's two
    n_whole = int(whole.rsplit(", ", 1)[1].split()[0].replace(",", ""))
    assert n_whole > memlens.load(window).device(0).n_events
