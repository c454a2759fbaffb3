"""Write the CSV of a named pipeline schedule's order, as torch's own schedule class computes it.

    python pipeline_schedule_csv.py SCHEDULE PP_RANKS STAGES MICROBATCHES FILE

torchtitan's `--parallelism.pipeline_parallel_schedule_csv FILE` runs torch's
`_PipelineScheduleRuntime` on a compute-only CSV (one row a pipeline rank, one action a
cell: "0F1" is stage 0's forward of microbatch 1, "2B0" stage 2's backward of microbatch
0, an empty cell an idle step); the runtime adds the sends, receives, unshards, reshards
and gradient reductions itself (`_PipelineScheduleRuntime._load_csv`). This builds the
named schedule (`get_schedule_class`, the lookup torchtitan uses) on placeholder stages,
on a single-process fake process group of PP_RANKS ranks (every rank's order is computed
on each), and writes its order with `_dump_csv(format="compute_only")`. Multi-stage
(looped) schedules only: stage s on PP rank s mod PP_RANKS, as torchtitan places them.
Single-stage schedules have no CSV of their own (`Schedule1F1B._get_pipeline_order`, a
picture for logs, names a third microbatch and a REDUCE_GRAD the compute-only format refuses).
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
from torch.testing._internal.distributed.fake_pg import FakeStore


def write(schedule: str, pp_ranks: int, stages: int, microbatches: int, path: str) -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=pp_ranks)
    cls = get_schedule_class(schedule)
    assert issubclass(cls, PipelineScheduleMulti), f"{schedule}: not a multi-stage schedule"
    mine = [
        PipelineStage(torch.nn.Linear(1, 1), s, stages, torch.device("cpu"))
        for s in range(0, stages, pp_ranks)
    ]

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return output.sum()

    cls(mine, n_microbatches=microbatches, loss_fn=loss)._dump_csv(path, format="compute_only")
    dist.destroy_process_group()


if __name__ == "__main__":
    name, ranks, total, mbs, out = sys.argv[1:]
    write(name, int(ranks), int(total), int(mbs), out)
