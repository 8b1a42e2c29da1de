"""report.html in a real browser: headless Chromium opens it without a console error and
every image (the inlined plots) loads.

Debian's ``chromium`` driven by Playwright's Python API (``executable_path``: browser
downloads are not reachable). Skips, saying why, where either is missing; CI installs both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadgen.outputs import write_all
from loadgen.schema import SweepResult

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps" / "cpu-bound" / "sweep.json"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _result_with_traffic() -> SweepResult:
    """The recorded cpu-bound sweep, its steps given the production-traffic figures too."""
    r = SweepResult.model_validate_json(FIXTURE.read_text())
    steps = [
        s.model_copy(
            update={
                "requested_prompt_tokens_mean": 384.0,
                "served_prompt_tokens_mean": 384.0 + 30 * (i == 0),
                "requested_completion_tokens_mean": 32.0,
                "served_completion_tokens_mean": 32.0,
                "prompt_tokens_off": 30 / 384 if i == 0 else 0.0,
                "tokens_off": i == 0,
                "prefix_cache_hit_rate": 0.667,
                "ttft_p50_by_turn": {"1": 0.01, "2": 0.012},
            }
        )  # fmt: skip
        for i, s in enumerate(r.steps)
    ]
    worker = r.config.worker.model_copy(update={"prefix_tokens": 256, "turns": 2})
    config = r.config.model_copy(update={"worker": worker})
    return r.model_copy(update={"steps": steps, "config": config})


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
def test_report_opens_in_chromium_without_errors_and_every_image_loads(tmp_path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    write_all(tmp_path, _result_with_traffic())
    report = tmp_path / "report.html"
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(report.as_uri())
            page.wait_for_load_state("load")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.alt, e.complete, e.naturalWidth])"
            )
            text = page.inner_text("body")
            verdict = page.inner_text("div.box")
            knee_row = page.inner_text("tr.knee")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    # Every plot a reader expects, each drawn (a broken data URL loads with width 0).
    names = [alt for alt, _, _ in images]
    assert {"throughput", "latency", "latency_vs_throughput", "engine"} <= set(names), names
    broken = [alt for alt, complete, width in images if not complete or width == 0]
    assert broken == []
    # The verdict box names the saturation point and its cause, as the sweep found them.
    assert "Saturation at concurrency 224: 1567.9 output tok/s" in verdict, verdict
    assert "Limiting cause: token-cap (inferred cap 256)" in verdict, verdict
    # ... and the steps table marks that step.
    assert knee_row.split()[:2] == ["11", "224"] and "saturation point" in knee_row
    # What a reader looks for: the verdict, the traffic table, the flagged step.
    assert "Saturation" in text and "Traffic" in text and "prefix-cache hits" in text
    assert "served tokens off what was asked: prompt +7.8%" in text
    assert (tmp_path / "report.png").stat().st_size > 10_000
