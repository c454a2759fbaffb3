"""Small real models for the inspector tests (CPU, a few thousand parameters), and the
statistics computed directly with torch that saved values are compared with."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn as nn


class TinyMLP(nn.Module):
    def __init__(self, d_in: int = 12, hidden: int = 24, d_out: int = 3):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return out


class TinyCNN(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(y))
        out += y  # residual, in place, right after a hooked module (as in torchvision's ResNet)
        out = self.relu(out)
        logits: torch.Tensor = self.head(self.pool(out).flatten(1))
        return logits


class TinyTransformer(nn.Module):
    def __init__(
        self, vocab: int = 50, d: int = 32, heads: int = 4, layers: int = 2, seq: int = 16
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(
            d, heads, dim_feedforward=64, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        logits: torch.Tensor = self.head(self.encoder(h))
        return logits


def batch_for(
    model: nn.Module, n: int = 4, gen: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(model, TinyMLP):
        return torch.randn(n, 12, generator=gen), torch.randint(0, 3, (n,), generator=gen)
    if isinstance(model, TinyCNN):
        return torch.randn(n, 3, 8, 8, generator=gen), torch.randint(0, 5, (n,), generator=gen)
    tokens = torch.randint(0, 50, (n, 16), generator=gen)
    return tokens, tokens


def train_step(
    model: nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    x, y = batch
    out = model(x)
    if out.dim() == 3:
        out = out.reshape(-1, out.shape[-1])
        y = y.reshape(-1)
    loss = nn.functional.cross_entropy(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def direct(t: torch.Tensor) -> dict[str, Any]:
    x = t.detach().double().reshape(-1)
    fin = torch.isfinite(x)
    xf = x[fin]
    return {
        "mean": xf.mean().item() if xf.numel() else math.nan,
        "std": xf.std(correction=0).item() if xf.numel() else math.nan,
        "min": xf.min().item() if xf.numel() else math.nan,
        "max": xf.max().item() if xf.numel() else math.nan,
        "norm": torch.linalg.vector_norm(xf).item(),
        "frac_zeros": (x == 0).double().mean().item(),
        "nan": float(torch.isnan(x).sum()),
        "inf": float(torch.isinf(x).sum()),
    }


# -- checking what a run left on disk ---------------------------------------------------------
def decode_video(path: str | Path) -> list[npt.NDArray[np.uint8]]:
    """Every frame of a video, decoded. GIFs (and MP4s, when imageio has an MP4 plugin) with
    imageio; otherwise MP4 through the ffmpeg binary, which must then decode it cleanly."""
    import importlib.util
    import shutil
    import subprocess
    from pathlib import Path

    import imageio.v3 as iio
    import numpy as np

    path = Path(path)
    if path.suffix == ".gif":
        return [np.asarray(f)[..., :3] for f in iio.imiter(path)]
    for plugin, module in (("pyav", "av"), ("FFMPEG", "imageio_ffmpeg")):
        if importlib.util.find_spec(module) is not None:
            return list(iio.imiter(path, plugin=plugin))
    ffmpeg = shutil.which("ffmpeg")
    assert ffmpeg, "an MP4 was written but nothing here can decode it"
    probe = subprocess.run(
        [ffmpeg, "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert probe.stderr == b"", probe.stderr.decode(errors="replace")
    from memlens.inspector.render.video import FRAME_H, FRAME_W

    raw = np.frombuffer(probe.stdout, dtype=np.uint8)
    assert raw.size % (FRAME_W * FRAME_H * 3) == 0
    return list(raw.reshape(-1, FRAME_H, FRAME_W, 3))


def check_html(text: str) -> dict[str, Any]:
    """Parse a page; tags balanced, nothing loaded from elsewhere. Returns tag counts."""
    from html.parser import HTMLParser

    void = {
        "meta",
        "img",
        "input",
        "br",
        "hr",
        "link",
        "source",
        "wbr",
        "col",
        "area",
        "base",
        "embed",
        "param",
        "track",
        "circle",
        "rect",
        "polyline",
        "polygon",
        "line",
        "path",
    }
    counts: dict[str, int] = {}
    stack: list[str] = []

    class P(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            counts[tag] = counts.get(tag, 0) + 1
            for name, value in attrs:
                if name in ("src", "href") and value:
                    assert not value.startswith(("http:", "https:", "//")), value
            if tag not in void:
                stack.append(tag)

        def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            counts[tag] = counts.get(tag, 0) + 1

        def handle_endtag(self, tag: str) -> None:
            if tag in void:
                return
            assert stack and stack[-1] == tag, f"</{tag}> closes <{stack[-1] if stack else None}>"
            stack.pop()

    p = P()
    p.feed(text)
    p.close()
    assert stack == [], stack
    assert text.lstrip().lower().startswith("<!doctype html>")
    return counts


def check_run_files(root: str | Path) -> None:
    """Every file a run leaves is complete: JSON parses, JSONL lines are whole."""
    import json
    from pathlib import Path

    root = Path(root)
    json.loads((root / "meta.json").read_text())
    for path in [*root.glob("tensors/*/stats.jsonl"), *root.glob("*.jsonl")]:
        text = path.read_text()
        assert text.endswith("\n"), f"{path} ends mid-line"
        for line in text.splitlines():
            json.loads(line)
    if (root / "annotations.json").exists():
        json.loads((root / "annotations.json").read_text())
    assert not list(root.rglob(".*.tmp*")), "temporary files left behind"
