"""Starts the Locust processes, sends them steps, and tails what they record.

Plain Python (no gevent): the sweep process holds one driver. With
``workers=0`` one local Locust process makes the load; with ``workers=N`` a
Locust master plus N worker processes on this host (and ``external_workers``
more may join from other hosts).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from loadgen.records import RecordTail, RequestRecord, WorkerStatus
from loadgen.schema import Mode, WorkerConfig
from monitor.core.errors import HeadroomError


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LocustDriver:
    def __init__(
        self,
        config: WorkerConfig,
        mode: Mode,
        out_dir: Path,
        workers: int = 0,
        external_workers: int = 0,
        master_bind: str = "127.0.0.1",
        master_port: int | None = None,
        python: str = sys.executable,
    ) -> None:
        self.config = config
        self.mode = mode
        self.out_dir = out_dir
        self.workers = workers
        self.external_workers = external_workers
        self.master_bind = master_bind
        self.master_port = master_port
        self.python = python
        self.config_path = out_dir / "loadgen-config.json"
        self.records_path = out_dir / "requests.jsonl"
        self.log_path = out_dir / "loadgen.log"
        self._main: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        self._tail = RecordTail(self.records_path)
        self._lock = threading.Lock()
        self.records: list[RequestRecord] = []
        self.statuses: list[WorkerStatus] = []
        self._latest: dict[str, WorkerStatus] = {}
        self.events: list[dict] = []
        self.ready = False
        self.target: tuple[int | None, float | None] = (None, None)
        self._log_fh = None

    # -- processes -------------------------------------------------------------------------
    def _cmd(self, role: str, extra: list[str]) -> list[str]:
        return [self.python, "-m", "loadgen.worker_locust", "--role", role, "--mode", self.mode,
                "--config", str(self.config_path), *extra]  # fmt: skip

    def start(self, ready_timeout: float = 90.0) -> None:
        self.config_path.write_text(self.config.model_dump_json(indent=2), encoding="utf-8")
        self._log_fh = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        # Skip what earlier runs (a --resume) left in the records file.
        self._tail.skip_existing()
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        expected = self.workers + self.external_workers
        if expected == 0:
            role, extra = "local", ["--records", str(self.records_path)]
        else:
            port = self.master_port or _free_port()
            self.master_port = port
            role = "master"
            extra = ["--records", str(self.records_path), "--master-bind", self.master_bind,
                     "--master-port", str(port), "--expect-workers", str(expected)]  # fmt: skip
        self._main = subprocess.Popen(
            self._cmd(role, extra),
            stdin=subprocess.PIPE,
            stdout=self._log_fh,
            stderr=self._log_fh,
            env=env,
        )
        for _ in range(self.workers):
            connect = "127.0.0.1" if self.master_bind in ("0.0.0.0", "*", "") else self.master_bind
            self._workers.append(
                subprocess.Popen(
                    self._cmd(
                        "worker", ["--master-host", connect, "--master-port", str(self.master_port)]
                    ),
                    stdin=subprocess.DEVNULL,
                    stdout=self._log_fh,
                    stderr=self._log_fh,
                    env=env,
                )
            )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            self.poll()
            if self.ready:
                return
            if self._main.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise HeadroomError(f"the load generator did not start: {self.failure_hint()}")

    def failure_hint(self) -> str:
        for ev in self.events:
            if ev.get("k") == "fatal":
                return str(ev.get("msg"))
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            lines = []
        last = next((ln for ln in reversed(lines) if ln.strip()), "no output")
        return f"{last.strip()[:200]} (see {self.log_path})"

    def alive(self) -> bool:
        return self._main is not None and self._main.poll() is None

    def pids(self) -> list[int]:
        procs = ([self._main] if self._main else []) + self._workers
        return [p.pid for p in procs if p.poll() is None]

    def send_step(
        self,
        step: int,
        concurrency: int | None = None,
        rate: float | None = None,
        speed: float | None = None,
    ) -> None:
        if not self.alive():
            raise HeadroomError(f"the load generator exited: {self.failure_hint()}")
        assert self._main is not None and self._main.stdin is not None
        cmd: dict = {"cmd": "step", "step": step}
        if concurrency is not None:
            cmd["concurrency"] = concurrency
        if rate is not None:
            cmd["rate"] = rate
        if speed is not None:
            cmd["speed"] = speed
        self.target = (concurrency, rate)
        self._main.stdin.write((json.dumps(cmd) + "\n").encode())
        self._main.stdin.flush()

    def stop(self, timeout: float = 15.0) -> None:
        if self._main is not None and self._main.poll() is None and self._main.stdin is not None:
            try:
                self._main.stdin.write(b'{"cmd":"stop"}\n')
                self._main.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        procs = ([self._main] if self._main else []) + self._workers
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.poll()
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    # -- what the processes recorded -------------------------------------------------------
    def poll(self) -> int:
        """Read newly written lines; returns how many request records arrived."""
        n = 0
        with self._lock:
            for item in self._tail.read_new():
                if isinstance(item, RequestRecord):
                    self.records.append(item)
                    n += 1
                elif isinstance(item, WorkerStatus):
                    self.statuses.append(item)
                    self._latest[item.worker] = item
                else:
                    self.events.append(item)
                    if item.get("k") == "ready":
                        self.ready = True
        return n

    def latest_statuses(self) -> list[WorkerStatus]:
        with self._lock:
            return list(self._latest.values())

    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.latest_statuses())

    def users(self) -> int:
        return sum(s.users for s in self.latest_statuses())

    def step_seen(self, step: int) -> bool:
        sts = self.latest_statuses()
        return bool(sts) and all(s.step >= step for s in sts)

    def step_started(self, step: int) -> float | None:
        """Wall time at which the load generator took up a step (its "step" event)."""
        for ev in reversed(self.events):
            if ev.get("k") == "step" and ev.get("step") == step:
                return float(ev["t"])
        return None

    def oldest_in_flight(self) -> float | None:
        olds = [s.oldest_start for s in self.latest_statuses() if s.oldest_start is not None]
        return min(olds) if olds else None

    def status_time(self) -> float | None:
        """The time of the stalest latest status: every worker has reported since then."""
        sts = self.latest_statuses()
        return min(s.time for s in sts) if sts else None

    def cpu_ratio_recent(self, seconds: float = 2.0) -> float | None:
        """The busiest generator process's CPU over the last few seconds, share of one core."""
        with self._lock:
            statuses = self.statuses[-400:]
        now = time.time()
        best = None
        by: dict[str, list[WorkerStatus]] = {}
        for s in statuses:
            if s.time >= now - seconds:
                by.setdefault(s.worker, []).append(s)
        for sts in by.values():
            if len(sts) >= 2 and sts[-1].time > sts[0].time:
                r = (sts[-1].cpu_seconds - sts[0].cpu_seconds) / (sts[-1].time - sts[0].time)
                best = r if best is None else max(best, r)
        return best

    def load_figures(self) -> tuple[tuple[str, float], ...]:
        """For the monitor's sampler: what the generator is asked for and what it achieves."""
        conc, rate = self.target
        figs: list[tuple[str, float]] = []
        if conc is not None:
            figs.append(("target_concurrency", float(conc)))
        if rate is not None:
            figs.append(("target_rate", float(rate)))
        if self.latest_statuses():
            figs.append(("client_in_flight", float(self.in_flight())))
        cpu = self.cpu_ratio_recent()
        if cpu is not None:
            figs.append(("client_cpu_ratio", cpu))
        return tuple(figs)


def records_between(records: list[RequestRecord], start: float, end: float) -> list[RequestRecord]:
    """Records that overlap [start, end] (so a window's edges see the requests crossing them)."""
    return [
        r for r in records if r.start <= end and (r.end if r.end is not None else r.start) >= start
    ]
