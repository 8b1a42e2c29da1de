"""Agent settings: flags > environment > file > defaults, and one-line errors naming the origin."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.core.errors import ConfigError
from monitor.serve.config import DEFAULT_PORT, load_agent_config, load_web_config, parse_listen


def test_defaults_listen_on_loopback() -> None:
    cfg = load_agent_config(env={})
    assert cfg.host_port == ("127.0.0.1", DEFAULT_PORT)
    assert (cfg.interval, cfg.window, cfg.vllm) == (1.0, 10.0, ())
    assert cfg.stale_after_s == pytest.approx(8.0)


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_precedence_flags_over_env_over_file(tmp_path: Path, suffix: str) -> None:
    f = tmp_path / f"agent{suffix}"
    if suffix == ".yaml":
        f.write_text("interval: 2\nwindow: 20\nmax-num-seqs: 64\nvllm: [http://a:8000]\n")
    else:
        f.write_text('interval = 2\nwindow = 20\nmax_num_seqs = 64\nvllm = ["http://a:8000"]\n')
    env = {"HEADROOM_WINDOW": "30", "HEADROOM_VLLM": "http://b:8000, http://c:8000"}
    cfg = load_agent_config(f, flags={"interval": None, "max_num_seqs": 128}, env=env)
    assert cfg.interval == 2.0  # file (the flag was not given)
    assert cfg.window == 30.0  # environment over file
    assert cfg.max_num_seqs == 128  # flag over file
    assert cfg.vllm == ("http://b:8000", "http://c:8000")
    cfg = load_agent_config(f, flags={"vllm": ["http://d:8000"]}, env=env)
    assert cfg.vllm == ("http://d:8000",)


def test_agent_table_in_a_shared_file(tmp_path: Path) -> None:
    f = tmp_path / "headroom.toml"
    f.write_text("[agent]\nlisten = '0.0.0.0:9500'\n\n[thresholds]\nutil_low = 0.4\n")
    assert load_agent_config(f, env={}).host_port == ("0.0.0.0", 9500)


@pytest.mark.parametrize(
    ("file_text", "env", "flags", "message"),
    [
        ("interval: 0\n", {}, {}, "config {f}: interval: must be > 0"),
        ("interval: -1\n", {"HEADROOM_INTERVAL": "abc"}, {}, "environment HEADROOM_INTERVAL: must be a number, got 'abc'"),
        ("", {}, {"interval": 0.0}, "--interval: must be > 0"),
        ("intervall: 1\n", {}, {}, "config {f}: intervall: unknown setting"),
        ("listen: localhost\n", {}, {}, "config {f}: listen: expected HOST:PORT"),
        ("", {"HEADROOM_LISTEN": "1.2.3.4:99999"}, {}, "environment HEADROOM_LISTEN: port must be 0-65535"),
        ("", {}, {"max_num_seqs": 0}, "--max-num-seqs: must be at least 1"),
        ("window: 0.5\n", {}, {}, "window (0.5 s) must be at least the interval (1 s)"),
        ("- a\n- b\n", {}, {}, "config {f}: expected a table of settings"),
        ("interval: [\n", {}, {}, "config {f}: not valid YAML"),
        ("", {"HEADROOM_ENGINE": "ollama"}, {}, "environment HEADROOM_ENGINE: unknown engine 'ollama' (known: vllm, sglang, tgi"),
        ("", {"HEADROOM_MAX_NUM_SEQS": "1.5"}, {}, "environment HEADROOM_MAX_NUM_SEQS: must be an integer, got '1.5'"),
        ("", {"HEADROOM_HOST": "maybe"}, {}, "environment HEADROOM_HOST: must be true or false, got 'maybe'"),
        ("vllm: http://a:8000\n", {}, {}, "config {f}: vllm: must be a list, got 'http://a:8000'"),
        ("timeout: true\n", {}, {}, "config {f}: timeout: must be a number"),
        ("", {"HEADROOM_PIDS": "12,x"}, {}, "environment HEADROOM_PIDS: must be an integer, got 'x'"),
        ("", {}, {"gpus": [0, -1]}, "--gpu: GPU indices start at 0"),
        ("gpus: [1, 2.5]\n", {}, {}, "config {f}: gpus: must be an integer, got 2.5"),
        ("", {"HEADROOM_DIAGNOSE_EVERY": "0"}, {}, "environment HEADROOM_DIAGNOSE_EVERY: must be > 0"),
        ("window: 10\n", {}, {"diagnose_every": 30.0}, "diagnose_every (30 s) must be at most the window (10 s)"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_errors(
    tmp_path: Path, file_text: str, env: dict[str, str], flags: dict[str, object], message: str
) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text(file_text)
    with pytest.raises(ConfigError) as info:
        load_agent_config(f, flags=flags, env=env)
    text = str(info.value)
    assert message.format(f=f) in text
    assert "\n" not in text


def test_values_from_files_and_the_environment_are_converted(tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text("interval: 2\nmax_num_seqs: 64.0\npids: [7, '8']\nallow_profile: yes\n")
    env = {"HEADROOM_HOST": "false", "HEADROOM_GPM": "0", "HEADROOM_WINDOW": " 30 "}
    cfg = load_agent_config(f, env=env)
    assert (cfg.interval, cfg.window, cfg.max_num_seqs, cfg.pids) == (2.0, 30.0, 64, (7, 8))
    assert isinstance(cfg.interval, float) and isinstance(cfg.max_num_seqs, int)
    assert (cfg.host, cfg.gpm, cfg.allow_profile) == (False, False, True)
    assert cfg.gpus == ()  # every GPU
    assert load_agent_config(env={"HEADROOM_GPUS": "2, 0"}).gpus == (2, 0)


def test_engine_is_forced_from_the_environment() -> None:
    assert load_agent_config(env={}).engine is None  # found from each page
    assert load_agent_config(env={"HEADROOM_ENGINE": "tgi"}).engine == "tgi"


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_agent_config(tmp_path / "nope.yaml", env={})
    (tmp_path / "a.ini").write_text("x=1")
    with pytest.raises(ConfigError, match="unknown config format"):
        load_agent_config(tmp_path / "a.ini", env={})


def test_listen_forms() -> None:
    assert parse_listen("[::1]:9402") == ("::1", 9402)
    assert parse_listen(":9402") == ("0.0.0.0", 9402)
    with pytest.raises(ValueError, match="brackets"):
        parse_listen("::1:9402")


def test_web_config_resolves_relative_paths_and_rejects_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "k.pem").write_text("x")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
    cfg = load_web_config(web)
    assert cfg.tls is not None and cfg.tls.cert_file == tmp_path / "c.pem"
    web.write_text("http_server_config:\n  http2: false\n")
    with pytest.raises(ConfigError, match="http_server_config: not supported"):
        load_web_config(web)
    web.write_text("tls_server_config:\n  cert_file: c.pem\n  key_file: missing.pem\n")
    with pytest.raises(ConfigError, match="key_file: no such file"):
        load_web_config(web)
    web.write_text(
        "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
    )
    with pytest.raises(ConfigError, match="client_ca_file: required"):
        load_web_config(web)


def test_the_agent_watches_only_the_gpus_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # A box shared between teams: --gpu 2 (HEADROOM_GPUS=2) reads GPU 2 alone, and a GPU
    # the box lacks is one line naming the ones it has.
    from fake_nvml import FakeNvml, workload_gpu

    import monitor.sources.nvml as nvml_source
    from monitor.serve.agent import build_agent_sources

    fake = FakeNvml([workload_gpu("idle"), workload_gpu("idle"), workload_gpu("matmul")])
    monkeypatch.setattr(nvml_source, "_import_pynvml", lambda: fake)
    config = load_agent_config(env={"HEADROOM_GPUS": "2"}, flags={"host": False})
    (source,), _ = build_agent_sources(config)
    try:
        source.read()
        fake.advance(1.0)
        assert [g.index for g in source.read().gpus] == [2]
    finally:
        source.close()
    with pytest.raises(ConfigError, match="GPU index 5 does not exist: this host has 3"):
        build_agent_sources(load_agent_config(env={}, flags={"gpus": [5], "host": False}))


@pytest.mark.parametrize(
    ("settings", "verdict_times"),
    [
        ({}, [0.0, 5.0]),  # the default step, 5 s
        ({"HEADROOM_WINDOW": "3"}, [0.0, 3.0, 6.0, 9.0]),  # at most the window
        ({"HEADROOM_DIAGNOSE_EVERY": "2"}, [0.0, 2.0, 4.0, 6.0, 8.0]),
    ],
)
def test_the_agent_judges_once_a_step_and_a_reader_gets_the_latest_reading(
    settings: dict[str, str], verdict_times: list[float]
) -> None:
    # Steps (what a cause's hold counts, what listeners hear) come once a step; the window
    # is built from every reading in it, and a reader gets the newest one judged.
    from monitor.serve.agent import Agent
    from monitor.sources.samples import EngineSample, Snapshot

    config = load_agent_config(env={**settings, "HEADROOM_LISTEN": "127.0.0.1:0"})
    agent = Agent(config, sources=[])
    try:
        judged: list[float] = []
        agent.monitor.listeners.append(lambda d, w: judged.append(w.end))
        for i in range(10):
            engine = EngineSample(
                url="http://127.0.0.1:1/metrics", model_name="m", engine="0",
                running=4.0, waiting=0.0, request_success_total=2.0 * i,
            )  # fmt: skip
            agent.sampler.push(Snapshot(t=float(i), wall=1.8e9 + i, engines=(engine,)))
        assert judged == verdict_times
        window = agent.monitor.window()
        assert window is not None and window.end == 9.0
        # every reading in the window, and the one before it
        assert window.engines[0].samples == min(10, int(config.window) + 2)
        report = agent.monitor.report()
        assert report is not None and report["time"] == 1.8e9 + 9
        assert judged == verdict_times  # reading is no step
    finally:
        agent.sampler.close()
        agent.server.server_close()
