"""Record every case of truth_cases.py on the GPU with memlens's capture API, simulate the
same scripts with `memlens simulate --gpu <this card>`, and write the comparison.

    python benchmarks/gpu_truth/truth.py OUTDIR        # run.sh calls this; see README.md

OUTDIR receives at most 8 files: gpu_truth.json (the table, rewritten after every case),
run.log (every command with its output) and recordings-N.tar (the compared snapshots,
gzip, real and simulated, packed into tars of at most 15 MiB).

Each side of each case is its own process in its own session, killed at its time limit;
a case that fails or times out is reported and the others go on. The real sides run one
after another (one GPU); the simulations run meanwhile on the CPUs, with the GPU hidden
(CUDA_VISIBLE_DEVICES=""), as on the machines `memlens simulate` is for.
MEMLENS_GPU_TRUTH_FAKE=1: no GPU; the real side records through the tests' fake capture
backend (tests/record/record_fake_backend.py), tiny sizes, CPU tensors.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "benchmarks")]

from truth_cases import (  # noqa: E402
    CASES,
    Case,
    case_env,
    find_snapshot,
    real_command,
    sim_command,
)

from bench_simulate import figures  # noqa: E402

FAKE = os.environ.get("MEMLENS_GPU_TRUTH_FAKE") == "1"
BUDGET = float(os.environ.get("MEMLENS_GPU_TRUTH_BUDGET", "300"))  # seconds for all cases
TAR_LIMIT = 15 * 2**20  # the device tool brings back files of up to 16 MiB
MAX_TARS = 6  # + gpu_truth.json + run.log = the tool's 8 files
LOG_TAIL = 256 * 1024  # bytes of each command's output kept in run.log
FAKE_BACKEND = "record_fake_backend:FakeBackend"
COMPARED = ("peak_active", "peak_reserved", "baseline", "events")


class Run:
    """One gpu_truth run: its folders, its clock, its log and its table."""

    def __init__(self, out: Path, work: Path) -> None:
        self.out, self.work = out, work
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.log_parts: list[str] = []
        self.reals_done = threading.Event()
        self.pack_lock = threading.Lock()
        self.table: dict[str, Any] = {
            "schema": 1,
            "fake": FAKE,
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": BUDGET,
            "machine": {},
            "cases": {},
        }
        base = dict(os.environ)
        base.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        base["MEMLENS_CACHE_DIR"] = str(work / "cache")
        if FAKE:
            base["MEMLENS_RECORD_BACKEND"] = FAKE_BACKEND
            base["PYTHONPATH"] = os.pathsep.join(
                filter(None, [str(ROOT / "tests" / "record"), base.get("PYTHONPATH")])
            )
        self.env = base

    def left(self) -> float:
        return BUDGET - (time.monotonic() - self.start)

    def say(self, message: str) -> None:
        line = f"[{time.monotonic() - self.start:6.1f}s] {message}"
        print(line, flush=True)
        with self.lock:
            self.log_parts.append(line + "\n")

    def command(self, tag: str, argv: list[str], cwd: Path, env: dict[str, str], limit: float):
        """Run argv in its own session, killed after `limit` seconds; its output goes to
        the log. Returns (exit code or None when killed, seconds)."""
        if limit < 2:
            self.say(f"{tag}: skipped, out of time")
            return None, 0.0
        log = self.work / "logs" / f"{tag}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                code: int | None = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        seconds = round(time.monotonic() - began, 1)
        output = log.read_bytes()[-LOG_TAIL:].decode("utf-8", "replace")
        status = f"exit {code}" if code is not None else f"killed after {limit:.0f} s"
        self.say(f"{tag}: {status} in {seconds} s")
        with self.lock:
            self.log_parts.append(f"===== {tag}: {' '.join(argv)}\n(cwd {cwd})\n{output}\n")
        return code, seconds

    def save(self) -> None:
        with self.lock:
            self.table["seconds"] = round(time.monotonic() - self.start, 1)
            text = json.dumps(self.table, indent=1)
            (self.out / "gpu_truth.json").write_text(text + "\n")
            (self.out / "run.log").write_text("".join(self.log_parts))


def probe(run: Run) -> dict[str, Any]:
    """The card and the software, from a process of its own (the orchestrator never takes
    a CUDA context: it would take memory from the cases)."""
    code = r"""
import json, platform, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "cuda_available": torch.cuda.is_available()}
try:
    import transformers; info["transformers"] = transformers.__version__
except Exception as exc: info["transformers"] = f"not importable: {exc}"
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    info.update(gpu=p.name, capability=list(torch.cuda.get_device_capability(0)),
                multiprocessors=p.multi_processor_count, total_memory=total,
                free_memory_at_start=free, cudnn=torch.backends.cudnn.version())
    try:  # the driver, also where nvidia-smi is not on the PATH
        import pynvml; pynvml.nvmlInit()
        info["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
    except Exception as exc: info["driver"] = f"unknown: {exc}"
print(json.dumps(info))
"""
    env = run.env if not FAKE else {**run.env, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    info: dict[str, Any] = {"platform": platform.platform()}
    try:
        info.update(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        info["probe_error"] = done.stderr[-2000:]
    smi = shutil.which("nvidia-smi")
    if smi and not FAKE:
        query = [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        got = subprocess.run(query, capture_output=True, text=True, timeout=30)
        info["nvidia_smi"] = got.stdout.strip()
        if "," in got.stdout:
            info["driver"] = got.stdout.split(",")[1].strip()
    info["memlens_compiled_reader"] = compiled_reader()
    info["memlens_commit"] = git_commit()
    return info


def compiled_reader() -> str:
    from memlens.snapshot.read import compiled

    return "compiled" if compiled.available() else "python (the C extension is not built)"


def git_commit() -> str | None:
    try:
        got = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return got.stdout.strip() or None


def simulated_gpu(info: dict[str, Any]) -> tuple[str, str | None, str]:
    """`--gpu` and `--device-memory` for this card, and why. The simulator's presets name
    the card's kind; the memory it may use is what this card had free after CUDA's context
    (a fresh process's view, as each case is a fresh process)."""
    name = str(info.get("gpu", "")).upper()
    major = (info.get("capability") or [9])[0]
    if "H100" in name:
        key, why = "h100", "detected an H100"
    elif "A100" in name:
        key, why = ("a100-40gb" if "40GB" in name else "a100"), "detected an A100"
    elif major >= 9:
        key, why = "hopper", f"no preset for {name or 'this card'}: its generation, Hopper"
    else:
        key, why = {8: "ampere", 7: "volta"}.get(major, "h100"), f"generation of {name}"
    if FAKE:
        return "h100", "1GiB", "fake run: no GPU, the default preset and 1 GiB"
    free = info.get("free_memory_at_start")
    return key, (f"{free}B" if free else None), why


def guarded(run: Run, case: Case, side: str, step: Any, *args: Any) -> None:
    """Run one side of one case; a fault of this script there is that side's result, not
    the end of the run."""
    try:
        step(run, case, *args)
    except Exception as exc:
        run.say(f"{case.name}.{side}: orchestrator error {type(exc).__name__}: {exc}")
        with run.lock:
            run.table["cases"][case.name][side] = {"ok": False, "orchestrator_error": repr(exc)}
        run.save()


def simulate_case(run: Run, case: Case, gpu: str, memory: str | None) -> None:
    """`memlens simulate` with the GPU hidden; on a GPU machine a failure is retried once
    with the GPU visible, after the real sides are done (so that it cannot take memory
    from them), which tells a simulator problem from one of hiding the card."""
    folder = run.work / "sim" / case.name
    argv, cwd = sim_command(case, FAKE, folder, gpu, memory)
    env = case_env(case, {**run.env, "CUDA_VISIBLE_DEVICES": ""})
    env.pop("MEMLENS_RECORD_BACKEND", None)
    tag = f"{case.name}.sim"
    code, seconds = run.command(tag, argv, cwd, env, min(case.sim_timeout, run.left()))
    ok = code == 0 or (case.sim_may_fail and code == 1)
    note = None
    if not ok and not FAKE:
        run.reals_done.wait()
        shutil.rmtree(folder, ignore_errors=True)
        argv, cwd = sim_command(case, FAKE, folder, gpu, memory)
        env.pop("CUDA_VISIBLE_DEVICES")
        first = f"exit {code} with CUDA_VISIBLE_DEVICES='' in {seconds} s"
        code, seconds = run.command(f"{tag}-gpu-visible", argv, cwd, env, run.left())
        ok = code == 0 or (case.sim_may_fail and code == 1)
        note = f"{first}; retried with the GPU visible"
    side_result(run, case, "sim", folder, code, seconds, ok, note=note)


def record_case(run: Run, case: Case) -> None:
    folder = run.work / "real" / case.name
    if FAKE and case.needs_cuda:
        run.say(f"{case.name}.real: not run: the script needs CUDA and this is a fake run")
        side_result(run, case, "real", folder, None, 0.0, False, note="needs CUDA: fake run")
        return
    argv, cwd = real_command(case, FAKE, folder)
    env = case_env(case, run.env)
    code, seconds = run.command(f"{case.name}.real", argv, cwd, env, min(case.timeout, run.left()))
    side_result(run, case, "real", folder, code, seconds, code == 0)


def side_result(
    run: Run,
    case: Case,
    side: str,
    folder: Path,
    code: int | None,
    seconds: float,
    ok: bool,
    note: str | None = None,
) -> None:
    entry: dict[str, Any] = {"exit_code": code, "seconds": seconds, "ok": ok}
    if note:
        entry["note"] = note
    entry["files"] = {
        str(p.relative_to(folder)): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "trainer" not in p.relative_to(folder).parts
    }
    snapshot = find_snapshot(case, folder)
    if snapshot is not None:
        entry["snapshot"] = str(snapshot.relative_to(folder))
        try:
            entry["figures"] = snapshot_figures(snapshot)
            packed = run.work / "pack" / f"{side}-{case.name}.pickle.gz"
            packed.parent.mkdir(exist_ok=True)
            with open(snapshot, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
            entry["recording"] = packed.name
        except Exception as exc:
            entry["load_error"] = f"{type(exc).__name__}: {exc}"
    with run.lock:
        row = run.table["cases"][case.name]
        row[side] = entry
        if "real" in row and "sim" in row:
            row["error"] = errors(row)
    # packed as it goes: a run cut short still brings back what it recorded
    with run.pack_lock:
        pack(run)
    run.save()


def snapshot_figures(path: Path) -> dict[str, Any]:
    import memlens

    out: dict[str, Any] = figures(path)
    snap = memlens.load(path, cache=False)
    dev = snap.device(0) if snap.devices else None
    out["oom_events"] = len(dev.events_of("oom")) if dev is not None else 0
    names = {snap.string(int(i)) for i in snap.annotations.name}
    out["annotations"] = sorted({n.split("#")[0] for n in names})
    out["devices"] = snap.devices
    return out


def errors(row: dict[str, Any]) -> dict[str, float | None]:
    """simulated / real - 1 for each compared figure (None where the real one is 0)."""
    real, sim = row["real"].get("figures"), row["sim"].get("figures")
    if not real or not sim:
        return {}
    return {k: round(sim[k] / real[k] - 1, 6) if real[k] else None for k in COMPARED}


def pack(run: Run) -> None:
    """The compressed recordings into at most MAX_TARS tars of TAR_LIMIT bytes, real ones
    first; what does not fit is named in the table."""
    files = sorted((run.work / "pack").glob("*.gz"), key=lambda p: (p.name[:4] != "real", p.name))
    bins: list[list[Path]] = []
    left_out = []
    for f in files:
        size = f.stat().st_size + 1024
        target = next(
            (b for b in bins if sum(x.stat().st_size + 1024 for x in b) + size <= TAR_LIMIT), None
        )
        if target is None and len(bins) < MAX_TARS and size <= TAR_LIMIT:
            target = []
            bins.append(target)
        if target is None:
            left_out.append(f"{f.name} ({f.stat().st_size} bytes)")
            continue
        target.append(f)
    for n, members in enumerate(bins, 1):
        partial = run.out / f".recordings-{n}.tar.partial"
        with tarfile.open(partial, "w") as tar:
            for f in members:
                tar.add(f, arcname=f.name)
        partial.replace(run.out / f"recordings-{n}.tar")
    for stale in run.out.glob("recordings-*.tar"):
        if stale.name not in {f"recordings-{n}.tar" for n in range(1, len(bins) + 1)}:
            stale.unlink()
    with run.lock:
        run.table["packed"] = {
            f"recordings-{n}.tar": [f.name for f in b] for n, b in enumerate(bins, 1)
        }
        run.table["left_out"] = left_out


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: truth.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work_env = os.environ.get("MEMLENS_GPU_TRUTH_WORK")
    work = Path(work_env) if work_env else Path(tempfile.mkdtemp(prefix="memlens-gpu-truth-"))
    work.mkdir(parents=True, exist_ok=True)
    run = Run(out, work)
    only = os.environ.get("MEMLENS_GPU_TRUTH_CASES")
    cases = [c for c in CASES if not only or c.name in only.split(",")]
    run.say(f"work folder {work}; {len(cases)} cases; fake={FAKE}; budget {BUDGET:.0f} s")
    run.table["cases"] = {c.name: {"what": c.what, "api": c.api} for c in cases}
    info = probe(run)
    gpu, memory, why = simulated_gpu(info)
    info.update(simulate_gpu=gpu, simulate_device_memory=memory, simulate_gpu_why=why)
    run.table["machine"] = info
    run.say(f"machine: {json.dumps(info)}")
    if not FAKE and not info.get("cuda_available"):
        run.say("no CUDA device: nothing to record (MEMLENS_GPU_TRUTH_FAKE=1 for a dry run)")
        run.save()
        return 1
    jobs = int(
        os.environ.get(
            "MEMLENS_GPU_TRUTH_JOBS", max(1, min(len(cases), (os.cpu_count() or 2) // 2))
        )
    )
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        sims: list[Future[None]] = [
            pool.submit(guarded, run, c, "sim", simulate_case, gpu, memory) for c in cases
        ]
        try:
            for case in cases:
                guarded(run, case, "real", record_case)
        finally:
            run.reals_done.set()
        for f in sims:
            f.result()
    with run.pack_lock:
        pack(run)
    run.save()
    rows = run.table["cases"]
    run.say("done: " + json.dumps({name: row.get("error", {}) for name, row in rows.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
