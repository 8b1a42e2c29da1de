"""The progress display while a sweep runs: one live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

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
        self.message(
            f"step {s.index} {_load(s.concurrency, s.rate):<12} {s.requests_per_s:7.2f} req/s "
            f"{s.output_tokens_per_s:9.1f} tok/s  TTFT p50 {_f(s.ttft_p50_s, '.3f', ' s')}  "
            f"ITL p50 {_f(s.itl_p50_s, '.4f', ' s')}  run/wait {_f(s.running_mean, '.1f')}/"
            f"{_f(s.waiting_mean, '.1f')}  {s.verdict or '-'}"
            + (f"  [{', '.join(flags)}]" if flags else "")
        )
