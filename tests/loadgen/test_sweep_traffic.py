"""Production-like traffic end to end: real Locust against the simulator (or the fake server).

One simulator serves every test of the module; steps are short, so the module takes
about a minute on two cores.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from headroom.cli import main

simulator = pytest.importorskip("simulator")

DATASET = Path(__file__).resolve().parents[2] / "datasets" / "chat-longtail.jsonl"
SHORT = ["--step-seconds", "3", "--warmup-seconds", "1", "--sample-interval", "0.5", "--quiet"]


@pytest.fixture(scope="module")
def sim() -> Iterator:
    h = simulator.start_sim(scenario="seq-cap", port=0, load=False)
    yield h
    h.stop()


def sweep(h, out: Path, *flags: str) -> list[dict]:
    rc = main(["sweep", "--target", h.url, *SHORT, *flags, "--out", str(out)])
    assert rc == 0
    return json.loads((out / "sweep.json").read_text())["steps"]


def _records(out: Path) -> list[dict]:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("k") == "r"]


def test_shared_prefixes_are_served_from_the_prefix_cache_with_exact_lengths(sim, tmp_path) -> None:
    (step,) = sweep(sim, tmp_path / "p", "--concurrency", "4", "--input-tokens", "100",
                    "--output-tokens", "12", "--shared-prefix-tokens", "320",
                    "--prefix-groups", "2")  # fmt: skip
    # Through the simulator's /tokenize: every prompt is exactly 320 + 100 tokens.
    assert step["requested_prompt_tokens_mean"] == step["served_prompt_tokens_mean"] == 420
    assert step["served_completion_tokens_mean"] == 12 and not step["tokens_off"]
    # 320 of 420 tokens are cached after the first request of each group (20 blocks of 16).
    assert step["prefix_cache_hit_rate"] == pytest.approx(320 / 420, abs=0.03)
    (plain,) = sweep(sim, tmp_path / "n", "--concurrency", "4", "--input-tokens", "100",
                     "--output-tokens", "12")  # fmt: skip
    assert plain["prefix_cache_hit_rate"] == pytest.approx(0.0, abs=0.01)


def test_conversations_carry_their_history_and_report_ttft_by_turn(sim, tmp_path) -> None:
    (step,) = sweep(sim, tmp_path / "c", "--concurrency", "3", "--turns", "3", "--think-time",
                    "0.1", "--input-tokens", "40", "--output-tokens", "8")  # fmt: skip
    assert set(step["ttft_p50_by_turn"]) == {"1", "2", "3"}
    assert step["client_limited"] is False  # thinking users are not a generator falling short
    served: dict[int, set[int]] = {}
    for r in _records(tmp_path / "c"):
        served.setdefault(r["turn"], set()).add(r["in"])
    # The simulator's chat template: 4 tokens a message. Turn 1: 40 tokens asked; each later
    # turn adds the 8-token reply and a new 40-token question, all with their markers.
    assert served[1] == {40}
    assert served[2] == {40 + (8 + 4) + 40}
    assert served[3] == {40 + 2 * (8 + 4 + 40)}
    assert step["prefix_cache_hit_rate"] > 0.3  # the history is a prefix the engine has seen


def _trace(path: Path, n: int = 30, rate: float = 12.0) -> Path:
    rng = random.Random(5)
    t = 0.0
    lines = []
    for i in range(n):
        t += rng.expovariate(rate)
        lines.append(json.dumps({"timestamp": round(t * 1000), "input_length": 64 + 8 * (i % 5),
                                 "output_length": 6, "hash_ids": [1, 2] if i % 2 else [3]}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trace_replay_sends_every_entry_on_schedule_at_each_speed(sim, tmp_path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    steps = sweep(sim, tmp_path / "t", "--trace", str(trace), "--trace-time-unit", "ms",
                  "--trace-block-tokens", "32", "--speed", "1,2")  # fmt: skip
    assert [s["speed"] for s in steps] == [1.0, 2.0]
    for s in steps:
        assert s["requests_completed"] == 30 and s["valid"] and not s["late"]
        # From the schedule is never shorter than from the send: it adds the lateness.
        assert s["ttft_sched_p50_s"] >= s["ttft_p50_s"] - 1e-6
        assert s["served_prompt_tokens_mean"] == s["requested_prompt_tokens_mean"]
        assert s["prefix_cache_hit_rate"] > 0.1  # entries naming block 1 or 3 share it
    assert steps[1]["rate"] == pytest.approx(2 * steps[0]["rate"])
    starts = sorted(r["t0"] for r in _records(tmp_path / "t") if r["step"] == steps[1]["index"])
    assert starts[-1] - starts[0] == pytest.approx(steps[0]["duration_s"] / 2, abs=1.0)


def test_a_generator_later_than_max_lag_is_flagged(sim, tmp_path) -> None:
    trace = _trace(tmp_path / "t.jsonl", n=10)
    (step,) = sweep(sim, tmp_path / "l", "--trace", str(trace), "--trace-time-unit", "ms",
                    "--max-lag", "0.000001")  # fmt: skip
    assert step["late"] and not step["valid"] and "late" in step["invalid_reason"]


def test_a_dataset_is_sampled_and_cycled_when_short(sim, tmp_path, capsys) -> None:
    (step,) = sweep(sim, tmp_path / "d", "--dataset", str(DATASET), "--dataset-prompts", "5",
                    "--concurrency", "4", "--output-tokens", "4", "--seed",
                    "3")  # fmt: skip
    assert step["dataset_cycled"] is True
    sent = {r["rin"] for r in _records(tmp_path / "d")}
    assert len(sent) <= 5  # only the five sampled prompts, again and again
    assert step["served_prompt_tokens_mean"] == pytest.approx(step["requested_prompt_tokens_mean"])


def test_approximate_lengths_are_warned_and_a_step_served_off_is_flagged(
    fake_server, tmp_path, capsys
) -> None:
    # The fake has no /tokenize and reports 7 prompt tokens whatever it was sent.
    url = fake_server("--ttft", "0.01", "--itl", "0.005")
    out = tmp_path / "f"
    rc = main(["sweep", "--target", url, "--concurrency", "2", "--input-tokens", "64",
               "--output-tokens", "5", "--step-seconds", "2", "--warmup-seconds", "0.5",
               "--no-engine-metrics", "--out", str(out)])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning: the server has no /tokenize and no --tokenizer was given" in err
    assert "TOKENS OFF: prompt 7/64" in err
    result = json.loads((out / "sweep.json").read_text())
    (step,) = result["steps"]
    assert step["tokens_off"] and step["prompt_tokens_off"] == pytest.approx(7 / 64 - 1, abs=0.01)
    assert any(n.startswith("warning: the server has no /tokenize") for n in result["notes"])
    assert "served tokens off what was asked" in (out / "report.html").read_text()
