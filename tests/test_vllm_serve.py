"""k9bench.serving.serve.serve_vllm against a stand-in server (tests/fake_vllm_server.py): it waits for
/v1/models, yields the URL, stops the whole process group however the block ends, and a server
that dies or never answers is a clear error carrying the end of its log. The real vLLM server is
tests/test_vllm.py's."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from k9bench.serving.endpoint import get_json
from k9bench.serving.serve import ServerStartError, server_command, serve_vllm

FAKE = Path(__file__).resolve().parent / "fake_vllm_server.py"


@pytest.fixture
def fake_python(tmp_path) -> str:
    """An executable that, called as ``X -m vllm.entrypoints.openai.api_server ARGS``, runs the stand-in with ARGS."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def pids_of(path: Path) -> list[int]:
    for _ in range(100):
        if path.is_file() and path.read_text().strip():
            return [int(p) for p in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"{path} not written")


def gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_command_line():
    cmd = server_command("org/model", python="/v/bin/python", host="127.0.0.1", port=8001, args=["--max-model-len", "4096"],
                         tensor_parallel=4)
    assert cmd == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/model", "--host", "127.0.0.1",
                   "--port", "8001", "--enable-prefix-caching", "--media-io-kwargs", '{"video": {"num_frames": -1}}',
                   "--tensor-parallel-size", "4", "--max-model-len", "4096"]
    mine = server_command("m", python="p", host="h", port=1, args=["--media-io-kwargs", "{}", "--no-enable-prefix-caching"],
                          tensor_parallel=1)
    assert "--enable-prefix-caching" not in mine and mine.count("--media-io-kwargs") == 1
    with pytest.raises(ValueError, match="--port is set by serve_vllm"):
        server_command("m", python="p", host="h", port=1, args=["--port", "9"], tensor_parallel=1)
    with pytest.raises(ValueError, match="tensor-parallel size once"):
        server_command("m", python="p", host="h", port=1, args=["--tensor-parallel-size", "2"], tensor_parallel=2)


def test_serves_then_stops_the_group(fake_python, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_DELAY", "1.5")
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(tmp_path / "pids"))
    log = tmp_path / "logs" / "server.log"
    with serve_vllm("tiny/model", python=fake_python, args="--max-model-len 4096", log_path=log, timeout=30) as url:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1") and isinstance(url, str)
        assert url.log_path == log and url.pid > 0
        import copy
        import pickle

        for again in (copy.deepcopy(url), pickle.loads(pickle.dumps(url))):  # settings and argv get copied
            assert again == url and again.pid == url.pid and again.log_path == log
        status, body = get_json(f"{url}/models")  # answering already: the wait is over
        assert status == 200 and body["data"][0]["id"] == "tiny/model"
        pids = pids_of(tmp_path / "pids")
    assert gone(pids)
    assert "serving tiny/model" in log.read_text()


def test_stopped_when_the_block_raises(fake_python, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(tmp_path / "pids"))
    with pytest.raises(KeyboardInterrupt):
        with serve_vllm("m", python=fake_python, log_path=tmp_path / "s.log", timeout=30):
            pids = pids_of(tmp_path / "pids")
            raise KeyboardInterrupt
    assert gone(pids)


def test_a_server_that_ignores_sigterm_is_killed(fake_python, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "stubborn")
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(tmp_path / "pids"))
    with serve_vllm("m", python=fake_python, log_path=tmp_path / "s.log", timeout=30, stop_timeout=1.0):
        pids = pids_of(tmp_path / "pids")
        assert len(pids) == 2
    assert gone(pids)


def test_a_server_that_dies_is_a_clear_error_with_its_log(fake_python, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "die")
    log = tmp_path / "s.log"
    start = time.monotonic()
    with pytest.raises(ServerStartError) as info:
        with serve_vllm("m", python=fake_python, log_path=log, timeout=60):
            raise AssertionError("the block must not run")
    assert time.monotonic() - start < 30  # noticed when it exits, not at the timeout
    text = str(info.value)
    assert "exited with code 3" in text and str(log) in text
    assert "Unsupported CPU attention configuration" in text and "loading line 39" in text
    assert "loading line 0\n" not in text  # only the last lines
    assert info.value.exit_code == 1


def test_a_server_that_never_answers_times_out_and_is_stopped(fake_python, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_MODE", "hang")
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(tmp_path / "pids"))
    with pytest.raises(ServerStartError) as info:
        with serve_vllm("m", python=fake_python, log_path=tmp_path / "s.log", timeout=3, stop_timeout=2.0):
            raise AssertionError("the block must not run")
    assert "did not answer" in str(info.value) and "within 3 s" in str(info.value)
    assert "fake vLLM hang serving m" in str(info.value)
    assert gone(pids_of(tmp_path / "pids"))


def test_a_port_already_answering_is_refused(fake_python, tmp_path):
    with serve_vllm("m", python=fake_python, log_path=tmp_path / "a.log", timeout=30) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(ServerStartError, match="already answers"):
            with serve_vllm("m", python=fake_python, port=port, log_path=tmp_path / "b.log", timeout=30):
                raise AssertionError("the block must not run")


def test_a_server_that_dies_during_the_block_is_logged_with_its_log(fake_python, tmp_path, monkeypatch):
    import logging
    import signal

    class Keep(logging.Handler):  # our own handler: whatever logging setup an earlier test left behind
        def __init__(self):
            super().__init__(logging.ERROR)
            self.messages: list[str] = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    keep = Keep()
    logger = logging.getLogger("k9bench.serving.serve")
    # Whatever an earlier test or library left (a disabled logger, a raised level, logging.disable), this
    # test reads the logger's own error line: switch it on for the block and put everything back after.
    before = (logger.disabled, logger.level, logging.root.manager.disable)
    logger.disabled = False
    logger.setLevel(logging.ERROR)
    logging.disable(logging.NOTSET)
    logger.addHandler(keep)
    monkeypatch.setenv("FAKE_VLLM_PIDS", str(tmp_path / "pids"))
    try:
        with serve_vllm("m", python=fake_python, log_path=tmp_path / "s.log", timeout=30):
            [pid] = pids_of(tmp_path / "pids")
            os.kill(pid, signal.SIGKILL)
            assert gone([pid])
    finally:
        logger.removeHandler(keep)
        logger.disabled = before[0]
        logger.setLevel(before[1])
        logging.disable(before[2])
    errors = keep.messages
    import k9bench.serving.serve as served

    state = (f"module logger is ours: {served.log is logger}; filters {logger.filters}; handlers {logger.handlers}; "
             f"class {type(logger).__name__}; messages {errors}")
    assert len(errors) == 1, state
    assert "exited with code -9 while in use" in errors[0] and "fake vLLM ok serving m" in errors[0], state


def test_exit_code_waits_for_a_server_that_is_still_exiting(monkeypatch):
    """A killed multi-threaded server shows as a zombie before waitpid can collect it: poll() says None
    for a moment. exit_code waits for the code then, and says None for a server that is running."""
    from k9bench.serving import serve

    class Stub:
        pid = 4242

        def __init__(self, code):
            self.code, self.waited = code, []

        def poll(self):
            return None

        def wait(self, timeout=None):
            self.waited.append(timeout)
            return self.code

    monkeypatch.setattr(serve, "_exiting", lambda pid: True)
    exiting = Stub(-9)
    assert serve.exit_code(exiting, settle=1.5) == -9 and exiting.waited == [1.5]
    monkeypatch.setattr(serve, "_exiting", lambda pid: False)
    running = Stub(-9)
    assert serve.exit_code(running) is None and running.waited == []


def test_exiting_reads_the_process_state():
    from k9bench.serving.serve import _exiting

    import subprocess

    assert _exiting(os.getpid()) is False
    assert _exiting(2 ** 22 + 12345) is False  # no such process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:  # until it is waited for, an exited child is a zombie
        deadline = time.monotonic() + 30
        while not _exiting(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _exiting(child.pid)
    finally:
        assert child.wait(timeout=30) == 0


def test_the_documented_cpu_command_is_the_one_the_vllm_tests_run():
    """docs/vllm.md's CPU serve command = serve_vllm's command line with tests/test_vllm.py's arguments."""
    import re
    import shlex

    from tests.test_vllm import SERVE_ARGS, SERVE_ENV

    page = (Path(__file__).resolve().parents[1] / "docs" / "vllm.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if "unshare -n" in b)
    unshare = shlex.split(block.replace("\\\n", " "))
    assert unshare[:4] == ["unshare", "-n", "sh", "-c"]  # the loopback-only namespace, as .ci/run runs pytest
    inner = re.sub(r"^ip link set lo up &&\s*", "", unshare[4])
    words = shlex.split(inner)
    env = dict(w.split("=", 1) for w in words[: words.index("vllm-venv/bin/python")])
    assert env == SERVE_ENV
    documented = words[words.index("vllm-venv/bin/python"):]
    expected = server_command("/tmp/tiny64", python="vllm-venv/bin/python", host="127.0.0.1", port=8000, args=SERVE_ARGS,
                              tensor_parallel=1)
    assert documented == expected


def test_command_line_entry_point_reports_a_failed_start(fake_python, tmp_path, monkeypatch, capsys):
    from k9bench.serving.serve import main

    monkeypatch.setenv("FAKE_VLLM_MODE", "die")
    assert main(["m", "--python", fake_python, "--port", "0", "--log_path", str(tmp_path / "s.log"), "--timeout", "30"]) == 1
    assert "exited with code 3" in capsys.readouterr().err
