"""One video per tensor: a frame per sample (heatmap over histogram), MP4 or GIF.

MP4 goes through PyAV, imageio-ffmpeg or an ``ffmpeg`` binary, whichever is installed;
without any of them, GIF (Pillow). Frames are made one at a time and streamed to the
encoder where it allows, and written to a temporary name first.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from memlens.inspector.render.colors import colorize, heat_scale, pick
from memlens.inspector.render.svg import fmt_value
from memlens.inspector.store import TensorSeries

FRAME_W, FRAME_H = 320, 352
HEADER_H, HEAT_H = 24, 256
MAX_FRAMES = 300


def _text(
    draw: Any, xy: tuple[float, float], text: str, fill: tuple[int, int, int] = (20, 20, 20)
) -> None:
    draw.text(xy, text, fill=fill)


def _hist_panel(
    draw: Any, counts: np.ndarray, lo: float, hi: float, box: tuple[int, int, int, int]
) -> None:
    x0, y0, x1, y1 = box
    draw.rectangle(box, outline=(200, 200, 200))
    total = counts.max() if counts.size else 0
    if total > 0:
        n = counts.size
        w = (x1 - x0 - 2) / n
        for i, c in enumerate(counts):
            if c <= 0:
                continue
            h = (y1 - y0 - 14) * math.sqrt(c / total)
            draw.rectangle(
                (x0 + 1 + i * w, y1 - 12 - h, x0 + 1 + (i + 1) * w - 1, y1 - 12),
                fill=(31, 119, 180),
            )
    _text(draw, (x0 + 2, y1 - 11), fmt_value(lo))
    _text(draw, (x1 - 6 * len(fmt_value(hi)) - 2, y1 - 11), fmt_value(hi))


def frames(s: TensorSeries, max_frames: int = MAX_FRAMES) -> Iterator[np.ndarray]:
    """One RGB frame (FRAME_H x FRAME_W) per sample: heatmap (if any) over the histogram."""
    from PIL import Image, ImageDraw

    heats = dict(s.heatmaps()) if s.has_heatmaps else {}
    vmin, vmax, cmap = heat_scale(list(heats.values()))
    for i in pick(len(s), max_frames):
        step = int(s.steps[i])
        im = Image.new("RGB", (FRAME_W, FRAME_H), (255, 255, 255))
        draw = ImageDraw.Draw(im)
        label = s.key if len(s.key) <= 40 else "…" + s.key[-39:]
        _text(draw, (4, 2), label)
        _text(draw, (4, 12), f"step {step}  norm {fmt_value(s.stats['norm'][i])}")
        hm = heats.get(step)
        if hm is not None:
            rgb = Image.fromarray(colorize(hm, vmin, vmax, cmap))
            h, w = hm.shape
            k = min((FRAME_W - 8) / w, (HEAT_H - 4) / h)
            size = (max(1, int(w * k)), max(1, int(h * k)))
            rgb = rgb.resize(size, Image.Resampling.NEAREST)
            im.paste(rgb, ((FRAME_W - size[0]) // 2, HEADER_H + (HEAT_H - size[1]) // 2))
            box = (4, HEADER_H + HEAT_H + 2, FRAME_W - 5, FRAME_H - 3)
        else:
            box = (4, HEADER_H + 2, FRAME_W - 5, FRAME_H - 3)
        _hist_panel(draw, s.hist[i], s.hist_lo[i], s.hist_hi[i], box)
        yield np.asarray(im)


def mp4_encoder() -> str | None:
    """What can write MP4 here: 'pyav', 'imageio-ffmpeg', 'ffmpeg' (the binary), or None."""
    if importlib.util.find_spec("av") is not None:
        return "pyav"
    if importlib.util.find_spec("imageio_ffmpeg") is not None:
        return "imageio-ffmpeg"
    if shutil.which("ffmpeg"):
        return "ffmpeg"
    return None


def _write_mp4(frame_iter: Iterator[np.ndarray], tmp: Path, fps: int, encoder: str) -> None:
    if encoder == "ffmpeg":
        cmd = [
            shutil.which("ffmpeg") or "ffmpeg",
            "-y",
            "-loglevel",
            "error",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-s",
            f"{FRAME_W}x{FRAME_H}",
            "-r",
            str(fps),
            "-i",
            "-",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+faststart",
            "-f",
            "mp4",
            str(tmp),
        ]
        # A session of its own: Ctrl-C in the terminal must not kill the encoder mid-file.
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdin is not None and proc.stderr is not None  # both are PIPE
        try:
            for f in frame_iter:
                proc.stdin.write(np.ascontiguousarray(f).tobytes())
            proc.stdin.close()
            err = proc.stderr.read()
            if proc.wait(timeout=120) != 0:
                raise RuntimeError(f"ffmpeg failed: {err.decode(errors='replace')[-400:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        return
    import imageio.v3 as iio

    plugin = "pyav" if encoder == "pyav" else "FFMPEG"
    kwargs = (
        {"codec": "libx264", "fps": fps} if plugin == "pyav" else {"fps": fps, "codec": "libx264"}
    )
    # (the overloads want a literal plugin name; both are valid here)
    with iio.imopen(tmp, "w", plugin=plugin, extension=".mp4") as out:  # type: ignore[call-overload]
        if plugin == "pyav":
            out.init_video_stream("libx264", fps=fps)
            for f in frame_iter:
                out.write_frame(f)
        else:
            out.write(list(frame_iter), **kwargs)


def _write_gif(frame_iter: Iterator[np.ndarray], tmp: Path, fps: int) -> None:
    from PIL import Image

    imgs = [
        Image.fromarray(f).quantize(colors=255, method=Image.Quantize.MEDIANCUT) for f in frame_iter
    ]
    if not imgs:
        raise ValueError("no frames")
    imgs[0].save(
        tmp, format="GIF", save_all=True, append_images=imgs[1:], duration=int(1000 / fps), loop=0
    )


def write_video(
    s: TensorSeries, out_dir: Path, *, video_format: str = "auto", fps: int = 8
) -> Path:
    """Write one tensor's video; MP4 when an encoder is available (or asked for), else GIF."""
    out_dir.mkdir(exist_ok=True)
    encoder = mp4_encoder() if video_format in ("auto", "mp4") else None
    if video_format == "mp4" and encoder is None:
        raise RuntimeError("no MP4 encoder (install 'av' or 'imageio-ffmpeg', or ffmpeg)")
    name = s.dir.name
    if encoder is not None:
        path = out_dir / f"{name}.mp4"
        tmp = path.with_name(f".{path.name}.tmp.mp4")
        try:
            _write_mp4(frames(s), tmp, fps, encoder)
            os.replace(tmp, path)
            with contextlib.suppress(FileNotFoundError):
                (out_dir / f"{name}.gif").unlink()
            return path
        except Exception:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            if video_format == "mp4":
                raise
    path = out_dir / f"{name}.gif"
    tmp = path.with_name(f".{path.name}.tmp.gif")
    try:
        _write_gif(frames(s), tmp, fps)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return path
