"""Dashboard, PNG plots and videos: valid files, decoded back; and `memlens inspect-report`."""

from __future__ import annotations

import base64
import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from chromium import BROWSER_MARKS

torch = pytest.importorskip("torch")

from inspect_helpers import (  # noqa: E402
    TinyTransformer,
    batch_for,
    check_html,
    check_run_files,
    decode_video,
    train_step,
)

import memlens  # noqa: E402
from memlens.cli.main import main as cli_main  # noqa: E402
from memlens.inspector import render  # noqa: E402
from memlens.inspector.render import colors, dashboard, svg, video  # noqa: E402
from memlens.inspector.store import load_run  # noqa: E402

pytestmark = pytest.mark.torch
STEPS = 5


def run_cli(args: list[str]) -> int:
    try:
        cli_main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inspect") / "run"
    torch.manual_seed(0)
    m = TinyTransformer(layers=1)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    with memlens.inspect(
        m,
        layers=["encoder.layers.0.linear1", "encoder.layers.0.self_attn", "head"],
        every=1,
        out=out,
        render="none",
    ) as ins:
        for _ in range(STEPS):
            train_step(m, opt, batch_for(m))
            ins.step()
    return out


@pytest.fixture(scope="module")
def gif_run(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gif") / "run"
    shutil.copytree(run_dir, out)
    render.render_run(out, video_format="gif")
    return out


def test_gif_videos_decode_frame_by_frame(gif_run):
    run = load_run(gif_run)
    videos = sorted((gif_run / "videos").glob("*.gif"))
    assert len(videos) == len(run.tensors) > 0
    for v in videos:
        s = next(s for s in run.tensors.values() if s.dir.name == v.stem)
        frames = decode_video(v)
        assert len(frames) == len(s) == STEPS
        assert all(f.shape == (video.FRAME_H, video.FRAME_W, 3) for f in frames)
        # every frame is a different picture (its step number at least)
        assert len({f.tobytes() for f in frames}) == len(frames)


@pytest.mark.skipif(video.mp4_encoder() is None, reason="no MP4 encoder here")
def test_mp4_videos_decode_frame_by_frame(run_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    result = render.render_run(out, plots=False, video_format="mp4")
    run = load_run(out)
    assert len(result["videos"]) == len(run.tensors)
    for v in result["videos"]:
        assert v.suffix == ".mp4"
        frames = decode_video(v)
        assert len(frames) == STEPS
        assert frames[0].shape == (video.FRAME_H, video.FRAME_W, 3)


def test_heatmap_frames_show_the_saved_heatmap(gif_run):
    """The video of a 2-D weight shows its heatmap: the middle of the frame is not blank."""
    run = load_run(gif_run)
    s = run.tensors["head.weight:param"]
    assert s.has_heatmaps
    frame = decode_video(gif_run / "videos" / f"{s.dir.name}.gif")[0]
    heat = frame[video.HEADER_H : video.HEADER_H + video.HEAT_H]
    assert (heat != 255).any(axis=-1).mean() > 0.2


def test_png_plots(gif_run):
    from PIL import Image

    run = load_run(gif_run)
    pngs = sorted((gif_run / "plots").glob("*.png"))
    assert len(pngs) == len(run.tensors)
    for p in pngs:
        with Image.open(p) as im:
            im.verify()
        with Image.open(p) as im:
            assert im.size == (800, 480)


def test_dashboard_is_valid_and_self_contained(gif_run):
    text = (gif_run / "dashboard.html").read_text()
    counts = check_html(text)
    run = load_run(gif_run)
    assert text.count('class="card"') == len(run.tensors)
    for key in run.tensors:
        assert key in text
    assert counts["svg"] >= 3 * len(run.tensors)
    assert "<script src" not in text and "<link" not in text
    uris = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(uris) >= len(run.tensors)
    from PIL import Image

    for u in uris:
        Image.open(io.BytesIO(base64.b64decode(u))).verify()
    # links point at files that exist
    for href in re.findall(r'href="((?:plots|videos)/[^"]+)"', text):
        assert (gif_run / href).exists(), href


@BROWSER_MARKS[0]
@BROWSER_MARKS[1]
def test_dashboard_renders_in_chromium(browser, gif_run, tmp_path):
    errors: list[str] = []
    requests: list[str] = []
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    try:
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("request", lambda r: requests.append(r.url))
        page.goto((gif_run / "dashboard.html").as_uri())
        page.wait_for_load_state("load")
        run = load_run(gif_run)
        assert page.title().startswith("memlens inspect")
        assert page.locator(".card").count() == len(run.tensors)
        broken = page.evaluate(
            "Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length"
        )
        assert broken == 0
        assert page.evaluate("document.images.length") >= len(run.tensors)
        box = page.locator("svg.chart").first.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 50
        page.fill("#filter", "head.weight")
        visible = page.evaluate(
            "Array.from(document.querySelectorAll('.card')).filter(c => c.offsetParent !== null).length"
        )
        assert visible == 2  # head.weight:param and head.weight:grad
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=False)
    finally:
        page.close()
    assert errors == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests


def test_inspect_report_rebuilds_everything(run_dir, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    for name in ("dashboard.html", "annotations.json"):
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "videos", ignore_errors=True)
    shutil.rmtree(out / "plots", ignore_errors=True)
    assert run_cli(["inspect-report", str(out), "--format", "gif", "--fps", "4"]) == 0
    printed = capsys.readouterr().out
    run = load_run(out)
    assert f"{len(run.tensors)} tensors" in printed
    assert len(list((out / "videos").glob("*.gif"))) == len(run.tensors)
    assert len(list((out / "plots").glob("*.png"))) == len(run.tensors)
    check_html((out / "dashboard.html").read_text())
    check_run_files(out)


def test_inspect_report_dashboard_only(run_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    assert run_cli(["inspect-report", str(out), "--no-videos", "--no-plots"]) == 0
    assert (out / "dashboard.html").exists() and not (out / "videos").exists()


def test_inspect_report_on_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert run_cli(["inspect-report", str(tmp_path)]) == 2
    assert "not an inspector run directory" in capsys.readouterr().err


def test_torn_files_from_a_hard_kill_still_render(run_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    before = {k: len(s) for k, s in load_run(out).tensors.items()}
    stats = next(out.glob("tensors/*/stats.jsonl"))
    with open(stats, "a") as fh:
        fh.write('{"key": "torn", "step": 9')  # a line cut short
    heat = next(out.glob("tensors/*/heatmaps.f32"))
    with open(heat, "ab") as fh:
        fh.write(b"\x00\x01")
    after = {k: len(s) for k, s in load_run(out).tensors.items()}
    assert after == before
    render.render_run(out, plots=False, video_format="gif")
    check_html((out / "dashboard.html").read_text())


def test_colorize_and_histogram_image():
    a = np.array([[0.0, 1.0], [np.nan, -1.0]])
    rgb = colors.colorize(a, -1, 1, "RdBu_r")
    assert rgb.shape == (2, 2, 3) and (rgb[1, 0] == 0).all()


def test_bar_labels_use_the_package_byte_format():
    bars = svg.svg_bars([("fc1", 3 * 1024**2), ("fc2", 1000)], title="t")
    assert ">3.0 MiB</text>" in bars and ">1000 B</text>" in bars


def test_dashboard_skeleton_css_and_script_are_package_data():
    page = dashboard.template("dashboard.html")
    assert page.startswith("<!DOCTYPE html>") and "$cards" in page and "$css" in page
    assert "#filter" in dashboard.template("dashboard.css")
    assert 'getElementById("filter")' in dashboard.template("dashboard.js")


def test_reading_and_rendering_never_import_torch(tmp_path):
    """The background process and `memlens inspect-report` work without torch."""
    import subprocess
    import sys

    code = (
        "import sys; import memlens.inspector.worker, memlens.inspector.render, "
        "memlens.cli.inspect_report; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
