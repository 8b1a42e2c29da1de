"""The automatic profile: taken while cpu-bound holds, at most once per process every N s,
never two at once; a refusal is logged, not raised."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from monitor.profiling.pyspy import ProfileError, build_profile
from monitor.profiling.runner import Profiler
from monitor.window.stats import ThreadLoad

RAW = "thread (7): EngineCore;detokenize (vllm/v1/engine/detokenizer.py:120) 10\n"


@dataclass
class FakeMonitor:
    listeners: list = field(default_factory=list)
    profile: Any = None
    refreshed: int = 0
    win: Any = None

    def set_cpu_profile(self, p: Any) -> None:
        self.profile = p

    def refresh(self) -> None:
        self.refreshed += 1

    def window(self) -> Any:
        return self.win


@dataclass
class V:
    cause: str


@dataclass
class D:
    verdicts: tuple


@dataclass
class H:
    busiest_thread: ThreadLoad | None
    pids: tuple = (5,)


@dataclass
class W:
    host: H


def test_profiles_while_cpu_bound_at_most_once_per_period() -> None:
    now = [1000.0]
    calls: list[tuple] = []
    done = threading.Event()

    def take(pid: int, seconds: float, rate: int, **kw: Any) -> Any:
        calls.append((pid, seconds, rate, kw["want_tid"], kw["subprocesses"]))
        done.set()
        return build_profile(RAW, pid, seconds, rate, kw["want_tid"], kw["thread_name"])

    mon = FakeMonitor()
    prof = Profiler(mon, seconds=10, every_s=300, clock=lambda: now[0], take=take)
    window = W(H(ThreadLoad(5, 7, "EngineCore", 0.97)))
    prof._on_diagnosis(D((V("starved"),)), window)
    assert not done.wait(0.3)  # no cpu-bound: no profile
    prof._on_diagnosis(D((V("cpu-bound"),)), window)
    assert done.wait(10)
    deadline = time.monotonic() + 10
    while prof.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == [(5, 10.0, 20, 7, False)]
    assert mon.profile.thread == "EngineCore" and mon.refreshed == 1
    now[0] += 299  # still within the period: not again
    prof._on_diagnosis(D((V("cpu-bound"),)), window)
    time.sleep(0.2)
    assert len(calls) == 1
    now[0] += 2
    done.clear()
    prof._on_diagnosis(D((V("cpu-bound"),)), window)
    assert done.wait(10) and len(calls) == 2


def test_a_refused_automatic_profile_is_remembered_not_raised() -> None:
    def take(*a: Any, **kw: Any) -> Any:
        raise ProfileError("no permission to read process 5 (ptrace): ...")

    mon = FakeMonitor()
    prof = Profiler(mon, seconds=1, take=take)
    prof._on_diagnosis(D((V("cpu-bound"),)), W(H(ThreadLoad(5, 7, "EngineCore", 1.0))))
    deadline = time.monotonic() + 10
    while prof.last_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert prof.last_error is not None and "ptrace" in prof.last_error
    assert mon.profile is None and not prof.running


def test_on_demand_needs_an_engine_process() -> None:
    prof = Profiler(FakeMonitor(win=None), seconds=1, auto=False)
    with pytest.raises(ProfileError, match="no engine process"):
        prof.profile_now(1)
