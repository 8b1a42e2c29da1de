"""A GPU the engine shares: contended when another process takes SM time, evidence when it
only holds memory, MIG instances judged as their own GPUs. Figures from the H200 run in
bench/results/gpu_processes_h200.json (two matmul loops and an idle holder on GPU 0)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from monitor.diagnosis import diagnose
from monitor.serve.exporter import GpuCollector
from monitor.sources.samples import GpuProcess, GpuSample, HostSample, ProcessCpu, Snapshot
from monitor.watch.report import build_report, render_text
from monitor.window.full import compute_window
from monitor.window.stats import WindowStats

ENGINE, RIVAL, HOLDER = 529, 530, 531
GIB = 2**30


def proc(pid: int, sm: float | None, mem: int = GIB, **kw: object) -> GpuProcess:
    fields: dict[str, object] = dict(
        user="root", command="/opt/torch/.venv/bin/python bench/gpu/workloads.py matmul"
    )
    fields.update(kw)
    return GpuProcess(pid=pid, memory_bytes=mem, sm_share=sm, **fields)  # type: ignore[arg-type]


def h200(processes: Sequence[GpuProcess] | None, **kw: object) -> GpuSample:
    """The H200 under the two matmul loops: util 0.999, SM 0.88, tensor 0.81, DRAM 0.17."""
    base: dict[str, object] = dict(
        index=0, uuid="GPU-0", name="NVIDIA H200", source="nvml", util=0.999, sm_active=0.882,
        tensor_active=0.812, dram_active=0.168, memory_used_bytes=3 * GIB,
        memory_total_bytes=140 * GIB,
        processes=None if processes is None else tuple(processes),
    )  # fmt: skip
    base.update(kw)
    return GpuSample(**base)  # type: ignore[arg-type]


def window(gpus: Sequence[GpuSample], engine_pids: Sequence[int] = (ENGINE,)) -> WindowStats:
    snaps = []
    for i in range(5):
        host = HostSample(
            cpu_count=16, cpu_total_seconds=16.0 * i, cpu_idle_seconds=14.0 * i,
            processes=tuple(ProcessCpu(p, "python", 1.0 * i) for p in engine_pids),
        )  # fmt: skip
        snaps.append(Snapshot(t=float(i), wall=1e9 + i, gpus=tuple(gpus), host=host))
    return compute_window(snaps)


def by_cause(w: WindowStats) -> dict[str, object]:
    return {v.cause: v for v in diagnose(w).verdicts}


def test_a_rival_matmul_beside_the_engine_is_contended_and_leads() -> None:
    w = window([h200([proc(ENGINE, 0.36), proc(RIVAL, 0.64), proc(HOLDER, 0.0, 612 * 2**20)])])
    verdicts = diagnose(w).verdicts
    assert [v.cause for v in verdicts][:2] == ["contended", "compute-bound"]
    top = verdicts[0]
    assert top.scope == "gpu:0"
    ev = {e.name: e.value for e in top.evidence}
    assert ev["other_sm_share"] == 0.64 and ev["engine_sm_share"] == 0.36
    assert ev["other_processes"] == 2
    assert "pid 530" in top.summary and "64%" in top.summary
    # The saturation verdict on the same GPU says the GPU is shared, too.
    names = {e.name: e.value for e in verdicts[1].evidence}
    assert names["other_sm_share"] == 0.64 and names["other_memory_bytes"] == GIB + 612 * 2**20


def test_a_process_that_only_holds_memory_is_evidence_not_contention() -> None:
    w = window([h200([proc(ENGINE, 0.95), proc(HOLDER, 0.0, 20 * GIB)])])
    causes = by_cause(w)
    assert "contended" not in causes
    ev = {e.name: e.value for e in causes["compute-bound"].evidence}  # type: ignore[attr-defined]
    assert ev["other_processes"] == 1 and ev["other_memory_bytes"] == 20 * GIB


def test_a_sliver_of_sm_time_is_below_the_threshold() -> None:
    w = window([h200([proc(ENGINE, 0.9), proc(RIVAL, 0.05)])])
    assert "contended" not in by_cause(w)


def test_no_contention_without_the_engine_on_that_gpu_or_without_per_process_samples() -> None:
    # The engine runs elsewhere: another job's GPU is that job's business.
    assert "contended" not in by_cause(window([h200([proc(RIVAL, 0.64), proc(HOLDER, 0.3)])]))
    # The driver keeps no per-process samples (a MIG instance, some vGPUs): cannot say.
    w = window([h200([proc(ENGINE, None), proc(RIVAL, None)])])
    causes = by_cause(w)
    assert "contended" not in causes
    ev = {e.name: e.value for e in causes["compute-bound"].evidence}  # type: ignore[attr-defined]
    assert ev["other_processes"] == 1 and ev["other_sm_share"] is None
    # Processes not read at all: the verdicts carry nothing about sharing.
    causes = by_cause(window([h200(None)]))
    assert not any(e.name.startswith("other_") for e in causes["compute-bound"].evidence)  # type: ignore[attr-defined]


def test_a_hidden_pid_beside_a_visible_engine_counts_as_someone_else() -> None:
    w = window([h200([proc(ENGINE, 0.4), proc(999_999, 0.6, visible=False, user=None)])])
    top = diagnose(w).verdicts[0]
    assert top.cause == "contended" and "not visible here" in top.summary


def test_the_report_marks_the_engine_and_names_every_field() -> None:
    w = window([h200([proc(ENGINE, 0.36), proc(RIVAL, 0.64, container="3f4e5d6c7b8a",
                                                pod="trainer-0", namespace="batch")])])  # fmt: skip
    report = build_report(w, diagnose(w).verdicts)
    rows = {p["pid"]: p for p in report["gpus"][0]["processes"]}
    assert set(rows[ENGINE]) >= {"pid", "user", "command", "memory_bytes", "sm_share",
                                 "engine", "container", "pod", "namespace"}  # fmt: skip
    assert rows[ENGINE]["engine"] == "engine" and rows[RIVAL]["engine"] == "other"
    assert (rows[RIVAL]["container"], rows[RIVAL]["pod"], rows[RIVAL]["namespace"]) == (
        "3f4e5d6c7b8a", "trainer-0", "batch")  # fmt: skip
    text = render_text(report)
    assert "batch/trainer-0" in text and "[contended] gpu:0" in text
    line = next(ln for ln in text.splitlines() if ln.split()[:2] == ["0", str(ENGINE)])
    assert "engine" in line and "36%" in line


def test_hidden_pids_get_a_note_not_no_such_process() -> None:
    w = window([h200([proc(4242, 0.5, visible=False, user=None, command=None)])], ())
    report = build_report(w)
    assert report["gpus"][0]["processes"][0]["engine"] is None
    assert any("not visible here" in n and "hostPID" in n for n in report["notes"])
    assert "(another PID namespace)" in render_text(report)


def scrape(w: WindowStats) -> dict[str, list[tuple[dict[str, str], float]]]:
    class View:
        def window(self) -> WindowStats:
            return w

        def diagnosis(self) -> None:
            return None

        def latest(self) -> None:
            return None

    reg = CollectorRegistry()
    reg.register(GpuCollector(View()))  # type: ignore[arg-type]
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_the_exporter_sums_per_container_not_per_pid() -> None:
    w = window([h200([
        proc(ENGINE, 0.3, 60 * GIB, container="aaaaaaaaaaaa", pod="vllm-0", namespace="inference"),
        proc(ENGINE + 100, 0.1, 2 * GIB, container="aaaaaaaaaaaa", pod="vllm-0", namespace="inference"),
        proc(RIVAL, 0.5, 9 * GIB, container="bbbbbbbbbbbb", pod="trainer-0", namespace="batch"),
        proc(HOLDER, 0.0, 1 * GIB),
    ])], (ENGINE, ENGINE + 100))  # fmt: skip
    m = scrape(w)
    mem = {(lb["container"], lb["pod"], lb["namespace"]): v
           for lb, v in m["headroom_gpu_container_memory_bytes"]}  # fmt: skip
    assert mem == {
        ("aaaaaaaaaaaa", "vllm-0", "inference"): 62 * GIB,
        ("bbbbbbbbbbbb", "trainer-0", "batch"): 9 * GIB,
        ("", "", ""): 1 * GIB,  # a process on the host, in no container
    }
    assert all(set(lb) == {"gpu", "container", "pod", "namespace"}
               for lb, _ in m["headroom_gpu_container_memory_bytes"])  # fmt: skip
    sm = {lb["owner"]: v for lb, v in m["headroom_gpu_process_sm_share_ratio"]}
    assert sm["engine"] == 0.4 and sm["other"] == 0.5
    count = {lb["owner"]: v for lb, v in m["headroom_gpu_processes"]}
    assert count == {"engine": 2, "other": 2, "unseen": 0}


def mig(slot: int, gi: int, util: float, sm: float, **kw: object) -> GpuSample:
    return h200(None, index=slot, uuid=f"MIG-{gi}", name="NVIDIA H200 MIG 3g.71gb",
                mig_parent=0, mig_instance=gi, util=util, sm_active=sm, **kw)  # fmt: skip


def test_mig_instances_are_judged_alone_and_scoped_to_the_instance() -> None:
    # The whole GPU reads busy, but that mixes the instances: instance 1 saturates, 2 idles.
    w = window([
        h200(None, util=0.9, sm_active=0.5),
        mig(0, 1, util=0.999, sm=0.9, tensor_active=0.8),
        mig(1, 2, util=0.01, sm=0.0, tensor_active=0.0, dram_active=0.0),
    ], ())  # fmt: skip
    verdicts = diagnose(w).verdicts
    scopes = {(v.cause, v.scope) for v in verdicts}
    assert ("compute-bound", "gpu:0/mig:1") in scopes
    assert ("idle", "gpu:0/mig:2") in scopes
    assert not any(v.scope == "gpu:0" for v in verdicts)  # the parent's mix is not judged
    assert [g["scope"] for g in build_report(w)["gpus"]] == ["gpu:0", "gpu:0/mig:1", "gpu:0/mig:2"]
    labels = {lb["gpu"] for lb, _ in scrape(w)["headroom_gpu_utilization_ratio"]}
    assert labels == {"0", "0/mig:1", "0/mig:2"}  # a slot index would clash with GPU 1's
