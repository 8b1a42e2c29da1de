"""`headroom snapshot` against each engine's page, as a user runs it.

Each fixture of tests/fixtures/engines/ is served by a real HTTP server on 127.0.0.1
and read by the CLI in its own process. The page does not change during the window, so
what waits keeps waiting: the diagnosis may only give verdicts the page's fields
support, and must say which it cannot make.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest


def snapshot(url: str, *extra: str, json_out: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "headroom", "snapshot", "--vllm", url, "--no-nvml",
            "--no-host", "--window", "1", "--interval", "0.25", *extra,
            *(["--json"] if json_out else []),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


@dataclass(frozen=True)
class Case:
    fixture: str
    flavour: str
    running: float | None
    waiting: float | None
    # The engine verdict the page supports, if any, and those it must not give.
    cause: str | None
    unjudged: frozenset[str]


CASES = [
    Case("vllm-0.6-v0.txt", "vllm", 6, 2, "seq-cap", frozenset()),
    Case("vllm-0.8-v1.txt", "vllm", 4, 1, "seq-cap", frozenset({"token-cap"})),
    Case("sglang-0.4.7.txt", "sglang", 12, 4, "kv-cap", frozenset({"token-cap"})),
    # 3 running, none waiting, no GPU reading and no cap known: nothing says more load would
    # fit (no default cap is assumed), so no engine cause is claimed.
    Case("sglang-0.3.txt", "sglang", 3, 0, None, frozenset({"token-cap"})),
    Case("tgi-2.4.txt", "tgi", 9, 7, "seq-cap", frozenset({"kv-cap", "token-cap"})),
    Case("trtllm-1.2.txt", "trtllm", 64, 21, "seq-cap", frozenset({"token-cap"})),
    Case(
        "trtllm-1.0.txt",
        "trtllm",
        None,
        None,
        None,
        frozenset({"kv-cap", "seq-cap", "starved", "token-cap"}),
    ),
    Case("triton-trtllm-24.08.txt", "triton-trtllm", 30, 6, "kv-cap", frozenset({"token-cap"})),
    Case("triton-trtllm-23.10.txt", "triton-trtllm", 16, 2, "kv-cap", frozenset({"token-cap"})),
    Case("llamacpp-b4000.txt", "llamacpp", 4, 2, "seq-cap", frozenset({"token-cap"})),
]
ENGINE_CAUSES = {"kv-cap", "seq-cap", "starved", "token-cap"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.fixture)
def test_snapshot_names_the_engine_and_gives_only_what_the_page_allows(
    case: Case, engine_page: Callable[[str], str]
) -> None:
    proc = snapshot(engine_page(case.fixture))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    (e,) = report["engines"]
    assert e["flavour"] == case.flavour
    assert e["flavour_version"]
    assert (e["running"], e["waiting"]) == (case.running, case.waiting)
    unjudged = {u["cause"] for u in e["analysis"]["unjudged"]}
    assert unjudged == case.unjudged
    causes = [v["cause"] for v in report["verdicts"] if v["cause"] in ENGINE_CAUSES]
    assert not set(causes) & case.unjudged, causes
    if case.cause is not None:
        assert causes[:1] == [case.cause], report["verdicts"]
    else:
        assert causes == []
    missing = {m["field"] for m in e["missing"]}
    if case.running is None:
        assert {"running", "waiting"} <= missing


def test_tgi_text_says_what_it_lacks(engine_page: Callable[[str], str]) -> None:
    proc = snapshot(engine_page("tgi-2.4.txt"), json_out=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "(TGI 1.0-3.x)" in out
    assert "missing: KV (none exported)" in out
    assert "cannot judge kv-cap: TGI 1.0-3.x exports no KV gauge and no preemption counter" in out
    # The fix names TGI's own setting, not vLLM's.
    assert "raise --max-batch-size above 9" in out
    assert "--max-num-seqs" not in out


def test_data_parallel_engines_are_each_diagnosed_and_summed(
    engine_page: Callable[[str], str],
) -> None:
    proc = snapshot(engine_page("vllm-0.11-dp2.txt"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [e["engine"] for e in report["engines"]] == ["0", "1"]
    total = report["engines_total"]
    assert (total["engines"], total["running"], total["waiting"]) == (2, 16, 8)
    scopes = {v["scope"] for v in report["verdicts"] if v["cause"] == "seq-cap"}
    assert len(scopes) == 2, report["verdicts"]


def test_a_page_of_no_known_engine_is_one_line_and_exit_1(http_server) -> None:
    http_server.set("/metrics", "# TYPE go_goroutines gauge\ngo_goroutines 12\n")
    proc = snapshot(http_server.url, json_out=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    # Nothing read: no empty table, one line on stderr with the page's fault.
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("headroom snapshot: no GPU or engine source produced data (")
    assert "serves no serving engine's metrics that headroom knows" in proc.stderr


def test_forcing_the_wrong_engine_says_so(engine_page: Callable[[str], str]) -> None:
    proc = snapshot(engine_page("tgi-2.4.txt"), "--engine", "sglang", json_out=False)
    assert proc.returncode == 1
    assert "does not serve SGLang metrics (no sglang: families found)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_triton_reports_its_own_sequence_cap(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    # Triton's batch manager exports its capacity (request_type="max"): the cap is read,
    # not inferred. Here every one of its 64 slots runs, 6 wait and the KV cache has room.
    page = (
        read_fixture("engines/triton-trtllm-24.08.txt")
        .replace('request_type="scheduled",version="1"} 30', 'request_type="scheduled",version="1"} 64')
        .replace('kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.952148',
                 'kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.3')
    )  # fmt: skip
    http_server.set("/metrics", page)
    proc = snapshot(http_server.url)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (e,) = report["engines"]
    assert (e["analysis"]["seq_cap"], e["analysis"]["seq_cap_reported"]) == (64, True)
    (v,) = [v for v in report["verdicts"] if v["cause"] == "seq-cap"]
    assert "running sits at 64 (as the engine reports it)" in v["summary"]
    assert "raise max_batch_size in config.pbtxt above 64" in v["fix"]
