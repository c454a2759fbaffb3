"""Turning a live tensor into a small CPU payload, in the training process.

Small tensors (at most ``raw_max_numel`` elements) are copied as they are and the background
process computes everything from the copy. Larger ones are reduced where they live first: the
partial statistics of ``stats.py``, the histogram and a pooled heatmap are computed with torch
on the tensor's own device, in chunks of ``chunk_numel`` elements so temporaries stay small,
and only that vector (a few KiB) is copied. Nothing here ever calls ``.item()``: on CUDA the
copy goes to pinned memory with ``non_blocking=True`` and a CUDA event; :meth:`Pending.ready`
polls the event, so the training loop never waits for the GPU.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from memlens.inspector.stats import heatmap_shape

_NUMPY_UNSAFE = (
    {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}
    if hasattr(torch, "float8_e4m3fn")
    else {torch.bfloat16}
)


@dataclass
class Pending:
    """A payload on its way to the CPU. ``buf`` is a CPU tensor once ``event`` has fired."""

    kind: str  # "raw" or "packed"
    buf: torch.Tensor
    event: Any  # torch.cuda.Event or None
    nchunks: int = 0
    heat: tuple[int, int] | None = None

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    @property
    def nbytes(self) -> int:
        return self.buf.numel() * self.buf.element_size()

    def payload(self) -> tuple[Any, ...]:
        """The picklable payload (numpy arrays); call only when ready()."""
        arr = self.buf.numpy()
        if self.kind == "raw":
            return ("raw", arr)
        return ("packed", arr, self.nchunks, self.heat)


def _acc_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def trackable(t: Any) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and not t.is_complex()
        and not t.is_sparse
        and t.layout == torch.strided
        and t.numel() > 0
        and t.device.type != "meta"
    )


def _to_cpu(x: torch.Tensor, kind: str, **extra: Any) -> Pending:
    if x.device.type == "cuda":
        buf = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        buf.copy_(x, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(x.device))
        return Pending(kind, buf, event, **extra)
    if x.device.type == "cpu":
        # Copy now: the caller may change the tensor in place before it is pickled.
        return Pending(kind, x.clone() if kind == "raw" else x, None, **extra)
    return Pending(kind, x.to("cpu"), None, **extra)


def _pool(x: torch.Tensor, heat: tuple[int, int]) -> torch.Tensor:
    """The heatmap: x[0, ..., 0, :, :] average-pooled to ``heat`` (see stats.py)."""
    src = x[(0,) * (x.dim() - 2)]
    if src.dtype not in (torch.float32, torch.float64):
        src = src.float()
    if tuple(src.shape) == heat:
        return src
    return F.adaptive_avg_pool2d(src[None, None], heat)[0, 0]


def reduce_packed(
    x: torch.Tensor, *, bins: int, heatmap_size: int, chunk_numel: int
) -> tuple[torch.Tensor, int, tuple[int, int] | None]:
    """Partials, histogram (+ its lo, hi) and pooled heatmap, packed into one vector on x's device."""
    acc = _acc_dtype(x.device)
    flat = x.reshape(-1)
    n = flat.numel()
    rows = []
    single = None  # with one chunk, pass 2 reuses pass 1's conversion
    for start in range(0, n, chunk_numel):
        c = flat[start : start + chunk_numel].to(acc)
        fin = torch.isfinite(c)
        cz = torch.where(fin, c, 0)
        nf = fin.sum().to(acc)
        mean = cz.sum() / nf.clamp(min=1)
        d = torch.where(fin, c - mean, 0)
        nans = torch.isnan(c).sum().to(acc)
        rows.append(
            torch.stack(
                [
                    torch.full((), float(c.numel()), dtype=acc, device=x.device),  # no copy
                    nf,
                    mean,
                    (d * d).sum(),
                    torch.where(fin, c, math.inf).min(),
                    torch.where(fin, c, -math.inf).max(),
                    (c == 0).sum().to(acc),
                    nans,
                    c.numel() - nf - nans,
                    (cz * cz).sum(),
                ]
            )
        )
        single = (c, fin) if n <= chunk_numel else None
    part = torch.stack(rows)
    lo = part[:, 4].min()
    hi = part[:, 5].max()
    valid = hi >= lo
    lo0 = torch.where(valid, lo, 0)
    width = hi - lo
    scale = torch.where(hi > lo, bins / torch.where(hi > lo, width, 1), 0)
    hist = torch.zeros(bins, dtype=acc, device=x.device)
    for start in range(0, n, chunk_numel):
        if single is not None:
            c, fin = single
        else:
            c = flat[start : start + chunk_numel].to(acc)
            fin = torch.isfinite(c)
        idx = torch.floor((torch.where(fin, c, lo0) - lo0) * scale).clamp_(0, bins - 1).long()
        hist.scatter_add_(0, idx, fin.to(acc))
    single = None
    parts = [part.reshape(-1), hist, torch.stack([lo, hi])]
    heat = heatmap_shape(tuple(x.shape), heatmap_size) if heatmap_size > 0 else None
    if heat is not None:
        parts.append(_pool(x, heat).reshape(-1).to(acc))
    return torch.cat(parts), len(rows), heat


def prepare(
    t: torch.Tensor,
    *,
    bins: int,
    heatmap_size: int,
    raw_max_numel: int,
    chunk_numel: int,
    hist_max_numel: int | None = None,
) -> Pending:
    """Start moving one tensor's sample to the CPU (raw copy or reduction where it lives)."""
    with torch.no_grad():
        x = t.detach()
        if x.numel() <= raw_max_numel:
            if x.dtype in _NUMPY_UNSAFE:
                x = x.float()
            return _to_cpu(x, "raw")
        if x.device.type == "cpu" and x.dtype not in _NUMPY_UNSAFE and not x.is_conj():
            # On the CPU numpy reduces a read-only view of the tensor, single pass per
            # statistic: cheaper than torch's reductions and than shipping the data.
            # The heatmap is pooled with torch (faster here than numpy's prefix sums).
            from memlens.inspector.stats import reduce_array

            packed, nchunks, _ = reduce_array(
                x.numpy(), bins=bins, heatmap_size=0, hist_max_numel=hist_max_numel
            )
            heat = heatmap_shape(tuple(x.shape), heatmap_size) if heatmap_size > 0 else None
            if heat is not None:
                pooled = _pool(x, heat).reshape(-1).double().numpy()
                packed = np.concatenate([packed, pooled])
            return Pending("packed", torch.from_numpy(packed), None, nchunks=nchunks, heat=heat)
        guard = (
            torch.autocast(x.device.type, enabled=False)
            if x.device.type in ("cuda", "cpu")
            else contextlib.nullcontext()
        )
        with guard:
            reduced, nchunks, heat = reduce_packed(
                x, bins=bins, heatmap_size=heatmap_size, chunk_numel=chunk_numel
            )
        return _to_cpu(reduced, "packed", nchunks=nchunks, heat=heat)
