"""Start and stop llama.cpp's `llama-server` serving a tiny random-weight GGUF on 127.0.0.1.

From Python (stdlib only, so any process can import it by path)::

    with LlamaServer(parallel=4) as server:
        print(server.url)  # http://127.0.0.1:PORT, /health already answers 200

From the shell (builds on first use, serves until Ctrl-C)::

    python deploy/llamacpp/serve.py --port 8080 --parallel 4

The server binary (setup.sh, cached in $HEADROOM_LLAMACPP_DIR, default
~/.cache/headroom/llamacpp) and the model (make_tiny_gguf.py, $HEADROOM_TINY_GGUF, default
~/.cache/headroom/tiny-llama.gguf; it needs the ``gguf`` package) are made on first use.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.append(str(HERE.parent))  # deploy/serve_setup.py, what both serve.py share
from serve_setup import free_port, last_line, run_setup, spawn  # noqa: E402

SETUP_SH = HERE / "setup.sh"
MAKE_MODEL = HERE / "make_tiny_gguf.py"


class LlamaSetupError(RuntimeError):
    """llama-server could not be built, or the model not written. The message is one line."""


class LlamaStartError(RuntimeError):
    """The server did not become healthy. The message ends with the tail of its log."""


def ensure_binary(timeout: float = 1800.0) -> Path:
    """Run setup.sh (instant once built) and return the llama-server path."""
    return run_setup(SETUP_SH, LlamaSetupError, "llama.cpp build", timeout)


def ensure_model(python: str = sys.executable, timeout: float = 300.0) -> Path:
    """Write the tiny GGUF once (instant when cached) and return its path."""
    proc = subprocess.run(
        [python, str(MAKE_MODEL)], capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise LlamaSetupError(f"cannot write the tiny GGUF: {last_line(proc.stderr)}")
    return Path(last_line(proc.stdout))


class LlamaServer:
    """`llama-server --metrics` with ``parallel`` slots (its sequence cap); a context manager.

    One thread: a decode step's cost then grows with the batch far less than with the
    steps, so throughput rises up to the slot count and stays flat past it, as on a GPU.
    Each slot gets ``slot_ctx`` tokens of context.
    """

    def __init__(
        self,
        parallel: int = 4,
        slot_ctx: int = 2048,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 120.0,
        model: Path | None = None,
    ) -> None:
        self.parallel = parallel
        self.slot_ctx = slot_ctx
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.model = model  # a GGUF of your own; None: the tiny one, written on first use
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: object | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, binary: Path, model: Path) -> list[str]:
        return [
            str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--parallel", str(self.parallel), "--ctx-size", str(self.parallel * self.slot_ctx),
            "--threads", "1", "--metrics", "--no-webui", *self.extra_args,
        ]  # fmt: skip

    def start(self) -> LlamaServer:
        binary = ensure_binary()
        model = self.model if self.model is not None else ensure_model()
        fd, name = tempfile.mkstemp(prefix=f"llama-server-{self.port}-", suffix=".log")
        self.log_path = Path(name)
        log = os.fdopen(fd, "wb")
        self._log = log
        self._proc = spawn(self.command(binary, model), log, start_new_session=False)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise LlamaStartError(f"llama-server exited with code {code}: {self.log_tail()}")
            with contextlib.suppress(urllib.error.URLError, OSError):
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() > deadline:
                raise LlamaStartError(
                    f"llama-server not healthy after {self.startup_timeout:.0f} s: "
                    f"{self.log_tail()}"
                )
            time.sleep(0.2)

    def log_tail(self, lines: int = 10) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"log {self.log_path}:\n" + "\n".join(tail)

    def stop(self, grace: float = 10.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        log, self._log = self._log, None
        if log is not None:
            log.close()  # type: ignore[attr-defined]

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="serve the tiny GGUF with llama.cpp's server")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--parallel", type=int, default=4, help="slots: the sequence cap")
    p.add_argument("--model", type=Path, default=None, help="a GGUF (default: the tiny one)")
    args = p.parse_args(argv)
    if args.model is not None and not args.model.is_file():
        print(f"serve.py: no model file {args.model}", file=sys.stderr)
        return 1
    try:
        with LlamaServer(parallel=args.parallel, port=args.port, model=args.model) as server:
            print(f"serving on {server.url} (metrics at {server.url}/metrics)", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except (LlamaSetupError, LlamaStartError) as exc:
        print(f"serve.py: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
