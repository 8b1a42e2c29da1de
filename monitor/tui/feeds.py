"""Where the TUI's reports come from: an in-process Monitor, a remote agent, or a recording.

Every feed hands out ``Frame``s (an immutable report dict, the raw snapshot
when there is one). ``next`` blocks, so the app calls it from a worker thread
and never from the event loop: a slow endpoint delays only the next frame.
Each feed also owns recording, because only it sees the raw snapshot.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from monitor.core.errors import ConfigError, EndpointError
from monitor.read.recording import Recorder, Recording, read_recording
from monitor.sources.samples import Snapshot

if TYPE_CHECKING:
    from monitor.watch.pipeline import Monitor

MIN_INTERVAL = 0.25
MAX_INTERVAL = 60.0


def freeze(obj: Any) -> Any:
    """A read-only deep view of a report: widgets can share it across threads without copies."""
    if isinstance(obj, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return tuple(freeze(v) for v in obj)
    return obj


@dataclass(frozen=True, slots=True)
class Frame:
    report: Mapping[str, Any] | None
    snapshot: Snapshot | None = None
    # A failure of the feed itself (the agent is unreachable): the last report stays on screen.
    error: str | None = None
    # Replay: (index of this tick, ticks in the recording).
    position: tuple[int, int] | None = None


class Feed(Protocol):
    label: str  # "local", "agent http://...", "replay FILE"
    recorder: Recorder | None

    def start(self) -> None: ...

    def next(self, stop: threading.Event) -> Frame | None:
        """The next frame; None when ``stop`` was set, or a replay ran out."""

    def pace(self) -> str:
        """How often frames come, in words ("every 1.0 s", "4x speed")."""

    def faster(self) -> str: ...

    def slower(self) -> str: ...

    def start_recording(self, path: str | Path) -> Recorder: ...

    def stop_recording(self) -> None: ...

    def close(self) -> None: ...


class _RecordingMixin:
    recorder: Recorder | None = None
    header: dict[str, Any]

    def start_recording(self, path: str | Path) -> Recorder:
        self.stop_recording()
        self.recorder = Recorder(path, header=self.header)
        return self.recorder

    def stop_recording(self) -> None:
        rec, self.recorder = self.recorder, None
        if rec is not None:
            rec.close()

    def _record(self, snap: Snapshot | None, report: Mapping[str, Any] | None) -> None:
        rec = self.recorder
        if rec is not None and not rec.closed:
            rec.write(snap, report)


class LocalFeed(_RecordingMixin):
    """A Monitor in this process: its sampler ticks in its own thread, the feed queues each report."""

    def __init__(
        self, monitor: Monitor, label: str = "local", header: Mapping[str, Any] | None = None
    ) -> None:
        self.monitor = monitor
        self.label = label
        self.header = {
            "mode": "local",
            "interval_s": monitor.sampler.interval,
            "window_s": monitor.window_s,
            # A window that widens by itself (the demo's) is replayed the same way.
            "max_window_s": monitor.max_window_s,
            **dict(header or {}),
        }
        self._frames: collections.deque[Frame] = collections.deque(maxlen=64)
        self._cond = threading.Condition()
        self._closed = False
        # Subscribed after the Monitor's own listener, so its report for this snapshot is ready.
        monitor.sampler.subscribe(self._on_snapshot)
        self.profiler: Any = None  # monitor.profiling.runner.Profiler, set by the command

    def profile(self) -> Mapping[str, Any]:
        """Profile the engine's hot thread now (blocks); the next frames carry it."""
        from monitor.profiling.pyspy import ProfileError

        if self.profiler is None:
            raise ProfileError("profiling is off in this session")
        return self.profiler.profile_now().to_json()

    def _on_snapshot(self, snap: Snapshot) -> None:
        report = self.monitor.report()
        self._record(snap, report)
        frame = Frame(freeze(report) if report is not None else None, snap)
        with self._cond:
            self._frames.append(frame)
            self._cond.notify_all()

    def start(self) -> None:
        self.monitor.sampler.start()

    def next(self, stop: threading.Event) -> Frame | None:
        with self._cond:
            while not self._frames:
                if stop.is_set():
                    return None
                self._cond.wait(0.2)
            return self._frames.popleft()

    def pace(self) -> str:
        return f"every {self.monitor.sampler.interval:g} s"

    def _set_interval(self, s: float) -> str:
        self.monitor.sampler.interval = min(MAX_INTERVAL, max(MIN_INTERVAL, s))
        return self.pace()

    def faster(self) -> str:
        return self._set_interval(self.monitor.sampler.interval / 2)

    def slower(self) -> str:
        return self._set_interval(self.monitor.sampler.interval * 2)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.monitor.sampler.close()
        self.stop_recording()


class RemoteFeed(_RecordingMixin):
    """Polls a running agent's /api/v1/snapshot; an unreachable agent is a frame with an error."""

    def __init__(self, agent_url: str, interval: float = 1.0, timeout: float = 2.0) -> None:
        import httpx

        from monitor.fleet.agents import snapshot_url

        if interval <= 0:
            raise ConfigError("--interval must be positive")
        self.url = snapshot_url(agent_url)
        self.label = f"agent {self.url.removesuffix('/api/v1/snapshot')}"
        self.interval = interval
        self.header = {"mode": "remote", "agent": self.url, "interval_s": interval}
        self._client = httpx.Client(timeout=timeout)
        self._next_at: float | None = None

    def start(self) -> None:
        self._next_at = time.monotonic()

    def _fetch(self) -> Frame:
        from monitor.fleet.agents import read_report

        try:
            report = read_report(self._client, self.url)
        except EndpointError as exc:
            return Frame(None, error=str(exc))
        self._record(None, report)
        return Frame(freeze(report))

    def profile(self, seconds: float = 5.0) -> Mapping[str, Any]:
        """Ask the agent for a profile (POST /api/v1/profile); its refusal comes back in one line."""
        import httpx

        from monitor.profiling.pyspy import ProfileError

        url = self.url.removesuffix("/snapshot") + f"/profile?seconds={seconds:g}"
        try:
            resp = self._client.post(url, timeout=seconds + 30)
        except httpx.HTTPError as exc:
            raise ProfileError(f"{url}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        try:
            body = resp.json()
        except ValueError:
            body = {}
        if resp.status_code != 200:
            raise ProfileError(str(body.get("error") or f"{url}: HTTP {resp.status_code}"))
        return body["cpu_profile"]

    def next(self, stop: threading.Event) -> Frame | None:
        if self._next_at is None:
            self._next_at = time.monotonic()
        delay = self._next_at - time.monotonic()
        if delay > 0 and stop.wait(delay):
            return None
        if stop.is_set():
            return None
        frame = self._fetch()
        # Deadlines, not sleeps after the request: a slow answer does not stretch the period.
        self._next_at = max(self._next_at + self.interval, time.monotonic())
        return frame

    def pace(self) -> str:
        return f"every {self.interval:g} s"

    def faster(self) -> str:
        self.interval = max(MIN_INTERVAL, self.interval / 2)
        return self.pace()

    def slower(self) -> str:
        self.interval = min(MAX_INTERVAL, self.interval * 2)
        return self.pace()

    def close(self) -> None:
        self._client.close()
        self.stop_recording()


MonitorFactory = Callable[[Recording], "Monitor"]


def default_replay_monitor(recording: Recording) -> Monitor:
    """A fresh Monitor with the recorded session's window and caps, fed by pushes, not sources."""
    from monitor.read.sampler import Sampler
    from monitor.watch.pipeline import Monitor

    diag = recording.header.get("diagnosis") or {}
    diagnoser = None
    if any(diag.get(k) is not None for k in ("max_num_seqs", "max_num_batched_tokens", "gpu")):
        from monitor.diagnosis import Caps, Diagnoser

        diagnoser = Diagnoser(
            caps=Caps(
                max_num_seqs=diag.get("max_num_seqs"),
                max_num_batched_tokens=diag.get("max_num_batched_tokens"),
                gpu=diag.get("gpu"),
            )
        )
    sampler = Sampler([], interval=recording.interval_s or 1.0, capacity=100_000)
    widen = recording.header.get("max_window_s")
    return Monitor(
        sampler,
        diagnoser,
        window_s=recording.window_s or 10.0,
        notes=tuple(recording.header.get("notes") or ()),
        max_window_s=float(widen) if isinstance(widen, int | float) else None,
    )


class ReplayFeed(_RecordingMixin):
    """Plays a recording back at ``speed`` (0: as fast as possible).

    With ``recompute`` the raw snapshots go through a fresh Sampler and Monitor,
    so the verdicts are the diagnosis's of today, not copies of the recorded ones;
    ticks without a snapshot (recorded from an agent) show their recorded report.
    """

    SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 0.0)

    def __init__(
        self,
        path: str | Path,
        speed: float = 1.0,
        recompute: bool = True,
        monitor_factory: MonitorFactory = default_replay_monitor,
    ) -> None:
        if speed < 0:
            raise ConfigError("--speed must be 0 (as fast as possible) or positive")
        self.path = Path(path)
        self.recording = read_recording(self.path)
        self.label = f"replay {self.path.name}"
        self.speed = speed
        self.header = {**self.recording.header, "mode": "replay", "replayed": str(self.path)}
        self.header.pop("headroom_recording", None)
        has_snapshots = any(t.snapshot is not None for t in self.recording.ticks)
        self.monitor = monitor_factory(self.recording) if recompute and has_snapshots else None
        self.index = 0
        self._last_time: float | None = None

    @property
    def total(self) -> int:
        return len(self.recording.ticks)

    @property
    def finished(self) -> bool:
        return self.index >= self.total

    def start(self) -> None:
        self._last_time = None

    def _tick_time(self, i: int) -> float | None:
        tick = self.recording.ticks[i]
        if tick.snapshot is not None:
            return tick.snapshot.t
        rep = tick.report or {}
        v = rep.get("time")
        return float(v) if isinstance(v, (int, float)) else None

    def profile(self) -> Mapping[str, Any]:
        from monitor.profiling.pyspy import ProfileError

        raise ProfileError("a replay has no live engine to profile")

    def step(self) -> Frame | None:
        """The next frame at once, without waiting (tests and the paused view use it)."""
        if self.finished:
            return None
        i = self.index
        tick = self.recording.ticks[i]
        self.index += 1
        report: Mapping[str, Any] | None = tick.report
        if self.monitor is not None and tick.snapshot is not None:
            self.monitor.sampler.push(tick.snapshot)
            report = self.monitor.report()
        self._record(tick.snapshot, report)
        return Frame(
            freeze(report) if report is not None else None, tick.snapshot, position=(i, self.total)
        )

    def next(self, stop: threading.Event) -> Frame | None:
        if self.finished or stop.is_set():
            return None
        t = self._tick_time(self.index)
        if self.speed > 0 and t is not None and self._last_time is not None:
            # Wait out the recorded gap scaled by speed, in short slices so a speed change applies.
            deadline = time.monotonic() + max(0.0, t - self._last_time) / self.speed
            while (left := deadline - time.monotonic()) > 0:
                if stop.wait(min(left, 0.1)):
                    return None
        self._last_time = t
        return self.step()

    def pace(self) -> str:
        return "max speed" if self.speed == 0 else f"{self.speed:g}x speed"

    def _shift(self, by: int) -> str:
        speeds = self.SPEEDS
        try:
            i = speeds.index(self.speed)
        except ValueError:
            i = speeds.index(1.0)
        self.speed = speeds[min(len(speeds) - 1, max(0, i + by))]
        return self.pace()

    def faster(self) -> str:
        return self._shift(+1)

    def slower(self) -> str:
        return self._shift(-1)

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.sampler.close()
        self.stop_recording()
