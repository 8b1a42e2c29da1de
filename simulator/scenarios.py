"""Named scenarios: engine settings plus a built-in load that, together, produce one story.

No scenario sets an outcome. Each picks hardware, engine limits and a load, and
the cause follows from the physics: a queue forms because ``max_num_seqs`` is
small, preemptions because the KV cache is, low GPU busy time because 28 ms of
host work per step does not overlap 12 ms of GPU work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from simulator.config import EngineConfig, LoadConfig, SimConfig, apply_overrides, validate
from simulator.errors import SimConfigError


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    engine: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)

    def config(self) -> SimConfig:
        return validate(
            SimConfig(
                scenario=self.name,
                summary=self.summary,
                engine=dataclasses.replace(EngineConfig(), **self.engine),
                load=dataclasses.replace(LoadConfig(), **self.load),
            ),
            f"scenario {self.name}",
        )


def _closed(users: int, *, prompt: int, output: int, **jitter: float) -> dict[str, Any]:
    """A closed loop's load: ``users`` requests always in flight, each of ``prompt`` tokens
    in and ``output`` out, +- the ``prompt_jitter`` / ``output_jitter`` shares given."""
    return {
        "mode": "closed",
        "concurrency": users,
        "prompt_tokens": prompt,
        "output_tokens": output,
        **jitter,
    }


_LIST = (
    Scenario(
        "idle",
        "no requests: the GPU idles, every engine gauge reads 0",
    ),
    Scenario(
        "starved",
        "Story A, light load: 1 req/s of ~10 s requests keeps ~10 of 64 sequence slots busy, "
        "no queue; 6.4 req/s would fill them",
        engine={"max_num_seqs": 64},
        load={
            "mode": "open", "rate": 1.0, "prompt_tokens": 256, "prompt_jitter": 0.2,
            "output_tokens": 1400, "output_jitter": 0.2, "initial_requests": 10,
        },
    ),
    Scenario(
        "seq-cap",
        "scheduler cap on sequences: max_num_seqs 8 under 32 concurrent users, "
        "so 8 run, 24 wait, and the KV cache and GPU have room to spare",
        engine={"max_num_seqs": 8},
        load=_closed(32, prompt=256, output=512),
    ),
    Scenario(
        "kv-cap",
        "scheduler cap on KV cache: 320 blocks (5,120 tokens) for 24 users of ~1,300-token "
        "requests: the cache fills, sequences are preempted and recomputed, requests queue",
        engine={"num_blocks": 320, "max_model_len": 2048},
        load=_closed(24, prompt=512, output=768, prompt_jitter=0.2, output_jitter=0.2),
    ),
    Scenario(
        "token-cap",
        "scheduler cap on the token budget: max_num_batched_tokens 128 with ~2,000-token prompts: "
        "every step is pinned at 128 tokens, prefill-heavy, and re-reads all weights for them",
        engine={"max_num_batched_tokens": 128},
        load=_closed(8, prompt=2000, output=32, prompt_jitter=0.2, output_jitter=0.5),
    ),
    Scenario(
        "cpu-bound",
        "Story B, CPU in the path: A100, 32 decoding sequences, ~12 ms of GPU work then "
        "~28 ms of host work per step that does not overlap: the GPU is busy ~30% of the time",
        engine={
            "gpu": "a100-80gb", "overlap": False, "cpu_step_s": 0.012, "cpu_per_seq_s": 0.0005,
        },
        load=_closed(32, prompt=384, output=768, output_jitter=0.3),
    ),
    Scenario(
        "launch-bound",
        "launch-bound: a 1B model without CUDA graphs launches 1,200 tiny kernels per step; "
        "the GPU always has a kernel running but most SMs sit idle",
        engine={
            "model": "llama-1b", "cuda_graphs": False, "kernels_per_step": 1200,
            "kernel_fixed_s": 0.000007, "launch_overhead_s": 0.000008, "cpu_step_s": 0.0005,
            "cpu_per_seq_s": 0.00001,
        },
        load=_closed(16, prompt=128, output=512),
    ),
    Scenario(
        "compute-bound",
        "saturated, compute-bound: 64 users of ~2,000-token prompts and short answers fill "
        "8,192-token steps: tensor cores busy",
        engine={"max_num_batched_tokens": 8192},
        load=_closed(64, prompt=2048, output=16, prompt_jitter=0.25, output_jitter=0.5),
    ),
    Scenario(
        "memory-bound",
        "saturated, memory-bound: 256 users decoding long answers in one big batch: "
        "every step streams the weights and a large KV cache from HBM",
        engine={"max_num_seqs": 256},
        load=_closed(256, prompt=256, output=1024),
    ),
    Scenario(
        "comm-bound",
        "comm-bound: a 1B model split over 8 H100s (tensor parallel 8) under 160 users of "
        "~4,000-token prompts: each rank's share of a layer is small, the two all-reduces per "
        "layer are not, so over half of each step is NVLink traffic while the tensor cores wait",
        engine={
            "model": "llama-1b", "tensor_parallel_size": 8, "max_num_batched_tokens": 65536,
        },
        load=_closed(160, prompt=4096, output=32, prompt_jitter=0.2, output_jitter=0.5),
    ),
)  # fmt: skip

SCENARIOS: dict[str, Scenario] = {s.name: s for s in _LIST}


def build(
    scenario: str = "idle",
    *,
    engine: dict[str, Any] | None = None,
    load: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    source: str = "overrides",
) -> SimConfig:
    """A scenario's config, with engine/load keys overridden (checked like a config file's)."""
    if scenario not in SCENARIOS:
        raise SimConfigError(f"unknown scenario {scenario!r} (one of: {', '.join(SCENARIOS)})")
    data: dict[str, Any] = dict(overrides or {})
    if engine:
        data["engine"] = {**data.get("engine", {}), **engine}
    if load:
        data["load"] = {**data.get("load", {}), **load}
    return apply_overrides(SCENARIOS[scenario].config(), data, source)
