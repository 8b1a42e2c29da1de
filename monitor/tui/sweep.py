"""Follow a sweep's files (``steps.jsonl`` while it runs, ``sweep.json`` when done) for the sweep view.

Reads plain JSON so that monitor/ does not import loadgen (the import direction
is loadgen -> monitor). Field names are those of loadgen's StepResult and
SweepResult schemas.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from monitor.tui import fmt


@dataclass(frozen=True, slots=True)
class SweepState:
    path: str
    steps: tuple[Mapping[str, Any], ...] = ()
    saturation: Mapping[str, Any] | None = None
    stopped: str | None = None
    error: str | None = None
    # The engine as the sweep found it (before.json, written before the first step).
    before: Mapping[str, Any] | None = None


def steps_path(path: str | Path) -> Path:
    """A sweep's output directory or its steps file -> the steps file."""
    p = Path(path)
    return p / "steps.jsonl" if p.is_dir() or p.suffix == "" else p


def read_sweep(path: str | Path) -> SweepState:
    """Whatever the sweep has written so far; a partial last line (being written) is skipped."""
    steps_file = steps_path(path)
    steps: list[Mapping[str, Any]] = []
    try:
        with steps_file.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and "index" in obj:
                    steps.append(obj)
    except FileNotFoundError:
        return SweepState(str(steps_file), error=f"{steps_file}: no steps yet")
    except OSError as exc:
        return SweepState(str(steps_file), error=f"{steps_file}: {exc.strerror or exc}")
    saturation = stopped = None
    before = _read_json(steps_file.with_name("before.json"))
    result_file = steps_file.with_name("sweep.json")
    if result_file.exists():
        try:
            result = json.loads(result_file.read_text(encoding="utf-8"))
            saturation = result.get("saturation")
            stopped = result.get("stopped")
        except (OSError, ValueError):
            pass
    steps.sort(key=lambda s: s.get("index", 0))
    return SweepState(str(steps_file), tuple(steps), saturation, stopped, before=before)


def _read_json(path: Path) -> Mapping[str, Any] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def measured_nothing(step: Mapping[str, Any]) -> bool:
    """Nothing came back in the step's hold, no request finished and no token arrived: it
    measured nothing (loadgen.analysis's rule, read from the JSON)."""
    return (
        step.get("requests_completed") == 0
        and not step.get("requests_failed")
        and not step.get("output_tokens_per_s")
    )


def load_of(step: Mapping[str, Any]) -> float | None:
    v = step.get("concurrency")
    if v is None:
        v = step.get("rate")
    return float(v) if isinstance(v, (int, float)) else None


def effective(steps: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One step per load, the one the analysis reads (loadgen.analysis.effective_steps): the
    last valid measurement, else the last; a freeze's steps and those that measured nothing
    left out. A load measured again after a freeze is one point, not two."""
    by_load: dict[float, Mapping[str, Any]] = {}
    for s in sorted(steps, key=lambda s: s.get("index", 0)):
        x = load_of(s)
        if x is None or s.get("stalled") or measured_nothing(s):
            continue
        prev = by_load.get(x)
        if prev is None or s.get("valid", True) or not prev.get("valid", True):
            by_load[x] = s
    return [by_load[x] for x in sorted(by_load)]


def chart(
    steps: Sequence[Mapping[str, Any]],
    key: str,
    width: int,
    height: int,
    mark_load: float | None = None,
) -> list[str]:
    """A small scatter of ``key`` against load (log2 x axis when the steps double).

    Each load is a ``*``, its step as the analysis reads it (``effective``: a load measured
    again after a freeze is one point, a step where nothing came back none); the
    saturation step, when known, an ``S``.
    """
    if not steps:
        return ["(no steps yet)"]
    pts = [(load_of(s), s.get(key)) for s in effective(steps)]
    pts = [(x, float(y)) for x, y in pts if x is not None and x > 0 and isinstance(y, (int, float))]
    if not pts:
        return ["(no step has this figure: none finished a request in its hold)"]
    if width < 10 or height < 3:
        return ["(too narrow to draw)"]
    xs = [math.log2(x) for x, _ in pts]
    x0, x1 = min(xs), max(xs)
    top = max(y for _, y in pts) or 1.0
    grid = [[" "] * width for _ in range(height)]
    for (x, y), lx in zip(pts, xs):
        col = 0 if x1 == x0 else int((lx - x0) / (x1 - x0) * (width - 1) + 0.5)
        row = height - 1 - int(y / top * (height - 1) + 0.5)
        grid[row][col] = "S" if mark_load is not None and x == mark_load else "*"
    label_w = 8
    lines = []
    for i, row in enumerate(grid):
        label = fmt.si(top, "") if i == 0 else ("0" if i == height - 1 else "")
        lines.append(f"{label:>{label_w}} |" + "".join(row))
    lo, hi = min(x for x, _ in pts), max(x for x, _ in pts)
    if lo == hi:
        # One load: its label under its point (at the left), not the same number twice.
        axis = f"{lo:g} (one load)"
    else:
        axis = f"{lo:g}".ljust(width - len(f"{hi:g}")) + f"{hi:g}"
    lines.append(" " * label_w + " +" + "-" * width)
    lines.append(" " * (label_w + 2) + axis)
    return lines


class SweepLauncher:
    """Starts a sweep as a child process writing to ``out_dir``; the sweep view follows its files.

    The command is the caller's (the demo aims `headroom sweep` at its simulator);
    the child's output goes to ``out_dir/launcher.log`` so it never draws on the UI.
    """

    def __init__(self, command: Sequence[str], out_dir: str | Path | Callable[[], Path]) -> None:
        self.command = list(command)
        # A callable gives a fresh folder for each sweep started (the demo's, under the
        # state directory); a path is reused.
        self._out = out_dir
        self.out_dir = Path(out_dir) if not callable(out_dir) else Path()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> Path:
        if callable(self._out):
            self.out_dir = self._out()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._log = (self.out_dir / "launcher.log").open("ab")
        # "{out}" in the command stands for the output directory.
        command = [c.replace("{out}", str(self.out_dir)) for c in self.command]
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        return self.out_dir

    def stop(self, timeout: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            # SIGINT first: the sweep writes what it has (sweep.json, stopped: interrupted).
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
