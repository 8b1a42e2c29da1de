"""The engine's caps asked of the engine: vLLM's /server_info, else the listener's command line."""

from __future__ import annotations

import json

from monitor.sources.engine_config import (
    EngineConfigProbe,
    caps_from_cmdline,
    caps_from_props,
    caps_from_server_info,
)
from monitor.sources.vllm import VllmSource

UNDER_LOAD = "vllm-0.32.0-cpu-metrics-under-load.txt"
SERVER_INFO = {
    "vllm_config": {
        "scheduler_config": {"max_num_seqs": 3, "max_num_batched_tokens": 2048},
        "cache_config": {"block_size": 16},
    },
    "vllm_env": {"VLLM_SERVER_DEV_MODE": True},
}


def test_server_info_and_command_lines_give_the_caps() -> None:
    caps = caps_from_server_info(SERVER_INFO)
    assert caps is not None and (caps.max_num_seqs, caps.max_num_batched_tokens) == (3, 2048)
    # The text form (config_format=text) and other engines' documents carry no caps.
    assert caps_from_server_info({"vllm_config": "VllmConfig(...)"}) is None
    argv = ["vllm", "serve", "m", "--max-num-seqs", "4", "--max-num-batched-tokens=512"]
    caps = caps_from_cmdline(argv)
    assert caps is not None and (caps.max_num_seqs, caps.max_num_batched_tokens, caps.origin) == (
        4,
        512,
        "cmdline",
    )
    assert caps_from_cmdline(["vllm", "serve", "m", "--max-num-seqs"]) is None
    assert caps_from_cmdline(["python", "-m", "pytest"]) is None


def test_the_vllm_source_attaches_what_server_info_says(http_server, read_fixture) -> None:
    http_server.set("/metrics", read_fixture(UNDER_LOAD))
    http_server.set("/server_info?config_format=json", json.dumps(SERVER_INFO))
    src = VllmSource(http_server.url)
    try:
        (e,) = src.read().engines
    finally:
        src.close()
    assert (e.reported_max_num_seqs, e.reported_max_num_batched_tokens) == (3, 2048)
    assert e.reported_caps_origin == "server_info"


def test_without_dev_mode_the_listeners_command_line_is_read(http_server) -> None:
    # /server_info is 404 (vLLM without VLLM_SERVER_DEV_MODE): the process on the port is asked.
    asked: list[int] = []

    def cmdlines(port: int) -> list[list[str]]:
        asked.append(port)
        return [["python3", "-m", "vllm.entrypoints.openai.api_server", "--max-num-seqs=6"]]

    probe = EngineConfigProbe(http_server.url, cmdlines=cmdlines)
    caps = probe.caps()
    assert caps is not None and (caps.max_num_seqs, caps.origin) == (6, "cmdline")
    assert asked == [http_server.port]
    # A remote engine's command line is not ours to read.
    remote = EngineConfigProbe("http://gpu-box.invalid:8000", timeout=0.2, cmdlines=cmdlines)
    assert remote.caps() is None and asked == [http_server.port]


def test_a_server_that_cannot_be_asked_is_not_asked_every_tick(http_server) -> None:
    now = [0.0]
    probe = EngineConfigProbe(
        http_server.url, every=30.0, retry=300.0, clock=lambda: now[0], cmdlines=lambda p: []
    )
    assert probe.caps() is None
    for now[0] in (1.0, 60.0, 299.0):
        assert probe.caps() is None
    assert http_server.hits.count("/server_info?config_format=json") == 1
    http_server.set("/server_info?config_format=json", json.dumps(SERVER_INFO))
    now[0] = 301.0
    assert probe.caps() is not None
    # Once it answers, it is asked again every `every` seconds (a restart may change the caps),
    # and forget() asks on the next read (the demo after a scenario switch).
    now[0] = 320.0
    probe.caps()
    assert http_server.hits.count("/server_info?config_format=json") == 2
    probe.forget()
    probe.caps()
    assert http_server.hits.count("/server_info?config_format=json") == 3


def test_llamacpp_slots_and_sglangs_running_limit_are_sequence_caps() -> None:
    # The H200 run's llama-server (--parallel 8) exported no slot count as a metric: the
    # sweep's check named a compute knee at 1,282 streams against a real knee at 8.
    caps = caps_from_props({"total_slots": 8, "default_generation_settings": {"n_ctx": 4096}})
    assert caps is not None and (caps.max_num_seqs, caps.origin) == (8, "props")
    assert caps_from_props({"total_slots": 0}) is None and caps_from_props({}) is None
    for argv, seqs in (
        (["llama-server", "-m", "m.gguf", "--parallel", "8", "--metrics"], 8),
        (["llama-server", "-m", "m.gguf", "-np", "4"], 4),
        (["python3", "-m", "sglang.launch_server", "--max-running-requests=32"], 32),
    ):
        got = caps_from_cmdline(argv)
        assert got is not None and got.max_num_seqs == seqs, argv


def test_a_llamacpp_server_is_asked_for_its_slots(http_server, read_fixture) -> None:
    # /server_info is 404 (not vLLM); llama.cpp's /props says how many slots it has.
    http_server.set("/metrics", read_fixture("engines/llamacpp-0.3.36-live.txt"))
    http_server.set("/props", json.dumps({"total_slots": 6, "model_path": "m.gguf"}))
    src = VllmSource(http_server.url)
    try:
        (e,) = src.read().engines
    finally:
        src.close()
    assert e.flavour == "llamacpp"
    assert (e.reported_max_num_seqs, e.reported_caps_origin) == (6, "props")
