"""Recordings: exact round trips, one flushed line per tick, and replays that reach the live verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tui_helpers import record_story
from tui_synthetic import snapshots

from monitor.core.errors import ConfigError
from monitor.read.recording import (
    Recorder,
    read_recording,
    snapshot_from_dict,
    snapshot_to_dict,
)
from monitor.sources.samples import EngineSample, GpuProcess, GpuSample, Snapshot, SourceError
from monitor.tui.feeds import ReplayFeed


def test_snapshot_round_trip_is_exact_through_json() -> None:
    errors = (SourceError("dcgm-exporter", "http://127.0.0.1:9400/metrics", "timed out"),)
    for snap in snapshots("seq-cap", 3, errors=errors):
        back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap))))
        assert back == snap
        # Tuples stay tuples (frozen samples hash and compare by them) and +Inf survives.
        assert isinstance(back.engines[0].histograms, tuple)
        assert math.isinf(back.engines[0].histograms[0][1].buckets[-1][0])


def test_round_trip_keeps_none_throttle_reasons_and_labels() -> None:
    g = GpuSample(
        index=1,
        uuid="u",
        name="n",
        source="nvml",
        util=None,
        throttle_reasons=("sw_power_cap",),
        labels=(("pod", "a"),),
    )
    snap = Snapshot(t=1.0, wall=2.0, gpus=(g,), load=(("target_concurrency", 8.0),))
    back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap))))
    assert back == snap
    assert back.gpus[0].util is None


def test_round_trip_keeps_the_energy_counter_and_where_it_comes_from() -> None:
    for source in ("counter", "power"):
        g = GpuSample(0, "u", "n", "nvml", energy_joules=123456.5, energy_source=source)
        snap = Snapshot(t=1.0, wall=2.0, gpus=(g,))
        assert snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap)))) == snap


def test_round_trip_keeps_the_gpu_processes_and_the_mig_instance() -> None:
    procs = (
        GpuProcess(529, 2**30, 0.36, 0.08, "root", "python workloads.py matmul"),
        GpuProcess(530, 9 * 2**30, None, None, "1000", "python train.py", "3f4e5d6c7b8a",
                   "containerd", "8c5b1a9e-3f1d-4c2a-9b7e-0d6f2a1b3c4d", "trainer-0", "batch"),
        GpuProcess(48213, None, 0.0, visible=False),
    )  # fmt: skip
    g = GpuSample(2, "MIG-1", "NVIDIA H200 MIG 3g.71gb", "nvml", mig_parent=0, mig_instance=1,
                  processes=procs)  # fmt: skip
    none = GpuSample(0, "GPU-0", "NVIDIA H200", "nvml")
    snap = Snapshot(t=1.0, wall=2.0, gpus=(g, none))
    back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap))))
    assert back == snap
    assert back.gpus[0].processes == procs and back.gpus[1].processes is None


def test_round_trip_keeps_the_engine_read_and_what_its_page_lacked() -> None:
    e = EngineSample(
        url="http://127.0.0.1:8080/metrics",
        model_name="",
        engine="",
        running=9.0,
        waiting=7.0,
        flavour="tgi",
        flavour_version="1.0-3.x",
        missing=(("kv_cache_usage", ()), ("ttft", ("a", 'b{c="d"}'))),
    )
    snap = Snapshot(t=1.0, wall=2.0, engines=(e,))
    back = snapshot_from_dict(json.loads(json.dumps(snapshot_to_dict(snap))))
    assert back == snap
    assert back.engines[0].kv_cache_usage is None


def test_recorder_flushes_each_line_before_close(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path, header={"window_s": 5.0})
    snap = snapshots("starved", 1)[0]
    rec.write(snap, {"verdicts": [], "gpus": [], "engines": []})
    # Read while the recorder is still open: a crash now would lose nothing.
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["headroom_recording"] == 1
    assert json.loads(lines[1])["snapshot"]["t"] == snap.t
    rec.close()


def test_recorder_refuses_to_splice_into_an_existing_recording(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text('{"headroom_recording": 1}\n')
    with pytest.raises(ConfigError, match="already exists"):
        Recorder(path)


def test_a_partial_last_line_from_a_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    record_story(path, "starved", 4)
    with path.open("a") as fh:
        fh.write('{"snapshot": {"t": 1')
    assert len(read_recording(path).ticks) == 4


def test_malformed_lines_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"headroom_recording": 1}\nnot json\n{"report": null}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2"):
        read_recording(path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"headroom_recording": 1}\n')
    with pytest.raises(ConfigError, match="no ticks"):
        read_recording(empty)
    with pytest.raises(ConfigError, match="cannot read"):
        read_recording(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("story", ["starved", "seq-cap", "cpu-bound", "launch-bound"])
def test_replay_recomputes_the_live_verdicts(tmp_path: Path, story: str) -> None:
    path = tmp_path / f"{story}.jsonl"
    live = record_story(path, story)
    feed = ReplayFeed(path, speed=0)
    replayed = []
    while (frame := feed.step()) is not None:
        assert frame.report is not None
        replayed.append([v["cause"] for v in frame.report["verdicts"]])
    feed.close()
    assert replayed == live
    assert all(live), "every tick names at least one cause"


def test_replay_without_snapshots_shows_the_recorded_reports(tmp_path: Path) -> None:
    path = tmp_path / "remote.jsonl"
    rec = Recorder(path)
    rec.write(None, {"time": 10.0, "gpus": [], "engines": [], "verdicts": [{"cause": "idle"}]})
    rec.write(None, {"time": 11.0, "gpus": [], "engines": [], "verdicts": [{"cause": "starved"}]})
    rec.close()
    feed = ReplayFeed(path, speed=0)
    assert feed.monitor is None
    causes = []
    while (frame := feed.step()) is not None:
        causes.append(frame.report["verdicts"][0]["cause"])  # type: ignore[index]
    assert causes == ["idle", "starved"]
