"""The monitor's real sources read the simulator as they would vLLM and dcgm-exporter."""

from __future__ import annotations

import time

from monitor.sources.dcgm_exporter import DcgmExporterSource
from monitor.sources.vllm import VllmSource
from simulator import start_sim


def test_monitor_sources_read_the_simulated_box() -> None:
    with start_sim(scenario="memory-bound") as sim:
        gpu_src, engine_src = (
            DcgmExporterSource(sim.gpu_metrics_url, timeout=30),
            VllmSource(sim.url, timeout=30),
        )
        try:
            deadline = time.monotonic() + 30
            engine = None
            while time.monotonic() < deadline:
                reading = engine_src.read()
                assert not reading.errors, reading.errors
                engine = reading.engines[0]
                if engine.running == 256 and (engine.generation_tokens_total or 0) > 2000:
                    break
                time.sleep(0.3)
            time.sleep(1.0)  # one full GPU sampling period of steady state
            gpu_reading = gpu_src.read()
        finally:
            gpu_src.close()
            engine_src.close()
    assert engine is not None and engine.running == 256 and engine.waiting == 0
    assert engine.model_name == "llama-3.1-8b"
    assert engine.cache_config_value("block_size") == "16"
    assert engine.estimated_flops_total and engine.estimated_read_bytes_total
    assert not gpu_reading.errors, gpu_reading.errors
    (gpu,) = gpu_reading.gpus
    assert gpu.source == "dcgm-exporter" and "H100" in gpu.name
    # Memory-bound decode: DRAM busy, tensor pipes much less so. A ratio, as the busy share
    # itself drops when this shared machine starves the engine thread (a real CPU stall).
    assert gpu.util is not None and 0 < gpu.util <= 1
    assert gpu.dram_active is not None and gpu.tensor_active is not None
    assert gpu.dram_active > 1.3 * gpu.tensor_active
