"""A request leaves as soon as it starts, even while other streams keep the client busy.

geventhttpclient checks a pooled connection through gevent's select, which yields to
every other ready greenlet; with hundreds of streams being read, that yield sat between
the TTFT clock's start and the request's send. Runs in a subprocess: importing the
worker imports locust, which patches the process for gevent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys, time
import loadgen.worker_locust  # noqa: F401  (the worker's patches)
import gevent
import gevent._socket3 as gsock
from locust import FastHttpUser, events
from locust.env import Environment

url, hog_s = sys.argv[1], float(sys.argv[2])
sends = []
plain_sendall = gsock.socket.sendall


def sendall(self, data, flags=0):
    sends.append((time.perf_counter(), hog_turns[0]))
    return plain_sendall(self, data, flags)


gsock.socket.sendall = sendall


class User(FastHttpUser):
    host = url


hog_turns = [0]


def hog():  # another stream's work: runs whenever the request's greenlet yields
    while True:
        hog_turns[0] += 1
        t = time.perf_counter()
        while time.perf_counter() - t < hog_s:
            pass
        gevent.sleep(0)


user = User(Environment(user_classes=[User], events=events))
body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True}).encode()
delays, yields = [], []
for i in range(9):
    if i == 1:  # the first request opened the connection; the rest take it from the pool
        gevent.spawn(hog)
    sends.clear()
    t0, turns0 = time.perf_counter(), hog_turns[0]
    resp = user.client._send_request_safe_mode(
        "POST", url + "/v1/completions", payload=body, headers={"Content-Type": "application/json"}
    )
    raw = resp._response
    while not raw.message_complete:
        raw.feed(raw._sock.recv(65536))
    delays.append(sends[0][0] - t0)
    yields.append(sends[0][1] - turns0)
print(json.dumps({"delays": delays[1:], "hog_turns": yields[1:]}))
"""


def test_a_request_is_sent_before_other_greenlets_run(fake_server) -> None:
    url = fake_server("--model", "m", "--ttft", "0.001", "--itl", "0.001")
    hog_s = 0.02
    out = subprocess.run(
        [sys.executable, "-c", PROBE, url, str(hog_s)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # Each yield lets the 20 ms hog run first. Counted by the hog's turns rather than by
    # the delay, which a loaded machine stretches with no yield at all (CI read 11-15 ms).
    assert got["hog_turns"] == [0] * len(got["hog_turns"]), got
