"""An external Locust worker given a config it cannot take says so in one line.

A worker started by hand on another host from another checkout reads the sweep's config file
(`python -m loadgen.worker_locust --role worker --config ...`): a newer sweep's field, a wrong
value or a missing file is one line on stderr and exit 1, never pydantic's traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loadgen.schema import WorkerConfig


def _worker(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.worker_locust", "--role", "worker", "--config", str(config),
         "--master-port", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _written(tmp_path: Path, **extra: object) -> Path:
    cfg = WorkerConfig(target="http://127.0.0.1:1", model="m").model_dump()
    cfg.update(extra)
    path = tmp_path / "worker-config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_a_field_from_a_newer_sweep_names_the_field_and_the_fix(tmp_path: Path) -> None:
    proc = _worker(_written(tmp_path, warp_drive=True))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "warp_drive" in lines[0] and "same headroom version" in lines[0]


def test_a_wrong_value_or_a_missing_file_is_one_line(tmp_path: Path) -> None:
    bad = _worker(_written(tmp_path, input_tokens="many"))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert "input_tokens" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    gone = _worker(tmp_path / "nowhere.json")
    assert gone.returncode == 1 and "Traceback" not in gone.stderr
    assert "nowhere.json" in gone.stderr and len(gone.stderr.strip().splitlines()) == 1
