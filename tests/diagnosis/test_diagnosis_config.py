"""Thresholds and caps from files: the example config, TOML and YAML, and one-line errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tomllib

from monitor.core.errors import ConfigError
from monitor.diagnosis import Caps, Thresholds, load_caps, load_thresholds

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "headroom.example.toml"


def test_example_config_lists_every_threshold_at_its_default() -> None:
    listed = tomllib.loads(EXAMPLE.read_text())["thresholds"]
    assert set(listed) == {f.name for f in dataclasses.fields(Thresholds)}
    assert load_thresholds(EXAMPLE) == Thresholds()
    assert load_caps(EXAMPLE) == Caps()


def test_example_config_explains_every_threshold() -> None:
    lines = EXAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#") and not line.startswith("["):
            assert lines[i - 1].startswith("#"), f"no comment above: {line}"


def test_toml_overrides_and_keeps_the_rest(tmp_path: Path) -> None:
    p = tmp_path / "t.toml"
    p.write_text("[thresholds]\nkv_full = 0.95\nenter_windows = 3\nutil_idle = 0\n")
    th = load_thresholds(p)
    assert (th.kv_full, th.enter_windows, th.util_idle) == (0.95, 3, 0.0)
    assert th.waiting_min == Thresholds().waiting_min


def test_top_level_keys_work_without_a_table(tmp_path: Path) -> None:
    p = tmp_path / "t.toml"
    p.write_text("kv_full = 0.8\n[caps]\nmax_num_seqs = 8\n")
    assert load_thresholds(p).kv_full == 0.8
    assert load_caps(p).max_num_seqs == 8


def test_yaml(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("thresholds:\n  util_saturated: 0.9\ncaps:\n  max_num_seqs: 64\n  gpu: h100-sxm\n")
    assert load_thresholds(p).util_saturated == 0.9
    assert load_caps(p) == Caps(max_num_seqs=64, gpu="h100-sxm")


@pytest.mark.parametrize(
    ("text", "suffix", "needle"),
    [
        ("[thresholds]\nkv_ful = 0.9\n", ".toml", "thresholds.kv_ful: unknown key"),
        ("[thresholds]\nkv_full = 'high'\n", ".toml", "thresholds.kv_full: expected a number"),
        (
            "[thresholds]\nenter_windows = 1.5\n",
            ".toml",
            "thresholds.enter_windows: expected an integer",
        ),
        (
            "[thresholds]\nenter_windows = true\n",
            ".toml",
            "thresholds.enter_windows: expected an integer",
        ),
        (
            "[thresholds]\nenter_windows = 0\n",
            ".toml",
            "thresholds.enter_windows: must be at least 1",
        ),
        ("[thresholds]\nkv_full = -0.1\n", ".toml", "thresholds.kv_full: must not be negative"),
        ("[thresholds]\nkv_full = \n", ".toml", "not valid TOML"),
        ("thresholds: [1, 2\n", ".yaml", "not valid YAML"),
        ("kv_full = 0.9\n", ".ini", "unknown config format"),
        ("[thresholds]\n", ".toml", None),
    ],
)
def test_bad_files_give_one_line_naming_the_key(
    tmp_path: Path, text: str, suffix: str, needle: str | None
) -> None:
    p = tmp_path / f"t{suffix}"
    p.write_text(text)
    if needle is None:
        assert load_thresholds(p) == Thresholds()
        return
    with pytest.raises(ConfigError) as err:
        load_thresholds(p)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[caps]\ngpu = 'T4'\n", "caps.gpu: unknown GPU"),
        ("[caps]\nmax_num_seqs = 0\n", "caps.max_num_seqs: must be at least 1"),
        ("[caps]\nmax_num_seqs = '64'\n", "caps.max_num_seqs: expected an integer"),
        ("[caps]\nprecision = 'fp4'\n", "caps.precision"),
        ("[caps]\nmax_seqs = 4\n", "caps.max_seqs: unknown key"),
    ],
)
def test_bad_caps(tmp_path: Path, text: str, needle: str) -> None:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_caps(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_thresholds(tmp_path / "nope.toml")
