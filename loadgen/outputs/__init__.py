"""The sweep's writers, one per format; ``write_all`` runs them at the end of a sweep."""

from __future__ import annotations

from pathlib import Path

from loadgen.schema import SweepResult


def write_all(out: Path, result: SweepResult) -> None:
    from loadgen.outputs.csv import write_csv
    from loadgen.outputs.html import write_html
    from loadgen.outputs.plots import write_plots

    (out / "sweep.json").write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    write_csv(out / "steps.csv", result.steps)
    plots = write_plots(out, result)
    write_html(out / "report.html", result, plots)
