"""The cases of the GPU ground-truth run (benchmarks/gpu_truth/run.sh) and the commands that
record and simulate each one. Kept apart from the orchestrator so that the tests that hold
`memlens simulate` to a committed run (tests/record/test_gpu_truth.py) build the very same
simulate command."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "cs336_medium"
CS336 = "cases/cs336.py"
LLAMA = "cases/llama_trainer.py"
# The unedited third-party script, as its README says to run it: from cs336_systems/ next to
# cs336_basics/, its own dump in ../results/.
UNEDITED_DIR = "cs336_systems"
UNEDITED_SNAPSHOT = "results/medium_512_training_memory_snapshot.pickle"

# ctx 512 is the issue's; the tiny sizes keep MEMLENS_GPU_TRUTH_FAKE=1 runs short on a CPU
CS336_TINY = (
    "--context-length", "32", "--d-model", "64", "--d-ff", "128", "--num-layers", "2",
    "--num-heads", "4", "--vocab-size", "100", "--warmup", "1",
)  # fmt: skip
LLAMA_TINY = (
    "--hidden", "64", "--intermediate", "128", "--layers", "2", "--heads", "4",
    "--kv-heads", "2", "--vocab", "100", "--seq", "32", "--batch-size", "2",
)  # fmt: skip
UNEDITED_ARGS = (
    "--context_length", "512", "--d_model", "1024", "--d_ff", "4096", "--num_layers", "24",
    "--num_heads", "16", "--model_name", "medium", "--autocast", "true",
    "--memory-profile", "true", "--pattern", "full-training-step",
)  # fmt: skip
UNEDITED_TINY = (
    "--context_length", "512", "--d_model", "64", "--d_ff", "128", "--num_layers", "2",
    "--num_heads", "4", "--vocab_size", "100", "--model_name", "medium", "--autocast", "true",
    "--memory-profile", "true", "--pattern", "full-training-step", "--warmup-steps", "1",
)  # fmt: skip


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    api: str  # the capture API that records the real side
    script: str  # relative to HERE
    args: tuple[str, ...] = ()
    fake_args: tuple[str, ...] = ()
    snapshot: str = "step.pickle"  # the file compared, relative to the case's folder
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = 150  # seconds, real side; the simulation gets sim_timeout
    sim_timeout: int = 300
    sim_may_fail: bool = False  # `memlens simulate` exits 1 when the script hit the OOM
    # the script calls torch.cuda unconditionally: the fake run (no CUDA) skips its real side
    needs_cuda: bool = False


CASES = (
    Case(
        "cs336_train",
        "cs336 medium, ctx 512, bf16 autocast: one training step after 2 warm-ups",
        "memlens.record",
        CS336,
        ("--pattern", "train"),
        ("--pattern", "train", *CS336_TINY),
    ),
    Case(
        "cs336_forward",
        "cs336 medium, ctx 512, bf16 autocast: inference_mode forwards, the whole run",
        "memlens run",
        CS336,
        ("--pattern", "forward"),
        ("--pattern", "forward", *CS336_TINY),
        snapshot="run.pickle",
    ),
    Case(
        "llama_trainer",
        "Llama-style 8 layers, d 1024, from a config: HF Trainer, SDPA, bf16, one step",
        "MemlensCallback (hf)",
        LLAMA,
        fake_args=LLAMA_TINY,
        snapshot="memlens/steps1-1_rank0.pickle",
        timeout=200,
    ),
    Case(
        "oom",
        "1 GiB chunks until CUDA runs out of memory",
        "memlens.dump_on_oom",
        "cases/oom.py",
        ("--chunk-mib", "1024"),
        ("--chunk-mib", "16", "--max-chunks", "100"),  # the fake side: CPU, never touched
        snapshot="oom/oom_pid*_1.pickle",
        sim_may_fail=True,
    ),
    Case(
        "cs336_train_expandable",
        "cs336_train with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "memlens.record",
        CS336,
        ("--pattern", "train"),
        ("--pattern", "train", *CS336_TINY),
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    ),
    Case(
        "cs336_unedited_train",
        "the third-party script unedited (5 warm-ups, its own _dump_snapshot)",
        "none: the script's own torch.cuda.memory._dump_snapshot",
        "workloads/cs336_medium/nsys_profile.py",
        UNEDITED_ARGS,
        UNEDITED_TINY,
        snapshot=UNEDITED_SNAPSHOT,
        needs_cuda=True,
    ),
    Case(
        "llama_compile",
        "llama_trainer under torch.compile (TrainingArguments(torch_compile=True))",
        "MemlensCallback (hf)",
        LLAMA,
        ("--compile",),
        (*LLAMA_TINY, "--compile", "--compile-backend", "eager"),
        snapshot="memlens/steps1-1_rank0.pickle",
        timeout=240,
    ),
)


def case_args(case: Case, fake: bool, folder: Path) -> list[str]:
    """The script's arguments; memlens.record/callback/OOM cases write into `folder`."""
    args = list(case.fake_args if fake else case.args)
    if case.api in ("memlens.record", "MemlensCallback (hf)", "memlens.dump_on_oom"):
        args += ["--out", str(folder)]
    return args


def prepare_folder(case: Case, folder: Path) -> tuple[Path, Path]:
    """Make the case's folder; returns (the script to run, the folder to run it in). The
    unedited script is copied into cs336_systems/ and writes ../results/ (must exist)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = HERE / case.script
    if case.script.startswith("workloads/"):
        (folder / "results").mkdir(exist_ok=True)
        (folder / UNEDITED_DIR).mkdir(exist_ok=True)
        copy = folder / UNEDITED_DIR / script.name
        copy.write_bytes(script.read_bytes())
        return copy, copy.parent
    return script, folder


def real_command(case: Case, fake: bool, folder: Path) -> tuple[list[str], Path]:
    script, cwd = prepare_folder(case, folder)
    args = case_args(case, fake, folder)
    if case.api == "memlens run":
        # --every-n-steps 2: a step snapshot as well (the script calls memlens.step() 3 times)
        run = [sys.executable, "-m", "memlens", "run", "--every-n-steps", "2"]
        run += ["--output", str(folder / case.snapshot)]
        return [*run, str(script), *args], cwd
    return [sys.executable, str(script), *args], cwd


def sim_command(
    case: Case, fake: bool, folder: Path, gpu: str, device_memory: str | None
) -> tuple[list[str], Path]:
    """`memlens simulate` of the same script. Its -o file is the whole run (or the script's
    own last dump); memlens.record and the callback write their files inside the
    simulation as on the GPU, so the compared file has the same name on both sides."""
    script, cwd = prepare_folder(case, folder)
    whole = folder / (case.snapshot if case.api == "memlens run" else "simulate-output.pickle")
    sim = [sys.executable, "-m", "memlens", "simulate", "--gpu", gpu, "-o", str(whole)]
    if device_memory:
        sim += ["--device-memory", device_memory]
    return [*sim, str(script), *case_args(case, fake, folder)], cwd


def case_env(case: Case, base: dict[str, str]) -> dict[str, str]:
    """`base` with the case's variables (the unedited script imports cs336_basics)."""
    env = {**base, **case.env}
    if case.script.startswith("workloads/"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(WORKLOAD), env.get("PYTHONPATH")]))
    return env


def find_snapshot(case: Case, folder: Path) -> Path | None:
    hits = sorted(folder.glob(case.snapshot))
    return hits[0] if hits else None
