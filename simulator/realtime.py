"""The engine in real time: one thread, named like vLLM's, that really burns its host CPU.

Each step it plans under the lock, burns the step's host CPU (scheduling,
sampling, detokenising, streaming, kernel launches) on this thread, sleeps
through the rest of the GPU's share (the GPU part is a wait, as a blocking
synchronise is), then commits under the lock and hands the tokens to the server.
A host monitor watching this process sees the busy thread vLLM's engine core is.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from simulator.box import Box
from simulator.config import SimConfig
from simulator.engine import Emission, Request, Step
from simulator.gpu_timeline import Activity
from simulator.stats import Stats

log = logging.getLogger(__name__)

THREAD_NAME = "EngineCore"
_IDLE_WAIT_S = 0.5
# A step that starts this late after the last one ended starts now instead (a stall).
_CATCH_UP_S = 0.005


class CpuBurner:
    """Spends CPU on the calling thread without holding the GIL for long.

    CPython releases the GIL while hashing buffers over 2 KiB, so the server's
    event loop keeps running beside the burn on another core.
    """

    def __init__(self, chunk_bytes: int = 16384) -> None:
        self.chunk = memoryview(bytes(range(256)) * (chunk_bytes // 256))

    def burn(self, seconds: float) -> None:
        if seconds <= 0:
            return
        end = time.perf_counter() + seconds
        h = hashlib.sha1()
        while time.perf_counter() < end:
            h.update(self.chunk)


def _name_native_thread(name: str) -> None:
    # Python's thread names are not the kernel's: set comm so top/psutil show it.
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name[:15])
    except OSError:
        pass  # not Linux: the Python name still shows in tracebacks


class EngineThread(threading.Thread):
    def __init__(
        self, cfg: SimConfig, load: bool = True, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(name=THREAD_NAME, daemon=True)
        self.clock = clock
        self.cond = threading.Condition()
        self.stats = Stats()
        self.load_enabled = load
        self.box = Box(cfg, clock(), load=load, stats=self.stats)
        self.burner = CpuBurner()
        # Set by the server: called on this thread with each step's emissions for HTTP requests.
        self.deliver: Callable[[list[Emission]], None] | None = None
        self._stop = False

    # -- called from other threads ---------------------------------------------

    @property
    def cfg(self) -> SimConfig:
        return self.box.cfg

    def submit(self, req: Request) -> None:
        with self.cond:
            req.arrival = self.clock()
            self.box.core.add(req)
            self.cond.notify()

    def abort(self, req: Request) -> None:
        with self.cond:
            self.box.core.abort(req, self.clock())

    def switch(self, cfg: SimConfig) -> None:
        """Become another scenario; requests in flight end with reason abort."""
        with self.cond:
            old = self.box.core
            now = self.clock()
            dropped = [*old.running, *old.waiting]
            for req in dropped:
                old.abort(req, now)
            self.box = Box(cfg, now, load=self.load_enabled, stats=self.stats)
            self.cond.notify()
        self._deliver([Emission(r, 0, "abort") for r in dropped if r.sink is not None])

    def gpu_activity(self) -> Activity:
        with self.cond:
            return self.box.gpu_activity(self.clock())

    def stop(self) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify()

    # -- the loop ----------------------------------------------------------------

    def _deliver(self, emissions: list[Emission]) -> None:
        if emissions and self.deliver is not None:
            self.deliver(emissions)

    # The step's host CPU, burnt in functions named for the work they stand for, so a
    # Python profiler of this thread (py-spy) sees the split a real engine loop would show.
    def _host_work(self, box: Box, step: Step) -> None:
        e = box.cfg.engine
        scale = e.cpu_scale
        sched = min(step.host_cpu_s, e.cpu_step_s)
        detok = min(step.host_cpu_s - sched, e.cpu_per_seq_s * len(step.scheduled))
        prep = max(0.0, step.host_cpu_s - sched - detok)
        self.schedule(sched * scale)
        self.prepare_inputs(prep * scale)
        self.launch_kernels(max(0.0, step.thread_cpu_s - step.host_cpu_s) * scale)
        self.detokenize(detok * scale)

    # Each burns inline rather than through CpuBurner.burn: a profiler charges a sample to
    # the innermost Python frame, which must be the named function, not a shared helper.
    def schedule(self, seconds: float) -> None:
        """Stands for vLLM's Scheduler.schedule: which sequences run this step."""
        chunk, end, h = self.burner.chunk, time.perf_counter() + seconds, hashlib.sha1()
        while time.perf_counter() < end:
            h.update(chunk)

    def prepare_inputs(self, seconds: float) -> None:
        """Stands for building the step's input tensors, per scheduled token."""
        chunk, end, h = self.burner.chunk, time.perf_counter() + seconds, hashlib.sha1()
        while time.perf_counter() < end:
            h.update(chunk)

    def launch_kernels(self, seconds: float) -> None:
        """Stands for the CPU side of kernel launches (little with CUDA graphs)."""
        chunk, end, h = self.burner.chunk, time.perf_counter() + seconds, hashlib.sha1()
        while time.perf_counter() < end:
            h.update(chunk)

    def detokenize(self, seconds: float) -> None:
        """Stands for sampling, detokenising and streaming each running sequence's token."""
        chunk, end, h = self.burner.chunk, time.perf_counter() + seconds, hashlib.sha1()
        while time.perf_counter() < end:
            h.update(chunk)

    def run(self) -> None:
        _name_native_thread(THREAD_NAME)
        last_end: float | None = None
        while True:
            with self.cond:
                if self._stop:
                    return
                box = self.box
                now = self.clock()
                # Back to back steps: the next starts where the last ended, so this loop's own
                # bookkeeping (commit, delivery) is paid out of the next step's budget, not added.
                t0 = last_end if last_end is not None and now - last_end < _CATCH_UP_S else now
                box.admit_arrivals(now)
                step = box.core.schedule()
                if step is None:
                    last_end = None
                    wait = min(box.next_due - now, _IDLE_WAIT_S)
                    if wait > 0:
                        self.cond.wait(wait)
                    continue
            self._host_work(box, step)
            remaining = t0 + step.duration_s - self.clock()
            if remaining > 0:
                time.sleep(remaining)
            with self.cond:
                if self.box is not box:
                    last_end = None
                    continue  # the scenario changed under this step
                t1 = last_end = max(self.clock(), t0 + step.duration_s)
                box.timeline.add(t0 + step.gpu_offset_s, step.gpu)
                emissions = box.core.commit(step, t0, t1)
            self._deliver([e for e in emissions if e.request.sink is not None])
