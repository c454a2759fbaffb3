"""Run CUDA out of memory under `memlens.dump_on_oom`: fixed-size chunks until the card is
full. The snapshot lands in DIR/oom/oom_pid<PID>_1.pickle, taken inside the failing
allocation; the script catches the error and exits 0.

    python oom.py --out DIR --chunk-mib 1024

Under `memlens simulate --device-memory N` the simulated card runs out at the same chunk
when N is what the real card had free. With run.sh's fake capture backend (no CUDA, CPU
tensors that never run out) the backend's own `oom()` stands in for the failure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import memlens
from memlens.capture.backend import get_backend


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--chunk-mib", type=int, default=1024)
    p.add_argument("--max-chunks", type=int, default=100_000)
    a = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    chunk = a.chunk_mib * 2**20
    handle = memlens.dump_on_oom(a.out / "oom")
    kept = []
    try:
        for _ in range(a.max_chunks):
            kept.append(torch.empty(chunk, dtype=torch.uint8, device=device))
        fake_oom = getattr(get_backend(), "oom", None)  # the fake capture backend only
        if fake_oom is not None:
            fake_oom(chunk)
        print(f"no out-of-memory error after {len(kept)} chunks")
    except Exception as exc:  # torch.OutOfMemoryError, or the fake backend's stand-in
        if "out of memory" not in str(exc).lower():
            raise
        print(f"out of memory after {len(kept)} chunks of {a.chunk_mib} MiB")
    finally:
        handle.close()
    print(f"oom snapshots: {[str(p) for p in handle.paths]}")


if __name__ == "__main__":
    main()
