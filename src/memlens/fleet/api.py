"""`memlens.fleet.run(paths)`: every rank reduced to a record in parallel, then compared.

    from memlens import fleet
    result = fleet.run("run42/")                     # local process pool
    result = fleet.run("run42/*.pickle", scheduler="tcp://10.0.0.5:8786")

The result is the JSON of `memlens fleet --json` (docs/json-schema.md): one row per rank
(failed rows too), the figures' medians, outliers with a diff against the median rank,
groups of ranks that behave alike and the imbalance of each stage.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

from memlens.errors import MemlensError
from memlens.execution.executors import Executor, TaskLost, make_executor
from memlens.execution.progress import progress_bar
from memlens.fleet import aggregate as agg
from memlens.fleet.naming import expand_paths, rank_ids
from memlens.fleet.record import FAILED, RankRecord, one_line, rank_record
from memlens.fleet.results import FailureReason, FleetResult, FleetRow, OutlierDiff

FLEET_SCHEMA_VERSION = 1
DIFF_SITES = 10  # call sites kept in each outlier's diff


def _record_task(item: tuple[str, int], **options: Any) -> RankRecord:
    return rank_record(item[0], item[1], **options)


def outlier_diff(
    pair: tuple[str, str],
    *,
    device: int | None = None,
    hide_patterns: Sequence[str] | None = None,
    cache: bool = True,
    limit: int = DIFF_SITES,
) -> OutlierDiff:
    """memlens diff of (median rank's file, outlier's file), cut to the call sites and
    stages that changed most; {"error": reason} when either cannot be read."""
    from memlens.analysis.diff import diff
    from memlens.snapshot.loader import load

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as in rank_record
            a = load(pair[0], cache=cache, warn=False).device(device)
            b = load(pair[1], cache=cache, warn=False).device(device)
            d = diff(a, b, top=limit, hide_patterns=hide_patterns)
    except Exception as exc:
        return diff_error(one_line(exc))
    stages = d["stages"]
    if stages is not None:  # one row per step would be thousands: the largest changes
        stages = sorted(stages, key=lambda s: -abs(s["peak_change"] or 0))[:limit]
    return OutlierDiff(
        error=None,
        figures=d["figures"],
        sites=d["sites"],
        sites_total=d["sites_total"],
        stages=stages,
    )


def diff_error(reason: str) -> OutlierDiff:
    return OutlierDiff(error=reason, figures=[], sites=[], sites_total=0, stages=None)


def run(
    paths: str | Sequence[str],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    rank_regex: str | None = None,
    device: int | None = None,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
    cache: bool = True,
    threshold: float = agg.DEFAULT_Z,
    tolerance: float = agg.DEFAULT_TOLERANCE,
    diffs: int = 10,
    progress: bool | None = False,
    executor: Executor | None = None,
    on_record: Callable[[RankRecord], None] | None = None,
) -> FleetResult:
    """Analyze a fleet of rank snapshots (files, directories or globs).

    scheduler: None (a local process pool of `workers`, default the cores),
    "dask-local" (a Dask LocalCluster) or "tcp://HOST:PORT" (an existing Dask
    scheduler). threshold: |robust z| above which a figure is an outlier; tolerance: how
    close (fraction of the median) a rank's figures must be to join a group; diffs: how
    many outliers get a diff against the median rank. progress: a bar on stderr (None:
    when it is a terminal). on_record is called in the parent as each record arrives.
    """
    # absolute before they travel: a worker's working directory is not ours (a Dask
    # worker started elsewhere found none of the relative paths)
    files = [
        os.path.abspath(f) for f in expand_paths([paths] if isinstance(paths, str) else list(paths))
    ]
    ids, rank_source = rank_ids(files, rank_regex)
    cache = cache and fits_in_cache(len(files))
    own = executor is None
    ex = executor or make_executor(scheduler, workers)
    try:
        records = _collect(
            ex,
            files,
            ids,
            progress,
            on_record,
            device=device,
            top=top,
            hide_patterns=hide_patterns,
            cache=cache,
        )
        check_visible(records, ex.name)
        result = summarize_fleet(records, threshold=threshold, tolerance=tolerance)
        result["executor"], result["rank_source"] = ex.name, rank_source
        _attach_diffs(
            ex, result, records, diffs, device=device, hide_patterns=hide_patterns, cache=cache
        )
    finally:
        if own:
            ex.close()
    return result


MISSING = ": no such file"  # the end of the reader's reason for a path that is not there


def unseen(rec: RankRecord) -> bool:
    """A rank whose worker found no file at a path that exists here: the worker runs on
    another machine (or in a container) that does not see this file system."""
    return not rec.ok and (rec.reason or "").endswith(MISSING) and os.path.isfile(rec.path)


def check_visible(records: Sequence[RankRecord], executor: str) -> None:
    """One clear error when no worker could see any file (every rank failed that way),
    instead of a table of failed rows and "no outliers"."""
    if not records or not all(unseen(r) for r in records):
        return
    first = records[0]
    raise MemlensError(
        f"the workers of the {executor} cannot see the snapshot files: {first.path} exists "
        f"here, but worker {first.worker or '?'} found no such file (nor any of the "
        f"{len(records):,} files); every worker must read them at the same path (a shared "
        "file system)"
    )


def failure_reasons(records: Sequence[RankRecord]) -> list[FailureReason]:
    """The failed ranks grouped by why (the file's own path taken out of the reason),
    most ranks first."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for r in records:
        if r.ok:
            continue
        why = (r.reason or "unknown").replace(r.path, "FILE")
        if unseen(r):
            why = "the worker cannot see the file (it exists here)"
        counts[why] += 1
        first.setdefault(why, r.rank)
    return [
        FailureReason(reason=why, ranks=n, first_rank=first[why]) for why, n in counts.most_common()
    ]


def fits_in_cache(n_files: int) -> bool:
    """Whether the column cache can keep every rank (MEMLENS_CACHE_MAX_ENTRIES, 32 by
    default). A larger fleet is read without it: each file would write an entry that
    evicts another before it is ever read again, several times the cost of the read."""
    from memlens.snapshot.store.cache import MAX_ENTRIES

    return n_files <= MAX_ENTRIES


def _collect(
    ex: Executor,
    files: list[str],
    ids: list[int],
    progress: bool | None,
    on_record: Callable[[RankRecord], None] | None,
    **options: Any,
) -> list[RankRecord]:
    items = list(zip(files, ids))
    records: list[RankRecord | None] = [None] * len(items)
    with progress_bar(len(items), "ranks", progress) as bar:
        for i, rec in ex.map_unordered(partial(_record_task, **options), items):
            if isinstance(rec, TaskLost):
                rec = RankRecord(rank=ids[i], path=files[i], status=FAILED, reason=rec.reason)
            records[i] = shared_strings(rec)
            bar.advance()
            if on_record is not None:
                on_record(rec)
    return sorted((r for r in records if r is not None), key=lambda r: r.rank)


def shared_strings(rec: RankRecord) -> RankRecord:
    """Each record arrives with its own copy of every site name and path: the same few
    hundred strings, thousands of times. Interned, the parent holds each once."""
    for site in rec.top_sites:
        for key in ("site", "filename", "name"):
            text = site.get(key)
            if isinstance(text, str):
                site[key] = sys.intern(text)
    rec.fingerprint = sys.intern(rec.fingerprint)
    rec.stage_peaks = {sys.intern(k): v for k, v in rec.stage_peaks.items()}
    rec.category_bytes = {sys.intern(k): v for k, v in rec.category_bytes.items()}
    return rec


def summarize_fleet(
    records: Sequence[RankRecord],
    *,
    threshold: float = agg.DEFAULT_Z,
    tolerance: float = agg.DEFAULT_TOLERANCE,
) -> FleetResult:
    """The across-rank part of `fleet` on records already made (no diffs)."""
    stats, z = agg.fleet_stats(records)
    found = agg.outliers(records, stats, z, threshold)
    grouped = agg.groups(records, stats, tolerance)
    group_of = {rank: g["group"] for g in grouped for rank in g["ranks"]}
    flagged = {o["rank"] for o in found}
    # a shallow copy: a row shares its lists and dicts with the record (at thousands of
    # ranks a deep copy would double the parent's memory for nothing)
    table = [
        cast(
            FleetRow,
            {
                **vars(r),
                "group": group_of.get(r.rank),
                "outlier": r.rank in flagged,
                "z": z.get(r.rank, {}),
            },
        )
        for r in records
    ]
    return {
        "schema": FLEET_SCHEMA_VERSION,
        "executor": None,
        "rank_source": None,
        "ranks_total": len(records),
        "ranks_ok": sum(r.ok for r in records),
        "ranks_failed": sum(not r.ok for r in records),
        "threshold_z": threshold,
        "tolerance": tolerance,
        "median_rank": agg.median_rank(records, z),
        "figures": stats,
        "table": table,
        "outliers": found,
        "groups": grouped,
        "stages": agg.stage_imbalance(records),
        "failed": [
            {"rank": r.rank, "path": r.path, "reason": r.reason} for r in records if not r.ok
        ],
        "failure_reasons": failure_reasons(records),
    }


def _attach_diffs(
    ex: Executor,
    result: FleetResult,
    records: Sequence[RankRecord],
    diffs: int,
    **options: Any,
) -> None:
    """Each of the first `diffs` outliers gets "diff": memlens diff (median rank -> it),
    run on the executor like the records (the parent never loads a snapshot)."""
    base = result["median_rank"]
    chosen = result["outliers"][:diffs]
    if base is None or not chosen:
        return
    path_of = {r.rank: r.path for r in records}
    pairs = [(path_of[base], o["path"]) for o in chosen]
    for i, d in ex.map_unordered(partial(outlier_diff, **options), pairs):
        chosen[i]["diff"] = diff_error(d.reason) if isinstance(d, TaskLost) else d
