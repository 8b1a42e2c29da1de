"""Scenario presets and config files: overrides apply, mistakes are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import SCENARIOS, SimConfigError, build
from simulator.cli import resolve


def test_every_scenario_is_a_valid_config() -> None:
    for name in SCENARIOS:
        cfg = build(name)
        assert cfg.scenario == name and cfg.summary


def test_toml_file_overrides_a_scenario(tmp_path: Path) -> None:
    f = tmp_path / "box.toml"
    f.write_text(
        'scenario = "seq-cap"\n[engine]\nmax_num_seqs = 16\ngpu = "h200"\n[load]\nconcurrency = 48\n'
    )
    cfg = resolve(None, str(f))
    assert cfg.scenario == "seq-cap"
    assert (cfg.engine.max_num_seqs, cfg.engine.gpu, cfg.load.concurrency) == (16, "h200", 48)
    assert cfg.load.output_tokens == 512  # untouched keys keep the scenario's value


def test_yaml_file_and_flag_scenario_wins(tmp_path: Path) -> None:
    f = tmp_path / "box.yaml"
    f.write_text("scenario: seq-cap\nengine:\n  cpu_step_s: 0.002\n")
    cfg = resolve("kv-cap", str(f))
    assert cfg.scenario == "kv-cap" and cfg.engine.cpu_step_s == 0.002
    assert cfg.engine.num_blocks == 320


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[engine]\nmax_num_seqz = 4\n", "unknown key engine.max_num_seqz"),
        ("[engine]\nmax_num_seqs = 'many'\n", "engine.max_num_seqs must be a int"),
        ("[engine]\nmax_num_seqs = 0\n", "engine.max_num_seqs must be >= 1"),
        ("[engine]\ngpu = 'rtx-9090'\n", "engine.gpu 'rtx-9090' is not a preset"),
        ("[engine]\nnum_blocks = 2\n", "cannot hold one request"),
        ("[load]\nmode = 'sideways'\n", "load.mode must be none, closed or open"),
        ("[gpus]\nx = 1\n", "unknown key gpus"),
        ("scenario = 'warp'\n", "unknown scenario 'warp'"),
        ("[engine\n", "is malformed"),
    ],
)
def test_bad_config_files_are_refused_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "box.toml"
    f.write_text(text)
    with pytest.raises(SimConfigError, match=message) as info:
        resolve(None, str(f))
    assert "\n" not in str(info.value)


def test_missing_and_unknown_kind_of_file(tmp_path: Path) -> None:
    with pytest.raises(SimConfigError, match="cannot read config"):
        resolve(None, str(tmp_path / "nope.toml"))
    other = tmp_path / "box.json"
    other.write_text("{}")
    with pytest.raises(SimConfigError, match=r"use a \.toml, \.yaml or \.yml file"):
        resolve(None, str(other))


def test_load_that_overflows_the_context_is_refused() -> None:
    with pytest.raises(SimConfigError, match="over engine.max_model_len"):
        build("seq-cap", load={"prompt_tokens": 9000})
