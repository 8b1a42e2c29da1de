"""Bad input to `headroom fleet`: one clear line on stderr, exit 1, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fleet_support import Canned, host, serve

from headroom.cli import main

REPO = Path(__file__).resolve().parents[2]


def one_line_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    rc = main(["fleet", *args])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headroom fleet: "), err
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_prometheus_unreachable_through_the_real_cli() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    run = subprocess.run(
        [sys.executable, "-m", "headroom", "fleet", "--prometheus", url],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 1 and run.stdout == ""
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        f"headroom fleet: cannot reach Prometheus at {url}: [Errno 111] Connection refused"
    ]


# (mode the server answers in, words the line must hold)
BAD_ANSWERS = [
    ("html", "is not a Prometheus query API (http://127.0.0.1:{port}/api/v1/query answered not PromQL JSON)"),
    ("404", "is not a Prometheus query API (http://127.0.0.1:{port}/api/v1/query answered HTTP 404)"),
    ("promql-error", "rejected a query (bad_data: parse error at char 7)"),
    ("401", "refused the query: HTTP 401 (set HEADROOM_PROMETHEUS_TOKEN"),
]  # fmt: skip


@pytest.mark.parametrize(("mode", "words"), BAD_ANSWERS, ids=[b[0] for b in BAD_ANSWERS])
def test_a_server_that_is_not_a_working_promql_api(
    capsys: pytest.CaptureFixture[str], mode: str, words: str
) -> None:
    with serve(Canned(mode=mode)) as url:
        line = one_line_error(capsys, "--prometheus", url)
    port = url.rsplit(":", 1)[1]
    assert words.format(port=port) in line


def test_no_headroom_series(capsys: pytest.CaptureFixture[str]) -> None:
    with serve(Canned()) as url:
        line = one_line_error(capsys, "--prometheus", url, "--selector", 'job="gpu"')
    assert line == (
        f'headroom fleet: no headroom_* series matching {{job="gpu"}} in Prometheus at {url} '
        "(is it scraping the headroom agents?)"
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--prometheus", "ftp://x"], "--prometheus needs an http(s) URL"),
        (["--selector", "headroom"], "--selector needs label matchers"),
        (["--at", "yesterday"], "--at needs Unix seconds or an ISO 8601 time"),
        (["--top", "0"], "--top must be at least 1"),
        (["--stale-after", "-1"], "--stale-after must be positive"),
        (["--host-label", "host-name"], "--host-label needs a Prometheus label name"),
    ],
)
def test_bad_flags(capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    canned = Canned()
    host(canned, "a", [0.5])
    with serve(canned) as url:
        line = one_line_error(capsys, "--prometheus", url, *args)
    assert words in line
    assert canned.asked == [] or args[0] == "--prometheus"


def test_credentials_in_the_url_are_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    line = one_line_error(capsys, "--prometheus", f"http://ops:hunter2@127.0.0.1:{port}")
    assert "hunter2" not in line and f"http://127.0.0.1:{port}" in line


def test_watch_prometheus_says_what_is_wrong_before_the_screen_opens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with serve(Canned()) as url:
        rc = main(["watch", "--prometheus", url])
    out, err = capsys.readouterr()
    assert rc == 1 and err.strip().splitlines() == [
        f"headroom watch: no headroom_* series in Prometheus at {url} "
        "(is it scraping the headroom agents?)"
    ]
    rc = main(["watch", "--prometheus", url, "--remote", "http://127.0.0.1:9402"])
    err = capsys.readouterr().err
    assert rc == 1 and "--remote, --replay and --prometheus exclude each other" in err
