"""The live window gives what a full recomputation gives, tick after tick.

Replayed readings go through ``LiveWindow`` and, at every tick, ``compute_window`` over
the same span of the ring (as ``Sampler.window`` takes it): readings leave the window,
counters reset, histograms restart (once with new buckets), sources miss ticks, engines
come and go, and the window's length changes.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from monitor.read.recording import read_recording
from monitor.read.sampler import Sampler
from monitor.sources import samples
from monitor.sources.base import Reading
from monitor.sources.paced import Paced
from monitor.window.live import LiveWindow
from monitor.window.stats import WindowStats

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal, floats bit for bit: a verdict prints 0.285 as 28% and 0.28500000000000003 as
    29%, so a mean a few ulps off changes what the user reads."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), where
        else:
            assert a == b, f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


class _Page:
    """A source the sampler only names: replayed readings are pushed, never read."""

    def __init__(self, name: str) -> None:
        self.name = name

    def read(self) -> Reading:
        return Reading()

    def close(self) -> None:
        pass


def _sampler(capacity: int, paced: dict[str, float] | None) -> Sampler:
    """A sampler at 100 ms ticks reading the ``paced`` sources (name: every_s) paced."""
    sources = [Paced(_Page(name), every_s) for name, every_s in (paced or {}).items()]
    return Sampler(sources, interval=0.1, capacity=capacity)


def reference(
    ring: Sequence[samples.Snapshot], seconds: float, paced: dict[str, float] | None = None
) -> WindowStats:
    """Sampler.window over the ring: the last ``seconds`` plus one baseline snapshot."""
    sampler = _sampler(len(ring) or 1, paced)
    for snap in ring:
        sampler.push(snap)
    return sampler.window(seconds)


def check_replay(
    snaps: Sequence[samples.Snapshot],
    seconds: float,
    capacity: int = 10_000,
    paced: dict[str, float] | None = None,
) -> int:
    live = LiveWindow(seconds, capacity=capacity, reach=_sampler(1, paced).reach)
    ring: list[samples.Snapshot] = []
    for i, snap in enumerate(snaps):
        ring.append(snap)
        del ring[:-capacity]
        live.push(snap)
        assert_same(live.stats(), reference(ring, seconds, paced), f"tick {i}")
    return len(snaps)


BOUNDS = (0.01, 0.1, 1.0, math.inf)
NEW_BOUNDS = (0.05, 0.5, 5.0, math.inf)


def _hist(
    rng: random.Random, prev: samples.Histogram | None, bounds: tuple[float, ...]
) -> samples.Histogram:
    counts = [c for _, c in prev.buckets] if prev is not None else [0.0] * len(bounds)
    added = 0.0
    cum = []
    for c in counts:
        added += rng.randint(0, 3)
        cum.append(c + added)
    return samples.Histogram(
        tuple(zip(bounds, cum)),
        sum=(prev.sum if prev else 0.0) + added * rng.random() * 0.3,
        count=cum[-1],
    )


def synthetic(n: int, seed: int) -> list[samples.Snapshot]:
    """Readings with everything the window must survive."""
    rng = random.Random(seed)
    snaps: list[samples.Snapshot] = []
    t = 1000.0
    counters: dict[str, float] = {}
    hists: dict[tuple[str, str], samples.Histogram] = {}
    bounds = BOUNDS
    cpu = [0.0, 0.0, 0.0]
    energy = [5e6, 0.0]
    for i in range(n):
        t += rng.choice((0.1, 0.1, 0.1, 0.35, 1.2))  # late ticks, and gaps
        gpus = []
        for idx in range(2):
            if rng.random() < 0.1:
                continue  # this GPU missed the tick
            # An energy counter that grows, now and then restarts (a driver reload), and
            # is missing on a MIG instance's tick or two.
            energy[idx] = 0.0 if rng.random() < 0.01 else energy[idx] + rng.uniform(10, 70)
            gpus.append(
                samples.GpuSample(
                    index=idx,
                    uuid=f"GPU-{idx}",
                    name="H200",
                    source="nvml",
                    util=rng.choice((None, 0.0, 0.3, 0.99, rng.random())),
                    sm_active=rng.choice((None, 0.0, rng.random())),
                    tensor_active=0.0 if rng.random() < 0.5 else rng.random(),
                    power_watts=rng.uniform(80, 700),
                    temperature_c=float(rng.randint(30, 80)),
                    throttle_reasons=rng.choice((None, (), ("sw_power_cap",), ("hw_slowdown",))),
                    memory_used_bytes=rng.randint(0, 10**11),
                    # Process lists come every few ticks, not every tick; GPU 1 is a MIG
                    # instance of GPU 0.
                    processes=(samples.GpuProcess(pid=rng.randint(1, 9), sm_share=rng.random()),)
                    if rng.random() < 0.2
                    else None,
                    mig_parent=0 if idx == 1 else None,
                    mig_instance=1 if idx == 1 else None,
                    energy_joules=None if idx == 1 and rng.random() < 0.3 else energy[idx],
                    energy_source="counter",
                )
            )
        if i == n // 2:
            bounds = NEW_BOUNDS  # a restart with other buckets
            hists.clear()
        engines = []
        # Label churn: model names and LoRA adapters appear and go.
        for model in ("base", f"lora-{(i // 17) % 3}", f"churn-{i // 5}"):
            if rng.random() < 0.15:
                continue
            fields: dict[str, Any] = {}
            for name in ("prompt_tokens_total", "generation_tokens_total", "request_success_total"):
                key = f"{model}/{name}"
                v = counters.get(key, 0.0) + rng.randint(0, 500)
                if rng.random() < 0.04:
                    v = float(rng.randint(0, 50))  # server restarted: the counter reset
                counters[key] = v
                fields[name] = v if rng.random() > 0.05 else None
            fields["estimated_flops_total"] = counters.setdefault(f"{model}/f", 0.0) + 1e15 * i
            hs = []
            for hname in ("time_to_first_token_seconds", "e2e_request_latency_seconds"):
                prev = hists.get((model, hname))
                if prev is not None and rng.random() < 0.04:
                    prev = None  # reset
                h = _hist(rng, prev, bounds)
                hists[(model, hname)] = h
                if rng.random() > 0.05:
                    hs.append((hname, h))
            engines.append(
                samples.EngineSample(
                    url="http://127.0.0.1:8000",
                    model_name=model,
                    engine="0",
                    running=float(rng.randint(0, 64)) if rng.random() > 0.1 else None,
                    waiting=float(rng.choice((0, 0, 3, rng.randint(0, 40)))),
                    kv_cache_usage=rng.choice((0.0, rng.random(), None)),
                    seq_cap_reported=rng.choice((None, None, 0.0, 64.0, 128.0)),
                    prefix_cache_hit_rate=rng.choice((None, rng.random())),
                    histograms=tuple(hs),
                    **fields,
                )
            )
        cpu = [c + rng.random() for c in cpu]
        host = None
        if rng.random() > 0.1:
            threads = tuple(samples.ThreadCpu(100 + k, f"t{k}", cpu[k]) for k in range(2))
            procs = (
                (samples.ProcessCpu(42, "vllm", cpu[2], threads),) if rng.random() > 0.05 else ()
            )
            host = samples.HostSample(
                cpu_count=2,
                cpu_total_seconds=2 * t,
                cpu_idle_seconds=t * rng.uniform(0.2, 0.9),
                cpu_steal_seconds=0.0,
                cpu_freq_mhz=rng.choice((None, rng.uniform(2000, 3000))),
                processes=procs,
            )
        load = (("target_concurrency", float(rng.randint(1, 8))),) if rng.random() > 0.3 else ()
        errors = (samples.SourceError("vllm", "x", "timed out"),) if rng.random() < 0.05 else ()
        snaps.append(
            samples.Snapshot(
                t=t,
                wall=t + 1.7e9,
                gpus=tuple(gpus),
                engines=tuple(engines),
                host=host,
                errors=errors,
                load=load,
            )  # fmt: skip
        )
    return snaps


@pytest.mark.parametrize("seconds", [0.5, 2.0, 10.0])
def test_live_window_equals_full_recomputation(seconds: float) -> None:
    assert check_replay(synthetic(400, seed=int(seconds * 10)), seconds) == 400


def test_live_window_follows_the_ring_when_it_holds_fewer_than_the_window() -> None:
    check_replay(synthetic(200, seed=7), seconds=60.0, capacity=25)


@pytest.mark.parametrize("seconds", [0.5, 2.0])
def test_paced_sources_own_baselines_equal_the_full_recomputation(seconds: float) -> None:
    # GPUs, engines and the host read every few ticks take their own baseline reading
    # before the window's baseline snapshot, each within its source's reach (Sampler.reach).
    paced = {"nvml": 0.2, "vllm": 0.9, "host": 0.4}
    assert check_replay(synthetic(400, seed=int(seconds * 10) + 1), seconds, paced=paced) == 400
    check_replay(synthetic(200, seed=8), seconds, capacity=12, paced=paced)


@pytest.mark.parametrize(
    "name",
    ["recordings/seq-cap.jsonl", "recordings/cpu-bound.jsonl", "gpu/h200/storyb-100ms.jsonl"],
)
def test_live_window_equals_full_recomputation_on_recordings(name: str) -> None:
    snaps = [t.snapshot for t in read_recording(FIXTURES / name).ticks if t.snapshot is not None]
    assert len(snaps) > 20
    check_replay(snaps, seconds=5.0)


def test_rebuild_after_the_window_length_changes() -> None:
    snaps = synthetic(120, seed=3)
    live = LiveWindow(2.0)
    for snap in snaps:
        live.push(snap)
    live.rebuild(snaps, seconds=8.0)
    assert_same(live.stats(), reference(snaps, 8.0))


def test_long_runs_do_not_drift() -> None:
    """Thousands of readings in and out: the means are still the full recomputation's, bit
    for bit, and a window of zeros reads exactly zero."""
    rng = random.Random(11)
    snaps = []
    for i in range(3000):
        util = 0.0 if i > 2900 else rng.random()
        snaps.append(
            samples.Snapshot(
                t=float(i),
                wall=float(i),
                gpus=(
                    samples.GpuSample(
                        0, "GPU-0", "H200", "nvml", util=util, power_watts=rng.uniform(100, 700)
                    ),
                ),
            )  # fmt: skip
        )
    live = LiveWindow(30.0)
    for snap in snaps:
        live.push(snap)
    got = live.stats()
    assert_same(got, reference(snaps, 30.0))
    assert got.gpus[0].util == 0.0
