"""The server's side of `memlens view`'s first paint, in one fresh process: memlens.load,
/api/meta and the page's first viewport (the whole trace, 1300 x 420, 1/16 px, JSON
encoded), wall and CPU seconds, one JSON line.

Usage: python benchmarks/bench_first_view.py FILE CACHE_DIR [--keep]
Run it twice on an empty CACHE_DIR with --keep the first time (cold: it parses the file,
fills the column cache and, as the server's background warm-up does, keeps the layout
indexes), then without (warm). CPU seconds move far less than wall time on a shared box.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file")
    ap.add_argument("cache_dir")
    ap.add_argument("--keep", action="store_true", help="build and keep every index after")
    args = ap.parse_args()
    os.environ["MEMLENS_CACHE_DIR"] = args.cache_dir
    t, c = time.perf_counter(), time.process_time()
    import memlens
    from memlens.views.web.data import ViewerData

    snap = memlens.load(args.file, warn=False)
    data = ViewerData([snap])
    device = snap.default_device
    t_load = time.perf_counter() - t
    data.meta()
    lay = data.layout(0, device)
    # as while the server's warm-up thread is still building (a memlens before issue 25
    # has no such flag and builds what the view needs)
    warming = hasattr(lay, "_warming")
    if warming:
        lay._warming = True
    view = data.view(0, device, width=1300, height=420, min_px=1 / 16)
    json.dumps(view, separators=(",", ":"))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(json.dumps({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load_s": round(t_load, 3),
                      "kept": getattr(lay, "_kept", None), "loadavg": os.getloadavg()}))  # fmt: skip
    if args.keep:
        if warming:
            lay._warming = False
        data.warm()


if __name__ == "__main__":
    main()
