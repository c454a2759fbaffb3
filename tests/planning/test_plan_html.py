"""`memlens plan --html`: the page from a plan result whose figures are worked out by hand
(test_plan_cli.py's toy: peak reserved 16 MiB x (1 + b + b^2) + 20 MiB on a T4), with
hostile strings wherever the user's text reaches it; then the page `plan --html` writes,
and (with Chromium) that it renders with no error and draws the chart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from chromium import BROWSER_MARKS
from memlens.views.report.plan import plan_report

MiB = 2**20
EVIL = "<img src=x onerror=alert(1)>"
SAFE_EVIL = "&lt;img src=x onerror=alert(1)&gt;"


def reserved(b: int) -> int:
    return 16 * MiB * (1 + b + b * b) + 20 * MiB


def a_point(b: int, **over: Any) -> dict[str, Any]:
    return {"values": {"--batch-size": str(b)}, "argv": ["--tag", EVIL, "--batch-size", str(b)],
            "env": {"EVIL": EVIL}, "peak_active_bytes": reserved(b) - 16 * MiB,
            "peak_reserved_bytes": reserved(b), "oom": False, "fits": True, "error": None,
            "cached": False, "source": "simulated", **over}  # fmt: skip


def result() -> dict[str, Any]:
    """Points 1, 2, 4 and 40 (it ran out of memory at 15.00 GiB), the fit over the three that
    ran (36 MiB + 16 MiB b + 16 MiB b^2: its largest within 14848 MiB is 29), a failed
    what-if and a combination."""
    fit = {"args": ["--batch-size"], "constant_bytes": 36.0 * MiB, "linear_bytes": [16.0 * MiB],
           "quadratic_bytes": [16.0 * MiB], "max_residual_bytes": 0.0, "points": 3,
           "largest_fitting": 29.0}  # fmt: skip
    points = [a_point(b) for b in (1, 2, 4)]
    points.append(a_point(40, oom=True, fits=False, peak_reserved_bytes=15 * 1024 * MiB))
    row = {"setting": f"checkpoint={EVIL},expandable_segments:True", "kind": "mixed",
           "peak_active_bytes": 300 * MiB, "peak_reserved_bytes": 320 * MiB,
           "reserved_saving_bytes": 36 * MiB, "reserved_saving_pct": 10.11,
           "active_saving_bytes": 40 * MiB, "active_saving_pct": 11.76, "oom": False,
           "fits": True, "error": None, "applied": [f"checkpoint={EVIL}: not applied"],
           "parts": [{"setting": f"checkpoint={EVIL}", "reserved_saving_bytes": 0,
                      "active_saving_bytes": 0, "error": None},
                     {"setting": "expandable_segments:True", "reserved_saving_bytes": 16 * MiB,
                      "active_saving_bytes": 0, "error": EVIL}],
           "sites": [{"site": f"{EVIL}.py:3 forward", "filename": f"{EVIL}.py", "line": 3,
                      "name": "forward", "a_bytes": 2 * MiB, "b_bytes": 0, "change": -2 * MiB,
                      "a_count": 1, "b_count": 0, "status": "only_a", "key": "k"}]}  # fmt: skip
    return {
        "schema": 1, "script": f"{EVIL}.py", "executor": f"Dask cluster at {EVIL}",
        "gpu": "Tesla T4", "capacity_bytes": 15360 * MiB, "reserve_bytes": 512 * MiB,
        "usable_bytes": 14848 * MiB, "points": points,
        "largest_fitting": {"--batch-size": "4"}, "fit": fit, "fit_active": None,
        "groups": [], "predictions": [{"values": {"--batch-size": 29.0},
                                       "peak_reserved_bytes": float(reserved(29)),
                                       "peak_active_bytes": float(reserved(29) - 16 * MiB),
                                       "extrapolated": True}],
        "find_max": {"arg": "--batch-size", "lo": 1, "hi": 32, "largest_fitting": 29,
                     "simulations": 6, "probes": [a_point(1), a_point(29)], "step": 1,
                     "margin_bytes": 0, "shortfall_bytes": None, "failing": [],
                     "interpolated": False, "confirmed": None, "fit": None},
        "what_ifs": [{"setting": row["setting"], "kind": "mixed", "points": points[:1],
                      "active_change_bytes": [-40 * MiB], "reserved_change_bytes": [-36 * MiB],
                      "applied": [row["applied"]]}],
        "knob_table": {"point": 2, "values": {"--batch-size": "4"},
                       "baseline_peak_active_bytes": reserved(4) - 16 * MiB,
                       "baseline_peak_reserved_bytes": reserved(4), "rows": [row]},
        "simulations": 12,
    }  # fmt: skip


def test_the_page_has_the_figures_the_chart_and_escapes_the_users_text():
    page = plan_report(result())  # type: ignore[arg-type]
    # exact figures: the points' peaks with their byte counts, usable, the fit's answer
    for b, shown in ((1, "68.00 MiB"), (2, "132.00 MiB"), (4, "356.00 MiB")):
        assert f'<span title="{reserved(b):,} bytes">{shown}</span>' in page
    assert "14.50 GiB" in page and f"{reserved(29):,} bytes" in page  # usable, the prediction
    assert "--batch-size=4" in page  # the largest fitting swept value
    assert "36.00 MiB + 16.00 MiB x --batch-size + 16.00 MiB x --batch-size^2" in page
    assert "The fit&#x27;s largest fitting --batch-size: 29." in page
    assert "The largest --batch-size in [1, 32] (bisection): --batch-size=29, 6 simulations" in page
    assert ">36.00 MiB</span> (10.1%)" in page and ">40.00 MiB</span> (11.8%)" in page
    assert "alone expandable_segments:True: failed" in page
    # the chart: three points that ran and fit, the OOM point as a cross, the fitted curve
    # (solid over 1..4, where it was fitted, dashed on to 40), the usable line at 14848 MiB
    svg = re.search(r'<svg class="plan-chart".*?</svg>', page, re.S)
    assert svg is not None
    # find-max draws its probes too (issue 34: the page said "points 0" and drew nothing)
    charts = re.findall(r'<svg class="plan-chart".*?</svg>', page, re.S)
    assert len(charts) == 2 and charts[1].count("<circle") == 2
    chart = svg.group(0)
    assert chart.count("<circle") == 3 and chart.count('stroke-width="2">') == 1
    assert chart.count('<polyline class="fit"') == 2  # 1..4 solid, 4..40 dashed
    assert "usable 14.50 GiB" in chart and "largest fitting 29" in chart
    assert f"--batch-size=40: 15.00 GiB reserved ({15 * 1024 * MiB:,} bytes)" in chart
    # nothing the user wrote is markup; nothing is fetched
    assert EVIL not in page and page.count(SAFE_EVIL) >= 8
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert not re.search(r"https?://", page.replace("http://www.w3.org/2000/svg", ""))
    assert page.count("<script") == 2  # the report's JSON island and its inline script
    for sid in ("overview", "points", "fit", "find-max", "what-if"):
        assert f'<section id="{sid}">' in page


def test_a_plan_without_capacity_or_fit_still_renders():
    r = result()
    r.update(capacity_bytes=None, usable_bytes=None, fit=None, predictions=[], find_max=None,
             knob_table=None, what_ifs=[], largest_fitting=None)  # fmt: skip
    page = plan_report(r)  # type: ignore[arg-type]
    assert "No capacity given" in page and 'id="fit"' not in page and 'id="what-if"' not in page


TOY = """
import argparse, torch
p = argparse.ArgumentParser(); p.add_argument("--batch-size", type=int, default=1)
p.add_argument("--tag")
n = p.parse_args().batch_size
w = torch.empty(n * 4 * 2**20, device="cuda")
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`memlens plan --html` on a script taking a hostile argument: 16 MiB per batch."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("html")
    (tmp / "toy.py").write_text(textwrap.dedent(TOY))
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "plan", "--gpu", "t4", "--jobs", "2", "--html",
         "plan.html", "--sweep", "--batch-size=1,2", "toy.py", "--tag", EVIL],
        capture_output=True, text=True, cwd=tmp, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "memlens: plan: wrote plan.html" in done.stderr
    return tmp / "plan.html"


def test_plan_writes_the_page(written):
    page = written.read_text()
    for b in (1, 2):
        assert f'<span title="{16 * MiB * b:,} bytes">{16 * b}.00 MiB</span>' in page
    assert EVIL not in page and f"--tag {SAFE_EVIL} --batch-size 2" in page


@BROWSER_MARKS[0]
@BROWSER_MARKS[1]
def test_the_page_renders_in_chromium(browser, written):
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:")
               else route.continue_())  # fmt: skip
    page.goto(written.as_uri())
    box = page.locator("svg.plan-chart").bounding_box()
    assert box is not None and box["width"] > 500 and box["height"] > 200
    assert page.locator("svg.plan-chart circle").count() == 2
    assert page.locator("#points tbody tr").count() == 2
    assert page.evaluate("() => document.querySelectorAll('img').length") == 0
    assert errors == []
    page.close()
