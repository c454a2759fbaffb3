"""`memlens advise SNAPSHOT --script 'SCRIPT ARGS'`: each finding that a what-if knob
answers, tested by simulating the script without and with that knob (`memlens plan
--what-if`'s machinery: one process per run, cached), its simulated saving printed beside
the finding's estimate.

  fragmentation  the best allocator setting of the replays   peak reserved
  oom            the allocator setting the replay fitted in   peak reserved
  attention      sdpa=efficient (fused SDPA, no (B,H,S,S))    peak active
  autocast       autocast=bf16                                 peak active
  weight_casts   autocast_cache=false (the script's autocast regions without their
                 cast cache: it tests the cache, not bf16 weights)  peak active
  sharding       fsdp2=N (N the finding's ranks: FSDP2 shards the parameters too, so its
                 saving exceeds the estimate by about (N-1)/N of them)  peak active
  checkpoint     checkpoint=CLASS, the class the finding read from the source, else
                 checkpoint=auto (the script's largest repeated module class)
  leak           no knob: a leak is a code fix

The simulation is of the script as it runs now (its own arguments, the card of `gpu`),
not of the recording: the two baselines differ when the snapshot came from elsewhere.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from memlens.analysis.results import AdviceCheck, AdviceReplay, AdviseResult, Finding
from memlens.errors import MemlensError
from memlens.planning.plan import Setup, plan
from memlens.planning.results import PlanKnobRow

AUTO_CHECKPOINT = "checkpoint=auto"
NO_KNOB = {"leak": "no knob: memory kept alive between steps is a change to the code"}


def knob_for(finding: Finding) -> tuple[str | None, str, str]:
    """(the what-if that tests `finding`, the peak its bytes are of, why none). The finding
    names its knob; a checkpoint finding whose class the source did not name is tested on
    the script's largest repeated module class (checkpoint=auto, as fsdp2= picks its units)."""
    compared = "reserved" if finding["kind"] in ("fragmentation", "oom") else "active"
    if finding["knob"] is not None:
        return finding["knob"], compared, ""
    if finding["kind"] == "checkpoint":
        return AUTO_CHECKPOINT, compared, ""
    if finding["kind"] == "oom":
        return None, compared, "no knob: no allocator setting fitted the OOM in the replay"
    return None, compared, NO_KNOB.get(finding["kind"], "no knob tests this finding")


def split_script(script: str) -> tuple[str, list[str]]:
    """`--script 'train.py --batch-size 8'` -> ("train.py", ["--batch-size", "8"])."""
    try:
        words = shlex.split(script)
    except ValueError as exc:
        raise MemlensError(f"--script {script!r}: {exc}") from None
    if not words:
        raise MemlensError("--script needs a script: --script 'train.py ARGS'")
    return words[0], words[1:]


def verify(
    result: AdviseResult,
    replays: Sequence[AdviceReplay],
    script: str,
    gpu: str | None = None,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> list[AdviceCheck]:
    """One check per finding, the knobs simulated in one plan (baseline once)."""
    path, args = split_script(script)
    wanted = [(i, f, *knob_for(f)) for i, f in enumerate(result["findings"])]
    knobs = list(dict.fromkeys(k for _, _, k, _, _ in wanted if k is not None))
    rows: dict[str, PlanKnobRow] = {}
    baseline = {"reserved": 0, "active": 0}
    if knobs:
        done = plan(
            path, args, setup=Setup.of(gpu, None, None), jobs=jobs, progress=progress, knobs=knobs
        )
        table = done["knob_table"]
        assert table is not None  # knobs were given
        rows = {r["setting"]: r for r in table["rows"]}
        baseline = {
            "reserved": table["baseline_peak_reserved_bytes"],
            "active": table["baseline_peak_active_bytes"],
        }
        # allocator settings come back as given to PYTORCH_CUDA_ALLOC_CONF
        for k, w in zip(knobs, done["what_ifs"], strict=True):
            rows.setdefault(k, rows[w["setting"]])
    out: list[AdviceCheck] = []
    for i, finding, knob, compared, why in wanted:
        row = rows.get(knob) if knob is not None else None
        saving: int | None = None
        note = why
        if row is not None:
            if row["error"] is not None:
                note = f"the simulation failed: {row['error']}"
            else:
                saving = row[f"{compared}_saving_bytes"]  # type: ignore[literal-required]
                note = "the simulated run ran out of the card's memory" if row["oom"] else ""
                if any(": not applied:" in a for a in row["applied"]):
                    note = "the knob did not apply to this script: the estimate is untested"
        out.append(
            {
                "finding": i,
                "kind": finding["kind"],
                "knob": knob,
                "compared": compared,
                "predicted_bytes": finding["bytes"],
                "simulated_saving_bytes": saving,
                "simulated_baseline_bytes": baseline[compared] if row is not None else None,
                "applied": row["applied"] if row is not None else [],
                "note": note,
            }
        )
    return out
