"""The stage contract: the output check, locks across processes, the stop policy, done() by content."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from k9bench.stage import (
    EXIT_INTERRUPTED,
    Interrupted,
    LockHeld,
    OutputError,
    Stage,
    check_output,
    deferred,
    lock_path,
    output_lock,
    run_stage,
    stop_on_signals,
)

REPO = Path(__file__).resolve().parent.parent


class CopyStage(Stage):
    """A tiny stage: upper-cases its input into its output, records its block."""

    name = "copy"

    def __init__(self, src: Path, dst: Path, *, suffix: str = "", work=None):
        self.src, self.dst, self.suffix, self.work = src, dst, suffix, work
        self.runs = 0

    def outputs(self):
        return [self.dst]

    def inputs(self):
        return [self.src]

    def fingerprint(self):
        return {"suffix": self.suffix}

    def run(self):
        self.runs += 1
        if self.work:
            self.work()
        text = self.src.read_text().upper() + self.suffix
        self.dst.write_text(json.dumps({"text": text, "stage": self.stage_block()}))
        return 0


def test_done_follows_content_and_settings_not_mtime(tmp_path):
    src, dst = tmp_path / "in.txt", tmp_path / "out.json"
    src.write_text("abc")
    stage = CopyStage(src, dst)
    assert "missing" in stage.done()
    assert run_stage(stage) == 0
    assert stage.done() is None
    os.utime(src, (time.time() + 100, time.time() + 100))  # newer mtime, same content
    assert stage.done() is None
    assert "settings differ: suffix: '' in the existing file, '!' now" in CopyStage(src, dst, suffix="!").done()
    src.write_text("abd")
    assert CopyStage(src, dst).done() == f"input {src} changed"
    dst.write_text(json.dumps({"text": "made elsewhere"}))
    assert "records no stage settings" in CopyStage(src, dst).done()


def test_check_output_refusals(tmp_path):
    src = tmp_path / "in.json"
    src.write_text("{}")
    (tmp_path / "afile").write_text("x")
    cases = {
        tmp_path: "is a folder",
        tmp_path / "afile" / "out.json": "is a file, not a folder",
        src: "is the input file",
    }
    for path, words in cases.items():
        with pytest.raises(OutputError, match=words):
            check_output(path, flag="--output_file", inputs=[src])
    with pytest.raises(OutputError, match="--report_dir .*afile is a file"):
        check_output(tmp_path / "afile" / "dir", flag="--report_dir", folder=True)
    assert check_output(tmp_path / "new" / "deep" / "out.json", flag="--output_file") == tmp_path / "new" / "deep" / "out.json"
    assert not (tmp_path / "new").exists()
    if os.path.exists("/dev/null"):
        with pytest.raises(OutputError, match="not a regular file"):
            check_output("/dev/null", flag="--output_file")


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from k9bench.stage import output_lock
    with output_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(60)
    """
)


def _start_holder(target: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(target)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_process_refused_at_once_and_dead_holder_taken_over(tmp_path):
    target = tmp_path / "raw.json"
    proc = _start_holder(target)
    try:
        start = time.monotonic()
        with pytest.raises(LockHeld) as refused:
            with output_lock(target, flag="--output_file"):
                pass
        assert time.monotonic() - start < 3.0  # at once: a waiting lock would block until the holder ends
        assert f"pid {proc.pid} on host" in str(refused.value)
        assert refused.value.exit_code == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert lock_path(target).exists()  # left behind by the SIGKILLed holder
    with output_lock(target):
        assert json.loads(lock_path(target).read_text())["pid"] == os.getpid()
    assert not lock_path(target).exists()


def test_run_stage_refuses_a_held_output(tmp_path, caplog):
    src, dst = tmp_path / "in.txt", tmp_path / "out.json"
    src.write_text("abc")
    proc = _start_holder(dst)
    try:
        stage = CopyStage(src, dst)
        assert run_stage(stage) == 2
        assert stage.runs == 0 and not dst.exists()
        assert "is being written by pid" in caplog.text
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1", "SIGINT"])
def test_stop_signal_exits_75_and_restores_handlers(tmp_path, signame):
    src, dst = tmp_path / "in.txt", tmp_path / "out.json"
    src.write_text("abc")
    before = signal.getsignal(getattr(signal, signame))

    def work():
        os.kill(os.getpid(), getattr(signal, signame))
        time.sleep(5)  # interrupted long before

    stage = CopyStage(src, dst, work=work)
    assert run_stage(stage) == EXIT_INTERRUPTED
    assert not dst.exists()
    assert signal.getsignal(getattr(signal, signame)) == before


def test_deferred_holds_the_signal_until_the_block_ends():
    finished = []
    with pytest.raises(Interrupted) as stopped:
        with stop_on_signals() as stop:
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                finished.append("write")
                os.kill(os.getpid(), signal.SIGTERM)  # a second signal is ignored
            finished.append("never")
    assert finished == ["write"]
    assert stopped.value.name == "SIGTERM" and stop.received == signal.SIGTERM


@pytest.mark.parametrize("then", ["nothing", "much-cyclic-garbage", "a-slow-finalizer"])
def test_a_signal_that_lands_in_a_finalizer_is_not_lost_and_prints_no_traceback(capfd, then):
    """A stop signal handled while the garbage collector runs a ``__del__`` raises where Python drops the
    exception ("Exception ignored" and a traceback on stderr): the stop is delivered again, to the stage's
    own code, quietly. Also when the collection goes on past the redelivery (a big process, seen in CI:
    the stop then comes as ``gc.collect()`` returns), and when the redelivery lands in a second finalizer
    (it is delivered again)."""
    import gc
    import sys

    seen_by_the_hook_before = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = seen_by_the_hook_before.append
    slow_finalizer_ran = []

    class SignalsWhileFinalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the finalizer
            for _ in range(1000):
                pass

    class SlowFinalizer:
        def __del__(self):
            begun = time.monotonic()
            try:
                while time.monotonic() - begun < 1.0:
                    pass
            finally:
                slow_finalizer_ran.append(time.monotonic() - begun)

    steps, collected_at = [], []
    gc.freeze()  # the test process's own objects (the whole suite's, in CI) are not part of this collection
    try:
        with pytest.raises(Interrupted) as stopped:
            with stop_on_signals() as stop:
                cycle = SignalsWhileFinalized()
                cycle.self = cycle  # only the garbage collector frees it
                if then == "much-cyclic-garbage":  # the collector takes a while to free these after the finalizer
                    cycle.more, item = [[] for _ in range(400_000)], None
                    for item in cycle.more:
                        item.append(item)
                    del item
                elif then == "a-slow-finalizer":  # finalized after the first (the collector keeps their order)
                    cycle.slow = SlowFinalizer()
                    cycle.slow.back = cycle
                del cycle
                started = time.monotonic()
                gc.collect()
                collected_at.append(time.monotonic())
                steps.append("after the collection")
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                steps.append("never")
        assert sys.unraisablehook == seen_by_the_hook_before.append  # put back
        # some other exception dropped by a finalizer still reaches the hook that was there before
        with stop_on_signals():
            class Fails:
                def __del__(self):
                    raise ValueError("mine")
            Fails()
    finally:
        stopped_at = time.monotonic()
        gc.unfreeze()
        sys.unraisablehook = previous_hook
    # stopped in the stage's code, not lost ("never"), and soon: within the collection (how long that takes
    # depends on the machine) or a moment after it, never near the 5 s the loop would wait
    assert steps in ([], ["after the collection"]), steps
    assert stopped_at - started < 4.0, stopped_at - started
    assert not collected_at or stopped_at - collected_at[0] < 0.5, stopped_at - collected_at[0]
    assert stopped.value.name == "SIGTERM" and stop.received == signal.SIGTERM
    assert not any(frame.name == "__del__" for frame in stopped.traceback)  # raised outside the finalizers
    if then == "a-slow-finalizer":  # the redelivery cut it short, was dropped there too, and came again
        assert len(slow_finalizer_ran) == 1 and slow_finalizer_ran[0] < 0.9
    assert [type(u.exc_value) for u in seen_by_the_hook_before] == [ValueError]
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err and err.count("received SIGTERM") <= 1


def test_partial_fingerprint_compares_only_the_keys_known_now_at_every_depth():
    from k9bench.settings import fingerprint_differences

    prior = {"a": {"b": {"c": 1, "old_only": 2}}, "gone": 3}
    assert fingerprint_differences(prior, {"a": {"b": {"c": 1}}}, partial=True) == []
    assert fingerprint_differences(prior, {"a": {"b": {"c": 2}}, "new": 1}, partial=True) == [
        "a.b.c: 1 in the existing file, 2 now"]
    assert fingerprint_differences(prior, {"a": {"b": {"c": 1}}}) == [
        "a.b.old_only: 2 in the existing file, None now", "gone: 3 in the existing file, None now"]
    assert fingerprint_differences({"t": (1, 2)}, {"t": [1, 2]}) == []  # as JSON gives it back


def test_done_reads_the_typed_header_and_refuses_a_newer_one(tmp_path, capsys):
    """recorded() reads the stage block through the one header reader: an output written by a newer
    k9bench (a schema_version above what this code reads) is refused in one line, exit 2, untouched."""
    from k9bench.headers.files import NewerSchema

    src, dst = tmp_path / "in.txt", tmp_path / "out.json"
    src.write_text("abc")
    assert run_stage(CopyStage(src, dst)) == 0
    data = json.loads(dst.read_text())
    data["header"] = {"kind": "raw", "schema_version": 99, "stage": "copy"}
    dst.write_text(json.dumps(data))
    before = dst.read_text()
    with pytest.raises(NewerSchema) as err:
        CopyStage(src, dst).done()
    assert str(dst) in str(err.value) and "99" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2
    assert dst.read_text() == before
