"""`headroom sweep` end to end against a small fake OpenAI server on loopback."""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.cli import main

QUICK = ["--step-seconds", "2", "--warmup-seconds", "1", "--output-tokens", "10", "--input-tokens", "16",
         "--sample-interval", "0.5", "--quiet"]  # fmt: skip


def quick_sweep(url: str, out: Path, *flags: str) -> int:
    """A sweep of url with the flags given, in QUICK steps, its outputs to out."""
    return main(["sweep", "--target", url, *flags, *QUICK, "--out", str(out)])


def _steps(out: Path) -> list[dict]:
    return [
        json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()
    ]


def _effective(steps: list[dict]) -> list[dict]:
    """The last measurement of each load (a step is measured again when the machine froze)."""
    last = {s["concurrency"] or s["rate"]: s for s in steps}
    return [last[k] for k in sorted(last)]


def test_closed_sweep_finds_the_cap_and_writes_every_output(fake_server, tmp_path, capsys) -> None:
    url = fake_server("--cap", "4", "--ttft", "0.05", "--itl", "0.01")
    out = tmp_path / "sweep"
    rc = main(["sweep", "--target", url, "--concurrency", "1,2,4,8", "--slo", "ttft_p95=0.12", *QUICK,
               "--out", str(out)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    result = json.loads((out / "sweep.json").read_text())
    assert result["schema_version"] == 1
    assert result["stopped"] == "complete"
    sat = result["saturation"]
    assert sat["reached"] and sat["concurrency"] == 4 and sat["inferred_cap"] == 4
    steps = _effective(_steps(out))
    assert [s["concurrency"] for s in steps] == [1, 2, 4, 8]
    by_c = {s["concurrency"]: s for s in steps}
    goodput = result["goodput"]
    assert goodput["met"] and goodput["concurrency"] != 8  # 8 queues: TTFT doubles
    # A freeze of the machine in a 2 s hold adds its length to the first token of every
    # request in flight: under the 1 s that invalidates a step, it still lifts the p95 at 4
    # past 0.12 s (seen with 0.1-0.9 s freezes). Only then may 4 miss the SLO.
    assert goodput["concurrency"] == 4 or by_c[4]["host_stalls"] > 0, (goodput, by_c[4])
    # The fake sends the first token after 50 ms and one every 10 ms.
    assert 0.045 <= by_c[1]["ttft_p50_s"] <= 0.1
    assert 0.008 <= by_c[1]["itl_p50_s"] <= 0.02
    assert by_c[8]["ttft_p50_s"] > 0.1  # four wait for a slot
    assert by_c[8]["running_max"] == 4 and by_c[8]["waiting_mean"] >= 2
    assert by_c[4]["output_tokens_per_s"] > 1.6 * by_c[1]["output_tokens_per_s"]
    for s in steps:
        assert s["error_ratio"] == 0
        assert s["client_in_flight_mean"] == pytest.approx(s["concurrency"], rel=0.1)
        # The fake's gauges lag its socket by milliseconds on a busy host: loose here,
        # exact on the simulator.
        # One stream reads 0 between a finish and the next send in a reading or two of
        # four (a 2 s hold at 0.5 s): half a request of slack at the smallest loads.
        c = s["concurrency"]
        assert abs(s["engine_in_flight_mean"] - c) <= max(0.35 * c, 0.5), (
            c,
            s["engine_in_flight_mean"],
        )
        assert s["client_cpu_ratio"] is not None and not s["client_limited"]
    rows = list(csv.DictReader((out / "steps.csv").read_text().splitlines()))
    assert sorted({int(r["concurrency"]) for r in rows}) == [1, 2, 4, 8]
    assert sum(s["littles_law_ok"] is True for s in steps) >= 3
    pngs = (
        "throughput.png",
        "latency.png",
        "latency_vs_throughput.png",
        "engine.png",
        "ttft_parts.png",
    )
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(pngs) and "Saturation" in html
    raw = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert any(r.get("k") == "r" and r["itl"] for r in raw)  # raw records kept
    done = [r for r in raw if r.get("k") == "r" and r["err"] is None]
    # Each request names the server's id for it, so a slow one can be found in its logs.
    assert len({r["id"] for r in done}) == len(done) and all(
        r["id"].startswith("cmpl-fake") for r in done
    )
    if sys.platform.startswith("linux"):
        # First tokens are timed by the kernel's receive stamp, not when the client got to them.
        assert all(s["ttft_kernel_ratio"] > 0.9 for s in steps)


def test_open_loop_measures_rate_and_scheduling_lag(fake_server, tmp_path, capsys) -> None:
    url = fake_server("--ttft", "0.02", "--itl", "0.005")
    out = tmp_path / "open"
    rc = quick_sweep(url, out, "--rates", "10,40", "--arrival", "constant")
    assert rc == 0, capsys.readouterr().err
    steps = _effective(_steps(out))
    assert [s["rate"] for s in steps] == [10, 40]
    for s in steps:
        assert s["concurrency"] is None
        assert s["requests_per_s"] == pytest.approx(s["rate"], rel=0.3)
        assert s["sched_lag_p50_s"] is not None and s["sched_lag_p50_s"] < 0.05
        # From when each request was due: the send's latency plus its lateness, never less.
        assert s["ttft_sched_p50_s"] >= s["ttft_p50_s"] - 1e-6
        assert s["ttft_sched_p50_s"] - s["ttft_p50_s"] <= s["sched_lag_max_s"] + 1e-6
        assert s["e2e_sched_p99_s"] >= s["e2e_p50_s"]
    assert json.loads((out / "sweep.json").read_text())["config"]["mode"] == "open"


def test_time_to_first_token_outside_the_engine_is_named(fake_server, tmp_path, capsys) -> None:
    # A proxy holds each request 0.3 s before the engine sees it; the engine answers its first
    # token in 0.02 s. The client's TTFT is mostly outside the engine, and the step says where.
    url = fake_server("--ttft", "0.02", "--itl", "0.005", "--gateway-delay", "0.3")
    out = tmp_path / "gw"
    # Listening for request spans the fake never sends: the sweep says how to send them, once.
    rc = main(["sweep", "--target", url, "--concurrency", "2,2", *QUICK[:-1], "--out", str(out),
               "--otlp-listen", "0", "--otlp-wait", "0.5"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.count("no request spans from the engine (none came in 0.5 s)") == 1, err
    assert "--otlp-traces-endpoint http://127.0.0.1:" in err
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf" in err
    (step,) = _effective(_steps(out))
    parts = step["ttft_parts"]
    assert "median_request" not in parts
    assert parts["engine_ttft_s"] < 0.1
    assert parts["outside_s"] == pytest.approx(0.3, abs=0.1)
    # At the median too (the fake's TTFT buckets are coarser than vLLM's: 20-50 ms here).
    assert parts["outside_p50_s"] == pytest.approx(0.3, abs=0.1)
    # The parts add up to what the client saw.
    assert parts["engine_ttft_s"] + parts["outside_s"] == pytest.approx(
        parts["client_ttft_p50_s"], rel=0.1
    )
    assert "outside the engine" in parts["outside_note"] and "gateway" in parts["outside_note"]
    assert "outside the engine" in err


def test_a_span_port_in_use_is_one_line(fake_server, tmp_path, capsys) -> None:
    url = fake_server("--ttft", "0.02", "--itl", "0.005")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc = main(["sweep", "--target", url, "--concurrency", "1", *QUICK,
                   "--otlp-listen", str(port), "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert f"cannot listen for the engine's trace spans on 127.0.0.1:{port}" in err


@pytest.mark.parametrize("value", ["nope", "127.0.0.1:99999", "host:"])
def test_a_bad_otlp_listen_is_one_line(tmp_path, capsys, value) -> None:
    rc = main(["sweep", "--target", "http://127.0.0.1:9", "--concurrency", "1", *QUICK,
               "--otlp-listen", value, "--out", str(tmp_path / "o")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and f"--otlp-listen {value}" in err, err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("flags", "model", "needle"),
    [
        (None, None, "cannot reach"),
        ((), "no-such-model", "model 'no-such-model' is not served"),
        (("--mode", "not-openai"), None, "not an OpenAI-compatible endpoint"),
        (("--mode", "fail"), None, "HTTP 500"),
    ],
)
def test_bad_targets_fail_in_one_line(fake_server, tmp_path, capsys, flags, model, needle) -> None:
    url = f"http://127.0.0.1:{_closed_port()}" if flags is None else fake_server(*flags)
    args = ["sweep", "--target", url, "--concurrency", "1", *QUICK, "--out", str(tmp_path / "o")]
    if model:
        args += ["--model", model]
    rc = main(args)
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1 and needle in err and "Traceback" not in err


@pytest.mark.parametrize("where", ["a-file", "under-proc"])
def test_an_output_directory_that_cannot_be_written_fails_before_any_load(
    fake_server, tmp_path, capsys, where
) -> None:
    url = fake_server()
    out = tmp_path / "a-file" if where == "a-file" else Path("/proc/headroom-nope")
    if where == "a-file":
        out.write_text("not a directory")
    started = time.monotonic()
    rc = quick_sweep(url, out, "--concurrency", "1")
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and f"--out {out}" in err
    assert "Traceback" not in err
    assert time.monotonic() - started < 5  # no step was run


def test_failures_mid_sweep_end_it_and_keep_the_steps(fake_server, tmp_path, capsys) -> None:
    url = fake_server("--fail-above", "3", "--ttft", "0.02", "--itl", "0.005")
    out = tmp_path / "errs"
    rc = quick_sweep(url, out, "--concurrency", "1,2,4,8,16")
    err = capsys.readouterr().err
    steps = _effective(_steps(out))
    result = json.loads((out / "sweep.json").read_text())
    assert [s["concurrency"] for s in steps] == [1, 2, 4]  # 8 and 16 never ran
    assert steps[0]["error_ratio"] == 0 and steps[1]["error_ratio"] == 0
    assert steps[-1]["error_ratio"] > 0.1 and "HTTP 500" in steps[-1]["errors_sample"][0]
    if rc == 0:
        assert result["stopped"] == "saturated-by-errors"
        assert result["saturation"]["cause"] == "errors"
    else:  # a whole step failed: one line, the steps so far kept
        assert "every request failed" in err and result["stopped"].startswith("error:")


def test_resume_continues_and_a_used_directory_is_refused(fake_server, tmp_path, capsys) -> None:
    url = fake_server("--ttft", "0.02", "--itl", "0.005")
    out = tmp_path / "r"
    assert quick_sweep(url, out, "--concurrency", "1,2") == 0
    assert quick_sweep(url, out, "--concurrency", "1,2,4") == 1
    assert "--resume" in capsys.readouterr().err
    assert (
        main(
            [
                "sweep",
                "--target",
                url,
                "--concurrency",
                "1,2,4",
                *QUICK,
                "--resume",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    steps = _steps(out)
    assert [s["concurrency"] for s in _effective(steps)] == [1, 2, 4]
    assert [s["index"] for s in steps] == list(range(len(steps)))  # numbering continues
    assert steps[-1]["concurrency"] == 4 and sum(s["concurrency"] == 4 for s in steps) <= 2
    assert len(json.loads((out / "sweep.json").read_text())["steps"]) == len(steps)


def test_workers_run_a_master_and_worker_processes(fake_server, tmp_path, capsys) -> None:
    url = fake_server("--ttft", "0.02", "--itl", "0.005")
    out = tmp_path / "w"
    rc = quick_sweep(url, out, "--concurrency", "4", "--workers", "2")
    assert rc == 0, capsys.readouterr().err
    (s,) = _effective(_steps(out))
    assert s["client_in_flight_mean"] == pytest.approx(4, rel=0.15)
    raw = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len({r["w"] for r in raw if r.get("k") == "r"}) == 2  # both workers sent requests


def test_a_worker_started_elsewhere_joins_the_sweep(fake_server, tmp_path) -> None:
    """What the README tells users to run on another host, run here as its own process."""
    url = fake_server("--ttft", "0.02", "--itl", "0.005")
    out = tmp_path / "ext"
    port = _closed_port()  # free now; the sweep's master takes it
    sweep = subprocess.Popen(
        [sys.executable, "-m", "headroom", "sweep", "--target", url, "--concurrency", "3",
         "--external-workers", "1", "--master-port", str(port), *QUICK, "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    worker = None
    try:
        config = out / "loadgen-config.json"
        deadline = time.monotonic() + 60
        while not config.exists() and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.1)
        assert config.exists(), "the sweep wrote no loadgen-config.json for remote workers"
        # The remote host gets a copy of the config file, not the sweep's directory.
        copy = tmp_path / "remote-config.json"
        copy.write_text(config.read_text())
        worker = subprocess.Popen(
            [sys.executable, "-m", "loadgen.worker_locust", "--role", "worker",
             "--master-host", "127.0.0.1", "--master-port", str(port), "--mode", "closed",
             "--config", str(copy)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
        )  # fmt: skip
        _, err = sweep.communicate(timeout=240)
        assert sweep.returncode == 0, err[-2000:]
    finally:
        for p in (sweep, worker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    (s,) = _effective(_steps(out))
    assert s["requests_completed"] > 0 and s["error_ratio"] == 0
    assert s["client_in_flight_mean"] == pytest.approx(3, rel=0.15)
    raw = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    # Every request came from the worker that joined, through the master.
    assert {r["w"] for r in raw if r.get("k") == "r"} == {f"{socket.gethostname()}-{worker.pid}"}


def _sweep_under_a_1s_timeout(fake_server, tmp_path, itl: str) -> tuple[int, Path]:
    """A 2-user sweep of a server whose first token comes at once, then ``itl`` apart."""
    url = fake_server("--ttft", "0.01", "--itl", itl)
    out = tmp_path / f"itl-{itl}"
    rc = main(["sweep", "--target", url, "--concurrency", "2", "--request-timeout", "1", *QUICK,
               "--out", str(out)])  # fmt: skip
    return rc, out


def test_a_stream_slower_than_the_request_timeout_fails_as_such(
    fake_server, tmp_path, capsys
) -> None:
    # 10 tokens 0.3 s apart: 3 s a request, against a 1 s limit.
    rc, out = _sweep_under_a_1s_timeout(fake_server, tmp_path, "0.3")
    err = capsys.readouterr().err
    assert rc == 1 and "every request failed" in err
    (s,) = _steps(out)
    assert s["requests_completed"] == 0 and s["requests_failed"] >= 2
    assert "took over 1 s" in s["errors_sample"][0]


def test_requests_inside_the_request_timeout_all_complete_however_many_a_user_sends(
    fake_server, tmp_path, capsys
) -> None:
    # 0.5 s a request against a 1 s limit: each user sends several in the step, each under
    # the deadline its user starts again per request (a deadline left running from an
    # earlier request would cut a later one short, and its user with it).
    rc, out = _sweep_under_a_1s_timeout(fake_server, tmp_path, "0.05")
    assert rc == 0, capsys.readouterr().err
    (s,) = _effective(_steps(out))
    assert s["error_ratio"] == 0 and s["requests_completed"] >= 4, s
    assert s["client_in_flight_mean"] == pytest.approx(2, rel=0.15)
