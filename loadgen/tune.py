"""`headroom tune`: launch the engine, sweep it, follow the cause's knob, relaunch.

Each run: the launch template filled with the run's knob values (and a free {port}), the
engine started in its own process group, a sweep (loadgen.sweep) into its own folder, the
knee's cause and the what-if there (tune_plan.decide), and a record appended to tune.json
at once, so Ctrl-C loses no finished run and --resume goes on from the last. --grid runs
every combination instead, as vLLM's auto_tune does, for comparison.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadgen import tune_plan as plan
from loadgen.progress import Progress
from loadgen.schema import SweepConfig
from monitor.core.errors import ConfigError, HeadroomError

TUNE_JSON = "tune.json"
REPORT = "tune.md"


class EngineStartError(HeadroomError):
    """The engine exited, or never answered, before a run could sweep it."""


@dataclass
class TuneSpec:
    launch: str
    target: str  # may hold {port}
    knobs: list[plan.KnobSpec]
    grid: bool = False
    slos: dict[str, float] = field(default_factory=dict)
    gpu_metrics: str | None = None  # a dcgm-exporter page (may hold {port})
    max_runs: int | None = None
    start_timeout_s: float = 600.0

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": "grid" if self.grid else "tune",
            "launch": self.launch,
            "target": self.target,
            "knobs": {k.name: k.to_json() for k in self.knobs},
            "slos": self.slos,
            "gpu_metrics": self.gpu_metrics,
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""


class Engine:
    """One launch of the engine: its own process group, its output in engine.log."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        try:
            # Its own process group (stop() signals the whole group) but NOT its own session:
            # with a session of its own the kernel's autogroup gives the engine a CPU share
            # of its own, and on a small box vLLM-CPU's API server then starves behind its
            # busy engine (/metrics stalls for seconds, gauges read 0 under load).
            self.proc = subprocess.Popen(
                argv, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_own_group,
            )  # fmt: skip
        except OSError as exc:
            self._out.close()
            raise EngineStartError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None

    def wait_ready(self, target: str, timeout_s: float) -> None:
        """Until /metrics and /v1/models both answer; one line if it exits or never does."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                last = _tail(self.log)
                raise EngineStartError(
                    f"the engine exited (code {code}) before it answered"
                    + (f": {last}" if last else "")
                )
            if all(_answers(f"{target}{p}") for p in ("/metrics", "/v1/models")):
                return
            if time.monotonic() >= deadline:
                raise EngineStartError(
                    f"the engine did not answer at {target} within {timeout_s:g} s"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._out.close()


def _own_group() -> None:
    os.setpgid(0, 0)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


# A run's sweep: given the engine's base URL, its GPU page, the run's folder and the knobs it
# was launched with, the sweep's result as sweep.json holds it. The command builds it from its
# sweep flags.
SweepRunner = Callable[[str, str | None, Path, Mapping[str, float]], dict[str, Any]]
# The knobs that are the diagnosis's caps (Caps' own names): each step's diagnosis starts from
# the launched value.
CAPS = ("max_num_seqs", "max_num_batched_tokens")


class Tuner:
    def __init__(self, spec: TuneSpec, out: Path, sweep: SweepRunner, progress: Progress,
                 resume: bool = False) -> None:  # fmt: skip
        self.spec = spec
        self.out = out
        self.sweep = sweep
        self.progress = progress
        self.slo = bool(spec.slos)
        self.state: dict[str, Any] = {**spec.to_json(), "runs": [], "predictions": [],
                                      "best": None, "stopped": None, "wall_s": 0.0}  # fmt: skip
        path = out / TUNE_JSON
        if resume and path.exists():
            self._resume(json.loads(path.read_text(encoding="utf-8")))
        elif path.exists() and not resume:
            raise ConfigError(f"{path} exists: use --resume, or another --out")

    def _resume(self, old: dict[str, Any]) -> None:
        mine = self.spec.to_json()
        for key in ("mode", "launch", "knobs"):
            if old.get(key) != mine[key]:
                raise ConfigError(
                    f"--resume: {TUNE_JSON} was made with another --{key if key != 'mode' else 'grid'}"
                )
        runs = list(old.get("runs") or [])
        if runs and runs[-1].get("status") == "failed":
            # The engine that failed to start is tried again (its cause may be fixed by now).
            runs.pop()
        self.state.update(runs=runs, wall_s=float(old.get("wall_s") or 0.0))
        self.state["stopped"] = None
        if self.state["runs"]:
            self.progress.message(f"resuming after {len(self.state['runs'])} runs")

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        base = self.state["wall_s"]
        try:
            while True:
                config = self._next_config()
                if config is None:
                    break
                record = self._one_run(len(self.state["runs"]), config)
                self.state["runs"].append(record)
                self.state["wall_s"] = round(base + time.monotonic() - t0, 1)
                self._save()
        except KeyboardInterrupt:
            self.state["stopped"] = "interrupted"
            self.state["wall_s"] = round(base + time.monotonic() - t0, 1)
            self._save()
            raise
        self.state["wall_s"] = round(base + time.monotonic() - t0, 1)
        self._save()
        return self.state

    def _next_config(self) -> dict[str, float] | None:
        runs = self.state["runs"]
        if self.spec.max_runs is not None and len(runs) >= self.spec.max_runs:
            self.state["stopped"] = f"--max-runs {self.spec.max_runs} reached"
            return None
        if self.spec.grid:
            configs = plan.grid_configs(self.spec.knobs)
            if len(runs) >= len(configs):
                self.state["stopped"] = "every combination run"
                return None
            return configs[len(runs)]
        if not runs:
            return plan.start_config(self.spec.knobs)
        last = runs[-1]
        if last.get("status") != "ok":
            self.state["stopped"] = f"run {last['index']} failed: {last.get('error')}"
            return None
        d = last.get("decision") or {}
        if d.get("stop"):
            self.state["stopped"] = d["stop"]
            return None
        return {
            **last["knobs"],
            d["knob"]: d["to"],
            **{c["knob"]: c["to"] for c in d.get("also") or []},
        }

    def _one_run(self, index: int, knobs: dict[str, float]) -> dict[str, Any]:
        spec = self.spec
        run_dir = self.out / f"run-{index:02d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        values: dict[str, Any] = {k: _as_value(v) for k, v in knobs.items()}
        values[plan.PORT] = free_port()
        command = plan.fill(spec.launch, values)
        target = plan.fill(spec.target, values).rstrip("/")
        gpu = plan.fill(spec.gpu_metrics, values) if spec.gpu_metrics else None
        said = ", ".join(f"{k} {v}" for k, v in values.items() if k != plan.PORT)
        self.progress.message(f"run {index}: {said}: {command}")
        record: dict[str, Any] = {"index": index, "knobs": {k: _as_value(v) for k, v in knobs.items()},
                                  "command": command, "dir": run_dir.name}  # fmt: skip
        (run_dir / "config.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
        started = time.monotonic()
        engine: Engine | None = None
        try:
            engine = Engine(shlex.split(command), run_dir / "engine.log")
            engine.wait_ready(target, spec.start_timeout_s)
            sweep = self.sweep(target, gpu, run_dir, knobs)
        except HeadroomError as exc:
            # Said even when quiet: a run lost is news.
            print(f"headroom tune: run {index} ({said}): {exc}", file=sys.stderr, flush=True)
            return {**record, "status": "failed", "error": str(exc),
                    "wall_s": round(time.monotonic() - started, 1)}  # fmt: skip
        finally:
            if engine is not None:
                engine.stop()
        if sweep.get("stopped") == "interrupted":
            raise KeyboardInterrupt
        record.update(status="ok", wall_s=round(time.monotonic() - started, 1))
        record.update(plan.summarise(sweep))
        if not spec.grid:
            runs = self.state["runs"]
            d = plan.decide(sweep, record, spec.knobs, knobs, runs[-1] if runs else None)
            record["decision"] = d.to_json()
        self.progress.message(_said(record))
        return record

    def _save(self) -> None:
        runs = self.state["runs"]
        self.state["best"] = plan.best_run(runs, self.slo)
        preds = []
        for prev, nxt in zip(runs, runs[1:], strict=False):
            row = plan.prediction_row(prev, nxt)
            if row is not None:
                preds.append(row)
        self.state["predictions"] = preds
        tmp = self.out / (TUNE_JSON + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2), encoding="utf-8")
        tmp.replace(self.out / TUNE_JSON)
        (self.out / REPORT).write_text(report(self.state), encoding="utf-8")


def _as_value(v: float) -> float | int:
    return int(v) if float(v).is_integer() else float(v)


def _said(r: dict[str, Any]) -> str:
    knee = r.get("saturation_concurrency")
    line = (
        f"run {r['index']}: knee at concurrency {knee if knee is not None else '-'}, "
        f"{r.get('throughput_tok_s') or 0:.1f} tok/s, cause {r.get('cause') or 'unknown'}"
    )
    if r.get("slo_pass") is not None:
        line += ", SLO " + ("met" if r["slo_pass"] else "missed")
    d = r.get("decision") or {}
    if d.get("knob"):
        line += (
            f"; next {_change(d)}, predicted {d['predicted_tok_s']:.1f} tok/s (x{d['gain']:.2f})"
        )
        if d.get("note"):
            line += f" ({d['note']})"
    elif d.get("stop"):
        line += f"; stop: {d['stop']}"
    return line


def _change(d: dict[str, Any]) -> str:
    """A decision's change (or a prediction row's), with the what-if's next one made with it."""
    first = {"knob": d["knob"], "current": d.get("current", d.get("from")), "to": d["to"]}
    return " and ".join(
        f"{c['knob']} {_cell(c['current'])} -> {_cell(c['to'])}"
        for c in [first, *(d.get("also") or [])]
    )


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def report(state: dict[str, Any]) -> str:
    """The path taken, as a short Markdown page."""
    lines = [f"# headroom tune ({state['mode']})", "", f"launch: `{state['launch']}`", ""]
    if state.get("slos"):
        lines += ["SLO: " + ", ".join(f"{k}={v:g}" for k, v in state["slos"].items()), ""]
    lines += [
        "| run | knobs | knee (concurrency) | tok/s at knee | cause | SLO | next |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in state["runs"]:
        knobs = " ".join(f"{k}={_cell(v)}" for k, v in r["knobs"].items())
        if r.get("status") != "ok":
            lines.append(f"| {r['index']} | {knobs} | failed: {r.get('error')} | | | | |")
            continue
        d = r.get("decision") or {}
        nxt = f"{_change(d)} (x{d['gain']:.2f} predicted)" if d.get("knob") else d.get("stop") or ""
        slo = "-" if r.get("slo_pass") is None else ("met" if r["slo_pass"] else "missed")
        lines.append(
            f"| {r['index']} | {knobs} | {_cell(r.get('saturation_concurrency'))} | "
            f"{_cell(r.get('throughput_tok_s'))} | {r.get('cause') or '-'} | {slo} | {nxt} |"
        )
    b = state.get("best")
    lines += [""]
    if b:
        knobs = " ".join(f"{k}={_cell(v)}" for k, v in b["knobs"].items())
        lines.append(
            f"best: run {b['run']}, {knobs}: {_cell(b['throughput_tok_s'])} tok/s at the knee"
        )
    if state.get("predictions"):
        lines += ["", "| from run | change | predicted tok/s | measured tok/s | ratio |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for p in state["predictions"]:
            lines.append(
                f"| {p['run']} | {_change(p)} | "
                f"{_cell(p['predicted_tok_s'])} | {_cell(p['measured_tok_s'])} | {_cell(p['ratio'])} |"
            )
    lines += ["", f"stopped: {state.get('stopped') or '-'}; wall {state.get('wall_s', 0):g} s", ""]
    return "\n".join(lines)


def sweep_runner(make_config: Callable[[str, str | None], SweepConfig], progress: Progress,
                 nvml: bool = False) -> SweepRunner:  # fmt: skip
    """A run's sweep through loadgen.sweep: adaptive doubling to the knee, its cause."""

    def run(
        target: str, gpu: str | None, run_dir: Path, knobs: Mapping[str, float]
    ) -> dict[str, Any]:
        from loadgen.sweep import Sweep, build_sampler

        # The caps this run was launched with are known, not to be inferred from a plateau.
        caps = {
            plan.WHATIF_KNOB[k]: int(v) for k, v in knobs.items() if plan.WHATIF_KNOB[k] in CAPS
        }
        cfg = make_config(target, gpu).model_copy(update=caps)
        sampler, _ = build_sampler(cfg, nvml=nvml)
        resume = (run_dir / "steps.jsonl").exists()
        result = Sweep(cfg, run_dir, sampler=sampler, progress=progress, resume=resume,
                       argv=["headroom", "tune"]).run()  # fmt: skip
        return json.loads(result.model_dump_json())

    return run


def check_templates(
    launch: str, target: str, gpu: str | None, knobs: Sequence[plan.KnobSpec]
) -> None:
    plan.check_template("--launch", launch, knobs, need_all=True)
    plan.check_template("--target", target, knobs, need_all=False)
    if gpu:
        plan.check_template("--dcgm-exporter", gpu, knobs, need_all=False)
    try:
        argv = shlex.split(launch)
    except ValueError as exc:
        raise ConfigError(f"--launch: {exc}") from None
    if not argv:
        raise ConfigError("--launch is empty")
