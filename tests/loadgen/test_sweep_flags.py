"""Every numeric flag of `headroom sweep` is checked before any load: one line, exit 1.

The target is a closed port: a value that slipped past the checks would fail on the
network instead, with another message, so each case shows the check came first.
"""

from __future__ import annotations

import socket

import pytest

from headroom.cli import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# flag, bad values (each its own case), what the one line says it wants
TABLE = [
    ("--concurrency", ["0", "-4", "1,0,4", "two", "1.5", ""], "positive integers"),
    ("--rates", ["0", "-1", "1,x", "nan"], "positive numbers"),
    ("--target-rate", ["0", "-2", "x", "inf"], "a number above 0"),
    ("--margin", ["-0.1", "11", "x"], "a number from 0 to 10"),
    ("--max-concurrency", ["0", "-2", "many"], "an integer, 1 or more"),
    ("--start-concurrency", ["0", "-1", "1.5"], "an integer, 1 or more"),
    ("--refine-steps", ["-1", "x"], "an integer, 0 or more"),
    ("--max-num-seqs", ["0", "-8", "1.5"], "an integer, 1 or more"),
    ("--max-num-batched-tokens", ["0", "x"], "an integer, 1 or more"),
    ("--step-seconds", ["0", "-1", "inf", "x"], "a number above 0"),
    ("--warmup-seconds", ["-0.5", "x"], "a number, 0 or more"),
    ("--input-tokens", ["0", "-5", "1.5"], "an integer, 1 or more"),
    ("--output-tokens", ["0", "-1", "x"], "an integer, 1 or more"),
    ("--length-spread", ["-0.1", "nan"], "a number, 0 or more"),
    ("--dataset-prompts", ["0", "-3"], "an integer, 1 or more"),
    ("--seed", ["-1", "x"], "an integer, 0 or more"),
    ("--shared-prefix-tokens", ["-1", "x"], "an integer, 0 or more"),
    ("--prefix-groups", ["0", "x"], "an integer, 1 or more"),
    ("--turns", ["0", "x"], "an integer, 1 or more"),
    ("--think-time", ["-1", "x"], "a number, 0 or more"),
    ("--speed", ["0", "-1", "2,x"], "positive numbers"),
    ("--trace-block-tokens", ["0", "x"], "an integer, 1 or more"),
    ("--request-timeout", ["0", "-5"], "a number above 0"),
    ("--otlp-wait", ["-1"], "a number, 0 or more"),
    ("--sample-interval", ["0", "-1"], "a number above 0"),
    ("--error-threshold", ["-0.1", "1.5", "x"], "a number from 0 to 1"),
    ("--max-lag", ["0", "-1"], "a number above 0"),
    ("--workers", ["-1", "x"], "an integer, 0 or more"),
    ("--external-workers", ["-1"], "an integer, 0 or more"),
    ("--master-port", ["0", "70000", "x"], "an integer from 1 to 65535"),
]
CASES = [(flag, value, want) for flag, values, want in TABLE for value in values]


@pytest.mark.parametrize(("flag", "value", "want"), CASES, ids=[f"{f}={v}" for f, v, _ in CASES])
def test_a_bad_number_is_one_line_and_exit_1_before_any_load(tmp_path, capsys, flag, value, want):
    load = [] if flag in ("--concurrency", "--rates") else ["--concurrency", "1"]
    out = tmp_path / "o"
    rc = main(["sweep", "--target", f"http://127.0.0.1:{_closed_port()}", *load,
               f"{flag}={value}", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 1, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"headroom sweep: {flag} {value}: want {want}"), err
    assert "usage:" not in err and "Traceback" not in err and "cannot reach" not in err
    assert not out.exists()  # nothing was set up, let alone sent


def test_every_numeric_flag_is_in_the_table() -> None:
    """A numeric flag added later gets a row here (and a rule) or this fails."""
    from headroom.cli import build_parser
    from headroom.commands.sweep_flags import RULES

    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]  # type: ignore[union-attr]
    numeric = {a.dest for a in sweep._actions if isinstance(a.default, (int, float))
               and not isinstance(a.default, bool)} | {r.dest for r in RULES}  # fmt: skip
    tested = {flag.removeprefix("--").replace("-", "_") for flag, _, _ in TABLE}
    assert numeric - tested == set()


def test_a_start_above_the_ceiling_is_one_line_before_any_load(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    rc = main(["sweep", "--target", f"http://127.0.0.1:{_closed_port()}",
               "--start-concurrency", "64", "--max-concurrency", "32", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "--start-concurrency 64 is above --max-concurrency 32" in err, err
    assert not out.exists()
