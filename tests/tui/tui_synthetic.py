"""Raw snapshots of the four stories, built by hand (no simulator): a box whose every figure is chosen.

Used to exercise the TUI and recordings without processes; the recordings
under tests/fixtures/recordings/ come from the real simulator instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.sources import samples

LAT_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, float("inf"))
URL = "http://127.0.0.1:8000/metrics"
WALL0 = 1_700_000_000.0


@dataclass(frozen=True)
class Story:
    util: float
    sm_active: float
    tensor: float
    dram: float
    running: float
    waiting: float
    kv: float
    req_per_s: float
    latency_s: float
    engine_thread: float  # share of a core


STORIES = {
    "starved": Story(0.15, 0.12, 0.08, 0.1, 10, 0, 0.1, 1.0, 10.0, 0.2),
    "seq-cap": Story(0.6, 0.5, 0.3, 0.35, 64, 40, 0.4, 6.0, 10.0, 0.4),
    "cpu-bound": Story(0.3, 0.25, 0.15, 0.2, 48, 0, 0.3, 4.0, 12.0, 0.99),
    "launch-bound": Story(0.95, 0.04, 0.01, 0.02, 32, 0, 0.2, 3.0, 10.0, 0.5),
}


def _hist(value: float, count: float) -> samples.Histogram:
    buckets = tuple((le, count if value <= le else 0.0) for le in LAT_BOUNDS)
    return samples.Histogram(buckets=buckets, sum=value * count, count=count)


def snapshots(
    story: str, n: int = 12, start: int = 0, errors: tuple[samples.SourceError, ...] = ()
) -> list[samples.Snapshot]:
    s = STORIES[story]
    out = []
    for i in range(start, start + n):
        t = 100.0 + i
        done = s.req_per_s * i
        gpu = samples.GpuSample(
            index=0,
            uuid="GPU-0000",
            name="NVIDIA H200",
            source="dcgm-exporter",
            util=s.util,
            sm_active=s.sm_active,
            sm_occupancy=s.sm_active / 3,
            tensor_active=s.tensor,
            dram_active=s.dram,
            power_watts=150 + 500 * s.util,
            power_limit_watts=700.0,
            sm_clock_hz=1.98e9,
            sm_clock_max_hz=1.98e9,
            temperature_c=55.0,
            memory_used_bytes=120 * 2**30,
            memory_total_bytes=141 * 2**30,
        )
        eng = samples.EngineSample(
            url=URL,
            model_name="llama-8b",
            engine="0",
            running=s.running,
            waiting=s.waiting,
            waiting_capacity=s.waiting,
            waiting_deferred=0.0,
            kv_cache_usage=s.kv,
            preemptions_total=0.0,
            prompt_tokens_total=done * 256,
            generation_tokens_total=done * 128,
            request_success_total=done,
            histograms=(
                ("e2e_request_latency_seconds", _hist(s.latency_s, done)),
                ("inter_token_latency_seconds", _hist(s.latency_s / 128, done * 128)),
                ("time_to_first_token_seconds", _hist(0.2, done)),
            ),
        )
        host = samples.HostSample(
            cpu_count=16,
            cpu_total_seconds=16.0 * i,
            cpu_idle_seconds=16.0 * i * 0.8,
            cpu_steal_seconds=0.0,
            processes=(
                samples.ProcessCpu(
                    pid=4242,
                    name="vllm",
                    cpu_seconds=(s.engine_thread + 0.3) * i,
                    threads=(
                        samples.ThreadCpu(4243, "EngineCore", s.engine_thread * i),
                        samples.ThreadCpu(4244, "api", 0.3 * i),
                    ),
                ),
            ),
        )
        out.append(
            samples.Snapshot(
                t=t,
                wall=WALL0 + i,
                gpus=(gpu,),
                engines=(eng,),
                host=host,
                errors=errors,
                duration_s=0.01,
            )
        )
    return out
