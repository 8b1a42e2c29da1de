"""Tensor parallelism in the simulator: all-reduces over NVLink, and the comm-bound preset.

The physics first (the all-reduce share of a step grows with the TP degree; its time
with the message size), then the preset on the virtual clock (NVLink busy, SMs and
tensor cores less busy than the same load on one GPU), then what /gpu/metrics serves.
"""

from __future__ import annotations

import time

import pytest

from monitor.sources.dcgm_exporter import DcgmExporterSource
from monitor.sources.samples import GpuSample
from simulator import Simulator, start_sim
from simulator.gpu_timeline import Activity
from simulator.hardware import GPUS, MODELS, KernelModel, gpu_cost, step_work
from simulator.scenarios import build

H100 = GPUS["h100-sxm"]
KERNELS = KernelModel(
    kernels_per_step=144,
    kernel_fixed_s=2e-6,
    launch_overhead_s=5e-6,
    cuda_graphs=True,
    compute_efficiency=0.7,
    memory_efficiency=0.85,
)


def prefill(tokens: int) -> list[tuple[int, int]]:
    return [(tokens, 0)]


@pytest.mark.parametrize("model", ["llama-1b", "llama-8b"])
def test_all_reduce_share_of_the_step_grows_with_the_tp_degree(model: str) -> None:
    shares = []
    for tp in (2, 4, 8):
        cost = gpu_cost(H100, step_work(MODELS[model], prefill(8192), tp), KERNELS)
        shares.append(cost.comm_s / cost.busy_s)
    assert shares[0] < shares[1] < shares[2], shares
    # Each rank computes 1/tp of the layer but all-reduces all of its activations.
    assert shares[2] > 2 * shares[0]


def test_all_reduce_time_grows_with_the_message_size() -> None:
    m = MODELS["llama-8b"]
    times = [gpu_cost(H100, step_work(m, prefill(t), 4), KERNELS).comm_s for t in (512, 4096)]
    assert times[1] > 4 * times[0]
    # Ring all-reduce: each rank sends 2(N-1)/N of the payload, 2 all-reduces per layer.
    work = step_work(m, prefill(4096), 4)
    assert work.allreduces == 2 * m.num_layers
    assert work.allreduce_bytes == 2 * m.num_layers * 4096 * m.hidden_size * 2
    cost = gpu_cost(H100, work, KERNELS)
    assert cost.nvlink_bytes == pytest.approx(1.5 * work.allreduce_bytes)


def test_one_gpu_has_no_all_reduce_and_the_same_cost_as_before() -> None:
    m = MODELS["llama-8b"]
    chunks = [(1, 500)] * 64 + [(2048, 0)]
    work = step_work(m, chunks)
    assert work == step_work(m, chunks, 1)
    assert (work.tp, work.allreduces, work.allreduce_bytes) == (1, 0, 0.0)
    cost = gpu_cost(H100, work, KERNELS)
    assert cost.comm_s == 0.0 and cost.nvlink_bytes == 0.0
    assert cost.busy_s == pytest.approx(cost.roofline_s + 144 * 2e-6)


def steady(sim: Simulator, seconds: float = 30.0) -> Activity:
    sim.run_for(seconds)
    return sim.gpu_activity(10.0)


def test_comm_bound_preset_reads_nvlink_busy_and_compute_idle() -> None:
    tp8 = steady(Simulator("comm-bound"))
    one = steady(Simulator(build("comm-bound", engine={"tensor_parallel_size": 1})))
    # All eight ranks busy all the time, but the SMs and tensor cores much less than the
    # same load on one GPU, where nothing waits on links.
    assert tp8.util > 0.95 and one.util > 0.95
    assert one.nvlink_bytes_per_s == 0.0
    assert tp8.sm_active < 0.7 < one.sm_active
    assert tp8.tensor_active < 0.5 < one.tensor_active
    # Sent per GPU (as much received): tx + rx at a fair share of the 900 GB/s peak.
    assert 2 * tp8.nvlink_bytes_per_s > 0.3 * 900e9


def test_comm_bound_preset_spends_over_half_of_each_step_in_all_reduces() -> None:
    sim = Simulator("comm-bound", record=False)
    sim.run_for(10)  # past the first wave of prompts
    comm = busy = 0.0
    while sim.now < 30:
        step = sim.step()
        assert step is not None and step.work.tp == 8
        comm += step.gpu.comm_s
        busy += step.gpu.busy_s
    assert comm > 0.5 * busy


def gpus_served(scenario: str) -> list[GpuSample]:
    with start_sim(scenario=scenario) as sim:
        src = DcgmExporterSource(sim.gpu_metrics_url, timeout=30)
        try:
            time.sleep(2.5)  # two GPU sampling periods of load
            reading = src.read()
        finally:
            src.close()
    assert not reading.errors, reading.errors
    return list(reading.gpus)


def test_gpu_metrics_serve_eight_ranks_with_nvlink_traffic() -> None:
    gpus = gpus_served("comm-bound")
    assert [g.index for g in gpus] == list(range(8))
    assert len({g.uuid for g in gpus}) == 8
    for g in gpus:
        assert g.nvlink_tx_bytes_per_s is not None and g.nvlink_tx_bytes_per_s > 50e9
        assert g.nvlink_rx_bytes_per_s == g.nvlink_tx_bytes_per_s
        assert g.sm_active is not None and g.sm_active < 0.7
    # Lock step: every rank reads the same.
    assert len({(g.util, g.sm_active, g.tensor_active) for g in gpus}) == 1


def test_gpu_metrics_of_a_one_gpu_scenario_have_no_nvlink() -> None:
    (g,) = gpus_served("compute-bound")
    assert g.nvlink_tx_bytes_per_s is None and g.nvlink_rx_bytes_per_s is None


def test_tensor_parallel_size_is_checked() -> None:
    from simulator.errors import SimConfigError

    with pytest.raises(SimConfigError, match="tensor_parallel_size must be 1, 2, 4 or 8"):
        build("comm-bound", engine={"tensor_parallel_size": 3})
