"""The progress display while a sweep runs: one live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from loadgen.analysis import measured_nothing
from loadgen.schema import StepResult


def _load(conc: int | None, rate: float | None) -> str:
    return f"c={conc}" if conc is not None else f"rate={rate:g}/s"


def _f(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def littles_words(s: StepResult) -> str:
    """A Little's-law mismatch with its three views, so the flag says what disagreed."""
    return (
        f"Little's law off: in flight {_f(s.client_in_flight_mean, '.1f')} at the client, "
        f"{_f(s.engine_in_flight_mean, '.1f')} at the engine, "
        f"{_f(s.littles_law_in_flight, '.1f')} by req/s x e2e"
    )


class Progress:
    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.live = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_phase: tuple | None = None
        # Whether the workload shares prefixes: without, a 0% prefix-cache hit rate is left out.
        self.prefixes = True
        self._last_draw = 0.0

    def _write(self, text: str) -> None:
        if not self.quiet:
            self.stream.write(text)
            self.stream.flush()

    def message(self, text: str) -> None:
        if self.live:
            self._write("\r\x1b[K")
        self._write(text + "\n")

    def phase(
        self,
        index: int,
        conc: int | None,
        rate: float | None,
        phase: str,
        elapsed: float,
        total: float,
        in_flight: int,
        done: int,
        verdict: str | None = None,
    ) -> None:
        key = (index, phase)
        if not self.live:
            if key != self._last_phase:
                self._last_phase = key
                self._write(f"step {index} {_load(conc, rate)}: {phase} {total:g} s\n")
            return
        now = time.monotonic()
        if now - self._last_draw < 0.2 and key == self._last_phase:
            return
        self._last_draw, self._last_phase = now, key
        width = 20
        filled = int(width * min(1.0, elapsed / total)) if total > 0 else width
        bar = "#" * filled + "." * (width - filled)
        self._write(
            f"\r\x1b[Kstep {index} {_load(conc, rate):<12} {phase:<8} [{bar}] {elapsed:4.0f}/{total:g} s"
            f"  in-flight {in_flight:<5} done {done:<6} engine: {verdict or '-'}"
        )

    def step_done(self, s: StepResult) -> None:
        flags = []
        if measured_nothing(s):
            flags.append("NOTHING CAME BACK: not a measurement")
        if not s.littles_law_ok and s.littles_law_ok is not None:
            flags.append(littles_words(s))
        if s.client_limited:
            flags.append("CLIENT-LIMITED")
        if s.late:
            flags.append("LATE")
        if s.host_stall_s > 0:
            flags.append(f"host froze {s.host_stall_s:.1f} s")
        if s.error_ratio > 0:
            flags.append(f"errors {100 * s.error_ratio:.0f}%")
        if s.tokens_off:
            flags.append("TOKENS OFF: " + _tokens(s))
        if s.dataset_cycled:
            flags.append("dataset cycled")
        self.message(
            f"step {s.index} {_load(s.concurrency, s.rate):<12} {_rps(s):>7} req/s "
            f"{s.output_tokens_per_s:9.1f} tok/s  TTFT p50 {_f(s.ttft_p50_s, '.3f', ' s')}  "
            f"ITL p50 {_f(s.itl_p50_s, '.4f', ' s')}  run/wait {_f(s.running_mean, '.1f')}/"
            f"{_f(s.waiting_mean, '.1f')}  {s.verdict or '-'}"
            + _extras(s, self.prefixes)
            + (f"  [{', '.join(flags)}]" if flags else "")
        )


def _rps(s: StepResult) -> str:
    """Requests finished per second; a dash where none finished in the hold (streams longer
    than it): the rate is not zero, the hold could not see it."""
    return "-" if s.requests_completed == 0 else f"{s.requests_per_s:.2f}"


def _pct(x: float) -> str:
    return f"{100 * x:+.0f}%"


def _tokens(s: StepResult) -> str:
    """Served against requested lengths, e.g. 'prompt 141/128 +10%, completion 32/32'."""
    parts = []
    for name, req, got, off in (
        ("prompt", s.requested_prompt_tokens_mean, s.served_prompt_tokens_mean, s.prompt_tokens_off),
        ("completion", s.requested_completion_tokens_mean, s.served_completion_tokens_mean,
         s.completion_tokens_off),
    ):  # fmt: skip
        if req is not None and got is not None:
            parts.append(f"{name} {got:.0f}/{req:.0f}" + (f" {_pct(off)}" if off else ""))
    return ", ".join(parts)


def energy_words(s: StepResult) -> str:
    """'412 W, 0.055 J/token, 5.3 J/req, $0.34/Mtok' (a dash where not known)."""
    text = (
        f"{s.gpu_power_watts:.0f} W, {_f(s.energy_per_token_joules, '.3g', ' J/token')}, "
        f"{_f(s.energy_per_request_joules, '.3g', ' J/req')}"
    )
    if s.cost_per_million_tokens is not None:
        text += f", ${s.cost_per_million_tokens:.3g}/Mtok"
    return text


def _extras(s: StepResult, prefixes: bool = True) -> str:
    """Figures a step has only with some kinds of traffic."""
    out = []
    if s.prefix_cache_hit_rate is not None and (prefixes or s.prefix_cache_hit_rate > 0):
        out.append(f"prefix hits {100 * s.prefix_cache_hit_rate:.0f}%")
    if s.ttft_sched_p50_s is not None and s.sched_lag_p99_s is not None:
        out.append(f"TTFT from schedule p50 {s.ttft_sched_p50_s:.3f} s, lateness p99 "
                   f"{s.sched_lag_p99_s:.3f} s")  # fmt: skip
    if s.ttft_p50_by_turn:
        out.append("TTFT p50 by turn " + " ".join(f"{v:.3f}" for v in s.ttft_p50_by_turn.values()))
    if s.speed is not None:
        out.append(f"speed {s.speed:g}x")
    if s.gpu_power_watts is not None:
        out.append(energy_words(s))
    mr = (s.ttft_parts or {}).get("median_request")
    if mr:
        out.append(
            f"median TTFT = queue {mr['queue_s']:.3f} + prefill {mr['prefill_s']:.3f} + "
            f"other {mr['engine_other_s']:.3f} + outside {mr['outside_s']:.3f} s"
        )
    if s.ttft_parts and s.ttft_parts.get("outside_note"):
        out.append(s.ttft_parts["outside_note"])
    return "  " + "  ".join(out) if out else ""
