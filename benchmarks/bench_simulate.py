"""Cost and accuracy of `memlens simulate` on every workload in ../shared.

    python benchmarks/bench_simulate.py                 # every case, markdown on stdout
    python benchmarks/bench_simulate.py --case wedson_training
    python benchmarks/bench_simulate.py --distributed      # issue 22: one rank of 64
    python benchmarks/bench_simulate.py --floor [--layers 4]  # issue 34: against meta tensors

Cases: the cs336 3.4B-parameter model rebuilt in tests/simulate/cs336_model.py (against
the cs336_* recordings), and the third-party script in ../shared/workloads/cs336_medium run
unedited with --gpu a100 (against the wedson_* recordings; its own dump is compared).
Each case runs in a fresh interpreter so that its wall time, CPU time and peak RSS are its
own. Recordings without a script to run are listed as such. Results are kept in
docs/benchmarks-simulate.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEMLENS_SHARED_SNAPSHOTS", ROOT.parent / "shared" / "snapshots"))
WORKLOAD = SHARED.parent / "workloads" / "cs336_medium"
MODEL = "--context_length 128 --d_model 1024 --d_ff 4096 --num_layers 24 --num_heads 16"
CS336 = {  # name -> (context, fullstep, mixed, recorded file)
    "ctx128_forward": (128, False, False, "cs336_memory_ctx128_forward.pickle"),
    "ctx128_forward_mixed": (128, False, True, "cs336_memory_ctx128_forward_mixed.pickle"),
    "ctx128_fullstep": (128, True, False, "cs336_memory_ctx128_fullstep.pickle"),
    "ctx256_fullstep": (256, True, False, "cs336_memory_ctx256_fullstep.pickle"),
    "ctx512_forward": (512, False, False, "cs336_memory_ctx512_forward.pickle"),
    # torch.compile(model), compiled inside the recorded window
    "ctx128_forward_compiled": (128, False, False, "cs336_compiled_ctx128_forward.pickle"),
}
WEDSON = {  # name -> (script, flags, recorded file)
    "wedson_training": (
        "nsys_profile.py",
        "--memory-profile true --pattern full-training-step",
        "wedson_medium_128_training.pickle",
    ),
    "wedson_inference": (
        "nsys_profile.py",
        "--memory-profile true --pattern forward-only",
        "wedson_medium_128_inference.pickle",
    ),
    "wedson_inference_nvtx": (
        "nsys_profile_annotated.py",
        "--memory-profiler pytorch --pattern forward-only",
        "wedson_medium_128_inference.pickle",
    ),
}
# Issue 22's cost: one rank of a world against the single-GPU simulation of the same
# model (tests/simulate/llama_script.py, a ~170M-parameter Llama-style config, one step).
LLAMA = "--vocab 32000 --dim 1024 --heads 16 --inter 2816 --layers 8 --batch 4 --seq 512"
DISTRIBUTED = {  # name -> (mode, world); rank 0 of the world is simulated
    "llama_single": ("single", 1),
    "llama_ddp_w64": ("ddp", 64),
    "llama_fsdp2_w8": ("fsdp2", 8),
    "llama_fsdp2_w64": ("fsdp2", 64),
    "llama_fsdp2_w512": ("fsdp2", 512),
}
# Issue 34's floor: the same model and steps on meta tensors (shape propagation alone), in a
# fresh interpreter like the simulation: the workload's model, its AdamW and cross-entropy,
# 5 warm-up steps and the recorded one of nsys_profile.py's full-training-step, batch 4.
META_RUN = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from cs336_basics.model import BasicsTransformerLM
from cs336_basics.nn_utils import cross_entropy
from cs336_basics.optimizer import AdamW
context, d_model, d_ff, layers, heads = map(int, sys.argv[2:7])
with torch.device("meta"):
    model = BasicsTransformerLM(vocab_size=10000, context_length=context, d_model=d_model,
                                num_layers=layers, num_heads=heads, d_ff=d_ff)
    optimizer = AdamW(model.parameters())
    x = torch.randint(0, 10000, (6, 4, context))
    y = torch.randint(0, 10000, (6, 4, context))
    for i in range(6):
        cross_entropy(model(x[i]), y[i]).backward()
        optimizer.step()
        optimizer.zero_grad()
"""
FLOOR_MODEL = (128, 1024, 4096, 16)  # context, d_model, d_ff, heads: the recordings' model
NOT_RUN = {
    "eor_nn_train.pickle": "no script in ../shared",
    "ftcourse_finetune.pickle": "no script in ../shared",
}


def figures(snapshot) -> dict:
    import memlens
    from memlens.analysis.peak import peak

    dev = memlens.load(snapshot).device(0)
    top = peak(dev, top=5, tree=False, largest=0)["by_site"]
    return {
        "events": dev.n_events,
        "baseline": dev.baseline_bytes,
        "peak_active": dev.peak_active_bytes,
        "peak_reserved": dev.peak_reserved_bytes,
        "end_reserved": dev.end_reserved_bytes,
        "top": [
            [
                f"{s['name']} ({Path(s['filename']).name}:{s['line']})"
                if s["filename"]
                else s["site"],
                s["bytes"],
            ]
            for s in top
        ],
    }


def run_case(name: str) -> dict:
    """Simulate one case in this process; returns its figures and the recording's."""
    import memlens

    start, cpu = time.perf_counter(), time.process_time()
    if name in CS336:
        sys.path.insert(0, str(ROOT / "tests" / "simulate"))
        from cs336_model import run

        context, fullstep, mixed, recorded = CS336[name]
        with memlens.simulate() as sim:
            keep = run(context, fullstep, mixed, compiled=name.endswith("_compiled"))
        del keep
        snapshot = sim.snapshot
    elif name in DISTRIBUTED:
        from memlens.simulation.api import run_script
        from memlens.simulation.distributed.env import World

        mode, world = DISTRIBUTED[name]
        os.environ.update(World(world).env(0))
        work = Path(tempfile.mkdtemp())
        args = ["--out", str(work / "marks.json"), "--mode", mode, *LLAMA.split()]
        script = ROOT / "tests" / "simulate" / "llama_script.py"
        snapshot = run_script(script, args, work / "out.pickle", cublas_workspace=0).snapshot
        recorded = ""
    else:
        from memlens.simulation.api import run_script

        script, flags, recorded = WEDSON[name]
        work = Path(tempfile.mkdtemp())
        shutil.copytree(WORKLOAD / "cs336_basics", work / "cs336_basics")
        shutil.copytree(WORKLOAD, work / "cs336_systems", ignore=shutil.ignore_patterns("cs336_*"))
        os.chdir(work / "cs336_systems")
        sys.path.insert(0, str(work))
        args = [*MODEL.split(), "--model_name", "sim", *flags.split()]
        snapshot = run_script(script, args, work / "out.pickle", gpu="a100").snapshot
    out = {
        "case": name,
        "seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(time.process_time() - cpu, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "sim": figures(snapshot),
    }
    if recorded and (SHARED / recorded).exists():
        out["real"] = figures(SHARED / recorded)
    return out


def pct(sim: int, real: int) -> str:
    return f"{100 * (sim - real) / real:+.3f} %" if real else "n/a"


def report(results: list[dict]) -> None:
    gib = 2**30
    print(
        "| case | wall s (CPU s) | peak RSS MiB | entries sim / real | peak active GiB (error) "
        "| peak reserved GiB (error) | baseline GiB (error) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        s, real = r["sim"], r.get("real")

        def cell(key: str, s: dict = s, real: dict | None = real) -> str:
            return f"{s[key] / gib:.3f}" + (f" ({pct(s[key], real[key])})" if real else "")

        events = f"{s['events']} / {real['events']}" if real else str(s["events"])
        print(
            f"| {r['case']} | {r['seconds']} ({r['cpu_seconds']}) | {r['max_rss_mib']} | {events} "
            f"| {cell('peak_active')} | {cell('peak_reserved')} | {cell('baseline')} |"
        )
    for name, why in NOT_RUN.items():
        print(f"| {name} | not simulated: {why} | | | | | |")
    print("\nTop 5 call sites at the peak (MiB), simulated | real:\n")
    for r in results:
        if "real" not in r:
            continue
        print(f"**{r['case']}**\n\n| simulated | MiB | real | MiB |\n|---|---|---|---|")
        for (a, x), (b, y) in zip(r["sim"]["top"], r["real"]["top"], strict=False):
            print(f"| {a} | {x / 2**20:.1f} | {b} | {y / 2**20:.1f} |")
        print()


def _child(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process, run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall


def floor(layers: int) -> None:
    """`memlens simulate` on the workload's script (whole process: imports, the run, the
    snapshot written and summarised) against the same model and steps on meta tensors."""
    work = Path(tempfile.mkdtemp())
    shutil.copytree(WORKLOAD / "cs336_basics", work / "cs336_basics")
    shutil.copytree(WORKLOAD, work / "cs336_systems", ignore=shutil.ignore_patterns("cs336_*"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(work)])}
    context, d_model, d_ff, heads = FLOOR_MODEL
    model = f"--context_length {context} --d_model {d_model} --d_ff {d_ff} --num_heads {heads}"
    flags = "--model_name sim --memory-profile true --pattern full-training-step"
    sim_cmd = [sys.executable, "-m", "memlens", "simulate", "--gpu", "a100", "-o",
               str(work / "out.pickle"), "nsys_profile.py", *model.split(),
               "--num_layers", str(layers), *flags.split()]  # fmt: skip
    meta_cmd = [sys.executable, "-c", META_RUN, str(work),
                *map(str, (context, d_model, d_ff, layers, heads))]  # fmt: skip
    load = os.getloadavg()[0]
    sim_cpu, sim_wall = _child(sim_cmd, work / "cs336_systems", env)
    meta_cpu, meta_wall = _child(meta_cmd, work, env)
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"torch {__import__('torch').__version__}, load average {load:.1f} -> "
        f"{os.getloadavg()[0]:.1f}\n\n"
        f"cs336 full-training-step, {layers} layers, 6 steps, whole processes:\n\n"
        "| run | CPU s | wall s |\n|---|---|---|\n"
        f"| memlens simulate | {sim_cpu:.1f} | {sim_wall:.1f} |\n"
        f"| meta tensors | {meta_cpu:.1f} | {meta_wall:.1f} |\n"
        f"| ratio | {sim_cpu / meta_cpu:.2f}x | {sim_wall / meta_wall:.2f}x |"
    )
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=[*CS336, *WEDSON, *DISTRIBUTED])
    parser.add_argument("--distributed", action="store_true", help="issue 22's cases alone")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--floor", action="store_true", help="simulate against the same steps on meta tensors"
    )
    parser.add_argument("--layers", type=int, default=4, help="--floor's model depth")
    args = parser.parse_args()
    if args.floor:
        floor(args.layers)
        return
    if args.case and args.json:
        print(json.dumps(run_case(args.case)))
        return
    results = []
    names = [*DISTRIBUTED] if args.distributed else [*CS336, *WEDSON, *DISTRIBUTED]
    for name in [args.case] if args.case else names:
        proc = subprocess.run(
            [sys.executable, __file__, "--case", name, "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"torch {__import__('torch').__version__}, load average {os.getloadavg()[0]:.1f}\n"
    )
    report(results)


if __name__ == "__main__":
    main()
