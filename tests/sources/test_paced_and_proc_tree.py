"""Reading less often without losing anything: a paced source and the engine's process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from monitor.sources.base import Reading
from monitor.sources.paced import Paced
from monitor.sources.proc_tree import ProcTree
from monitor.sources.samples import SourceError


class Counting:
    name = "vllm"
    url = "http://127.0.0.1:1/metrics"

    def __init__(self) -> None:
        self.reads = 0
        self.failing = False

    def read(self) -> Reading:
        self.reads += 1
        if self.failing:
            return Reading(errors=(SourceError("vllm", self.url, "connection refused"),))
        return Reading()

    def close(self) -> None:
        pass


def test_a_paced_source_is_read_once_a_second_and_repeats_its_errors_between() -> None:
    now = [0.0]
    src = Counting()
    paced = Paced(src, every_s=1.0, slack_s=0.05, clock=lambda: now[0])
    assert paced.url == src.url and paced.name == "vllm"
    for i in range(30):  # 3 s of 100 ms ticks
        now[0] = i * 0.1
        paced.read()
    assert src.reads == 3
    src.failing = True
    now[0] = 3.0
    assert paced.read().errors
    now[0] = 3.1
    assert not paced.due()
    between = paced.read()
    assert between.errors and between.engines == () and src.reads == 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_proc_tree_finds_grandchildren_and_reads_only_new_pids() -> None:
    # A child that starts a grandchild: the tree of the root holds both.
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
        "print(p.pid, flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = 0
    try:
        grandchild = int(child.stdout.readline())  # type: ignore[union-attr]
        tree = ProcTree()
        tree.refresh()
        first_reads = tree.stat_reads
        assert {child.pid, grandchild} <= tree.descendants({os.getpid()})
        assert tree.descendants({child.pid}) == {grandchild}
        time.sleep(0.05)
        tree.refresh()
        # Only PIDs born since the first look were read again (others may start meanwhile).
        assert tree.stat_reads - first_reads < first_reads / 2
        assert tree.descendants({child.pid}) == {grandchild}
    finally:
        if grandchild:
            os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]


def test_a_paced_source_read_later_keeps_its_pace_and_its_errors_in_order() -> None:
    class Later(Counting):
        made = 0

        def read_later(self) -> Callable[[], Reading]:
            self.reads += 1
            failing = self.failing

            def made() -> Reading:
                self.made += 1
                if failing:
                    return Reading(errors=(SourceError("vllm", self.url, "connection refused"),))
                return Reading()

            return made

    now = [0.0]
    src = Later()
    paced = Paced(src, every_s=1.0, slack_s=0.05, clock=lambda: now[0])
    parts = []
    for i in range(30):  # 3 s of 100 ms ticks, made later (the agent's sampler)
        now[0] = i * 0.1
        parts.append(paced.read_later())
    assert src.reads == 3 and src.made == 0
    assert all(not part().errors for part in parts)
    src.failing = True
    now[0] = 3.0
    failed = paced.read_later()
    now[0] = 3.1
    between = paced.read_later()
    # Made in order, the tick between reads repeats the errors of the read before it.
    assert failed().errors and between().errors == failed().errors
    assert src.reads == 4
