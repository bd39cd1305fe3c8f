"""The launcher's run: check everything, take the run's lock, then run each stage that must run.

Exit codes: 0 done (or requeued by SLURM); 1 a stage failed with 1 (the judge left entries skipped: the
report is still written); 2 a bad setting, a bad ``*_ARGS``, or another launcher holds this run's lock;
any other stage exit code as the stage gave it; 128+N stopped by signal N with the progress saved
(130 Ctrl-C, 138 SIGUSR1 outside SLURM, 143 SIGTERM): rerun the same command to resume.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from k9bench.pipeline import registry
from k9bench.pipeline.env import LaunchError, LaunchSettings
from k9bench.pipeline.slurm import StepFailed
from k9bench.pipeline.stages import SERVED_URL, ShardMode, Step

log = logging.getLogger("k9bench.pipeline")

USAGE = """usage: run_eval.sh [--dry_run]   (python -m k9bench.pipeline [--dry_run])

Settings are environment variables (docs/launcher.md lists them all), for example
  MAX_SAMPLES=-1 sbatch run_eval.sh
  MODEL_NAME=Qwen/Qwen3-VL-8B-Instruct MAX_FRAMES=64 bash run_eval.sh
  DEMO=1 bash run_eval.sh                  the offline CPU demo (tiny random-weight model)
  --dry_run                                print the plan (each stage, and why it will or will not run); run nothing
"""


def say(message: str) -> None:
    """One launcher line on stdout, secrets masked: ``[run_eval 12:00:00] message``."""
    from k9bench.redact import redact_text

    print(f"[run_eval {time.strftime('%H:%M:%S')}] {redact_text(message)}", flush=True)


def die(code: int, message: str) -> int:
    say(f"ERROR: {message}")
    return code


def repo_dir(env: dict) -> Path:
    """K9BENCH_DIR (run_eval.sh sets it), else the folder above this package."""
    return Path(env.get("K9BENCH_DIR") or Path(__file__).resolve().parents[2])


def main(argv: list[str] | None = None) -> int:
    from k9bench.pipeline.flags import build_parser

    args, stray = build_parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.help:
        from k9bench.pipeline.env import defaults_table

        try:
            print(USAGE)
            print(defaults_table(), flush=True)
        except BrokenPipeError:  # `run_eval.sh --help | head -3`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail again
        return 0
    dry_run = args.dry_run
    if stray:
        return die(2, f"run_eval.sh takes no arguments but --dry_run (got '{' '.join(stray)}'); settings are environment "
                      "variables, e.g. MAX_SAMPLES=-1 bash run_eval.sh (see --help)")
    env = dict(os.environ)
    from k9bench.pipeline.env import lookalikes

    for warning in lookalikes(env):  # before anything runs: a misspelled variable would otherwise run the defaults
        say(f"WARNING: {warning}")
    repo = repo_dir(env)
    if not (repo / "eval_video_llm.py").is_file():
        return die(2, f"cannot find the k9bench scripts in '{repo}'; submit from the repository root or set K9BENCH_DIR")
    from k9bench.logs import setup_logging

    setup_logging(0)  # the redacting filter comes with it
    previous = os.environ.get("K9BENCH_INTERFACE")
    os.environ["K9BENCH_INTERFACE"] = "launcher"  # the stages' messages name these variables, not their flags
    try:
        try:
            launch = prepare(env, repo)
        except LaunchError as exc:
            return die(2, str(exc))
        # argv None: this process's own command line (python -m k9bench.pipeline), whose end the run's exit code must reach
        return Launch(*launch, env=env, repo=repo, process=argv is None).start(dry_run=dry_run)
    finally:  # called in process (tests, a notebook): leave the environment as it was
        if previous is None:
            os.environ.pop("K9BENCH_INTERFACE", None)
        else:
            os.environ["K9BENCH_INTERFACE"] = previous


def prepare(env: dict, repo: Path) -> tuple:
    """Settings, shard mode, layout and steps, every value checked (LaunchError on the first bad one)."""
    from k9bench.layout import RunLayout
    from k9bench.pipeline.env import read_settings
    from k9bench.pipeline.plan import build_steps, check_steps
    from k9bench.pipeline.slurm import check_gpus, shard_mode

    settings = read_settings(env, repo)
    mode = shard_mode(env, settings["K9_FINALIZE"] == "1")
    check_gpus(env, settings["GPUS"], settings["GPUS_PER_NODE"])
    v = settings.values
    layout = RunLayout(out_dir=v["OUT_DIR"], model=v["MODEL_NAME"], max_frames=int(v["MAX_FRAMES"]), max_samples=int(v["MAX_SAMPLES"]),
                       audio=settings.audio)
    steps = build_steps(settings, layout, mode)
    check_steps(steps, settings)
    return settings, mode, layout, steps


class Launch:
    """One launcher run (see the module doc)."""

    def __init__(self, settings: LaunchSettings, mode: ShardMode, layout, steps: list[Step], *, env: dict, repo: Path,
                 process: bool = False):
        self.s, self.mode, self.layout, self.steps, self.env, self.repo = settings, mode, layout, steps, env, repo
        self.process = process
        """True when this run is the process (``python -m k9bench.pipeline``): the late-signal handler then stays
        until the process ends (:class:`_AfterTheLastStep`)."""
        self.steps_done = False
        """Set once the last step has finished: a stop signal after it stops nothing."""
        self.current: str | None = None
        self.ran: set[str] = set()
        self.incomplete: list[Step] = []
        """Steps that ended incomplete in a way that ends the run with exit 1 (judge entries skipped)."""
        self._signals = _SignalLog()

    # ----------------------------------------------------------------- the whole run

    def lock_target(self) -> Path:
        tag = self.layout.tag
        if self.mode.shard_id is not None and not self.mode.finalize and self.mode.num_shards > 1:
            tag += f".shard{self.mode.shard_id}of{self.mode.num_shards}"
        return Path(self.s["OUT_DIR"]) / f".run_{tag}"

    def start(self, *, dry_run: bool) -> int:
        from k9bench.stage import LockHeld, output_lock

        if dry_run:
            return self.dry_run()
        try:  # every stage checked before the first one starts, and before the lock: a refusal writes nothing
            self.preflight()
        except StepFailed as exc:
            return die(exc.exit_code, str(exc))
        try:
            with output_lock(self.lock_target(), what=f"the run {self.layout.tag} in OUT_DIR={self.s['OUT_DIR']}"):
                return self.locked()
        except LockHeld as exc:
            return die(2, f"another launcher is running this run: {exc}")

    def locked(self) -> int:
        from k9bench.stage import Interrupted, stop_on_signals

        if self.s.demo:
            what, meaning, _ = self.demo_note()
            say(f"DEMO: {what}.")
            say(f"DEMO: {meaning}.")
        self.print_config()
        self.say_text_only()
        if self.env.get("SLURM_RESTART_COUNT", "0") not in ("", "0"):
            say(f"requeued run (restart {self.env['SLURM_RESTART_COUNT']}): resuming every stage")
        with _AfterTheLastStep(keep=self.process) as late:  # under the stop policy below, its handler comes back after it
            code = None
            try:
                with self._signals, stop_on_signals() as stop:
                    self.stop = stop
                    try:
                        code = self.run_steps()
                    except StepFailed as exc:
                        return die(exc.exit_code, str(exc))
            except Interrupted as exc:
                if not self.steps_done:
                    return self.interrupted(exc.signum)
                late.said(exc.signum)
            return code if code is not None else self.finish()

    def run_steps(self) -> int | None:
        """Every step that must run; the launcher's exit code when one ends the run, None when all are done."""
        from k9bench.pipeline import slurm
        from k9bench.pipeline.plan import prepare_demo

        slurm.link_array_log(self.env, say)
        prepare_demo(self.s, say=say, enter=lambda name: setattr(self, "current", name), run=self.run_prepared)
        if self.mode.in_array and self.mode.shard_id == 0:
            script = self.env.get("K9BENCH_SCRIPT") or str(self.repo / "run_eval.sh")
            slurm.submit_finalize(self.env, out_dir=Path(self.s["OUT_DIR"]), num_shards=self.mode.num_shards, repo=self.repo,
                                  script=script, log=say)
        for step in self.steps:
            code = self.run_step(step)
            if code is not None:
                return code
        self.steps_done = True
        return None

    def finish(self) -> int:
        """The run's last lines and its exit code, after the last step (a stop signal here is only said)."""
        if self.mode.num_shards > 1 and self.mode.shard_id is not None and not self.mode.finalize:
            shard = self.steps[-1].outputs[0]
            say(f"shard {self.mode.shard_id} of {self.mode.num_shards} done: {shard}")
            if self.mode.in_array:
                say("the merge job scores the run once every shard is done")
            else:
                say(f"after every shard: K9_FINALIZE=1 NUM_SHARDS={self.mode.num_shards} bash run_eval.sh (same settings) merges and scores")
            return 0
        if self.incomplete:
            step = self.incomplete[0]
            e = registry.entry(step.name)
            return die(1, f"step {step.name} incomplete: {e.incomplete_ends_run.format(output=step.outputs[e.note_output])}")
        say(f"all steps done: {self.layout.path('eval')}")
        for step in self.steps:
            note = registry.entry(step.name).final_note
            if note:
                say(note.format(folder=Path(step.outputs[0]).parent))
        if self.s.demo and self.demo_note()[2]:
            if any(registry.entry(name).prints_accuracy for name in self.ran):
                say("DEMO finished. Reminder: random weights, so the accuracy above is MEANINGLESS (chance is 20%).")
            else:  # nothing was scored in this run, so no accuracy was printed above
                say(f"DEMO finished (nothing changed, nothing rerun). Reminder: random weights, so the accuracy in "
                    f"{self.layout.path('eval')} is MEANINGLESS (chance is 20%).")
        return 0

    def say_text_only(self) -> None:
        if self.s["MAX_FRAMES"] == "0":
            say("MAX_FRAMES=0: a text-only run (the model sees no frames): no videos are needed, so the download stage "
                "is skipped and VIDEO_DIR is not read")

    def demo_note(self) -> tuple[str, str, bool]:
        from k9bench.pipeline.stages import demo_note

        return demo_note(self.s)

    # ----------------------------------------------------------------- one stage

    def reason(self, step: Step, stage) -> str | None:
        from k9bench.pipeline.stages import incomplete_marker

        from k9bench.layout import checkpoint_path

        upstream = next((d for d in step.depends if d in self.ran), None)
        own = stage.done()
        partial = next((checkpoint_path(o) for o in step.outputs if not Path(o).exists() and checkpoint_path(o).is_file()), None)
        if own is not None and partial is not None:  # not "raw... is missing": the stage goes on from its checkpoint
            own = f"resumes from {partial} (the finished part of an earlier run; its final file is written at the end)"
        if own is None and incomplete_marker(step).is_file():
            own = f"its last run ended with exit {incomplete_marker(step).read_text().strip()}: some entries to retry"
        return own or (f"an earlier stage ran ({upstream})" if upstream else None)

    def run_step(self, step: Step) -> int | None:
        """Run ``step`` if it must run; None to go on, else the launcher's exit code."""
        self.current = step.name
        refresh = registry.entry(step.name).refresh
        if refresh is not None:
            line = refresh(step, self.s, self.layout)
            if line:
                say(f"step {step.name}: {line}")
        with self.download_lock(step):
            stage = self.stage_of(step)
            why = self.reason(step, stage)
            if why is None:
                say(f"step {step.name}: done already, skipping ({', '.join(map(str, step.outputs))}: same settings and inputs)")
                return None
            say(f"step {step.name}: runs: {why}")
            from k9bench.pipeline.scripts import script_module
            from k9bench.redact import redact_argv

            builder = getattr(script_module(step.script), "build_parser", None)  # a stage without a parser: masked by name
            shown = redact_argv(step.argv, builder() if builder else None)  # masked by the flag each argument resolves to
            say(f"step {step.name}: {step.script} {shlex.join(shown)}")
            code = self.execute(step, stage)
        gc.collect()
        return self.after(step, code)

    def stage_of(self, step: Step):
        """The step's Stage object (its registry entry builds it); a refusal by its settings is the step's
        failure (one line, its exit code)."""
        from k9bench.stage import StageError

        try:
            return registry.make_stage(step)
        except StageError as exc:
            raise StepFailed(exc.exit_code, f"step {step.name} failed (exit {exc.exit_code}): {exc}") from None
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
            raise StepFailed(code, f"step {step.name} failed (exit {code})") from None

    def run_prepared(self, step: Step) -> None:
        """A preparation step (the demo's model and videos: :mod:`k9bench.pipeline.prepare`), run as every
        stage is; a stop signal stops the run, naming the step; another non-zero exit fails it."""
        from k9bench.stage import EXIT_INTERRUPTED, Interrupted

        code = self.execute(step, self.stage_of(step))
        if code in (EXIT_INTERRUPTED, 130) or self.stop.requested:
            raise Interrupted(self.stop.received or self._signals.last() or signal.SIGTERM)
        if code != 0:
            raise StepFailed(code, f"step {step.name} failed (exit {code})")

    @contextlib.contextmanager
    def download_lock(self, step: Step) -> Iterator[None]:
        """Launches sharing VIDEO_DIR (array tasks, two runs) download one at a time; the later one then finds
        the videos verified and fetches only what is still missing."""
        lock = registry.entry(step.name).shared_lock
        if not lock:
            yield
            return
        from k9bench.stage import build_lock

        folder = Path(step.outputs[0]).parent
        with build_lock(folder / lock, what=f"the video cache {folder}", say=say):
            yield

    def execute(self, step: Step, stage) -> int:
        """``stage`` through :func:`k9bench.stage.run_stage`, its lines prefixed with the step's name. A step
        served by a server the launcher starts (SERVE=vllm) gets its Stage built again with the server's URL."""
        from k9bench.pipeline.report_lines import step_output
        from k9bench.stage import StageError, run_stage

        self._signals.reset()
        try:
            with self.server(step) as url:
                if url is not None:
                    stage = self.stage_of(step.with_url(SERVED_URL, url))
                with step_output(step.name):
                    return run_stage(stage)
        except StageError as exc:  # the vLLM server did not come up
            raise StepFailed(exc.exit_code, f"step {step.name}: {exc}") from None

    def after(self, step: Step, code: int) -> int | None:
        from k9bench.stage import EXIT_INTERRUPTED

        self.ran.add(step.name)
        complete, incomplete = code in step.complete_codes, code in step.incomplete_codes
        if complete or incomplete:
            from k9bench.pipeline.stages import mark_incomplete

            mark_incomplete(step, code if incomplete else None)
        if complete:
            say(f"step {step.name}: done")
            return None
        if code in (EXIT_INTERRUPTED, 130) or self.stop.requested:
            got = self.stop.received or self._signals.last() or signal.SIGTERM
            return self.interrupted(got)
        e = registry.entry(step.name)
        if incomplete and e.incomplete_note:
            say(f"step {step.name}: {e.incomplete_note.format(output=step.outputs[e.note_output])}")
            if e.incomplete_ends_run:
                self.incomplete.append(step)
            return None
        raise StepFailed(code, f"step {step.name} failed (exit {code}); fix it and rerun the same command: finished stages are skipped")

    def interrupted(self, signum: int) -> int:
        name = signal.Signals(signum).name
        if name == "SIGUSR1" and self.env.get("SLURM_JOB_ID"):
            job = self.env["SLURM_JOB_ID"]
            say(f"time limit near: step '{self.current}' saved its progress; requeueing job {job} to resume")
            from k9bench.pipeline.slurm import requeue

            why = requeue(self.env)
            if why:
                return die(128 + signum, f"scontrol requeue failed ({why}); resubmit the same command to resume")
            return 0
        where = f"during step '{self.current}'" if self.current else "before the first step started"
        return die(128 + signum, f"interrupted by {name} {where}; finished work is kept: rerun the same command to resume")

    # ----------------------------------------------------------------- servers

    @contextlib.contextmanager
    def server(self, step: Step) -> Iterator[str | None]:
        """SERVE=vllm: a vLLM server for a served step (inference), stopped however the stage ends; yields its
        URL (None: the step is not served)."""
        if not step.served:
            yield None
            return
        log_path = Path(self.s["OUT_DIR"]) / f"vllm_server_{self.layout.tag}.log"
        with start_server(self.s, say, log_path) as url:
            yield url

    def preflight(self) -> dict:
        """Every stage's checks (:mod:`k9bench.pipeline.preflight`), before any stage runs; the Stage objects."""
        from k9bench.pipeline import preflight
        from k9bench.pipeline.plan import check_settings

        try:
            check_settings(self.s, self.steps, self.env)
            stages = {step.name: self.stage_of(step) for step in self.steps}
            preflight.check_stages(stages)
        except preflight.PreflightError as exc:
            raise StepFailed(2, str(exc)) from None
        return stages

    # ----------------------------------------------------------------- reports

    def print_config(self) -> None:
        from k9bench.pipeline.report_lines import config_lines

        for line in config_lines(self):
            say(line)

    def dry_run(self) -> int:
        from k9bench.pipeline.plan import describe_plan, plan_reasons, prepare_demo

        self.print_config()
        self.say_text_only()
        try:
            stages = self.preflight()
        except StepFailed as exc:
            return die(exc.exit_code, str(exc))
        say("plan (--dry_run: nothing runs):")
        prepare_demo(self.s, say=lambda line: say(f"  {line}"), dry_run=True)
        for line in describe_plan(self.steps, stages, plan_reasons(self.steps, stages)):
            say(line)
        return 0


@contextlib.contextmanager
def start_server(settings: LaunchSettings, say, log_path: Path) -> Iterator[str]:
    """Start a vLLM server for MODEL_NAME (:func:`k9bench.serving.serve.serve_vllm`, prefix caching on; the vLLM
    environment's python from ``K9BENCH_VLLM_PYTHON``) and yield its URL; it is stopped however the block ends."""
    from k9bench.serving.serve import serve_vllm

    tp = settings.int("TENSOR_PARALLEL") or settings.int("GPUS") or 1
    say(f"serving {settings['MODEL_NAME']} with vLLM (tensor parallel {tp}) for the inference stage; its log: {log_path}")
    try:
        with serve_vllm(settings["MODEL_NAME"], args=list(settings.extra["SERVE_ARGS"]), tensor_parallel=tp, log_path=log_path) as url:
            say(f"vLLM answers at {url}")
            yield str(url)
    finally:
        say("vLLM server stopped")


class _AfterTheLastStep:
    """From the end of the last step to the end of the process, a stop signal (SIGTERM, SIGUSR1: SLURM's
    time-limit warning) stops nothing and must not change the exit code: it is said in one line and ignored
    (issue 40 item 4: the default action killed the launcher in its teardown, a finished job ``FAILED``).

    Installed before the stop policy (:func:`k9bench.stage.stop_on_signals`), which restores it when the steps
    end. ``keep``: left installed when the block ends (the launcher is the process: its teardown, the
    interpreter's included, is covered); else the previous handlers come back (a caller in process)."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self, *, keep: bool):
        self.keep = keep
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "_AfterTheLastStep":
        with contextlib.suppress(ValueError):  # not the main thread: signals never reach this run
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> bool:
        if not self.keep:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
        return False

    def _handle(self, signum: int, frame) -> None:
        with contextlib.suppress(Exception):  # a line cut short by a reentrant write must not raise either
            self.said(signum)

    @staticmethod
    def said(signum: int) -> None:
        say(f"received {signal.Signals(signum).name} after the last step had finished: nothing left to stop; "
            "the exit code is the run's")


class _SignalLog:
    """Which stop signals arrived, whatever Python handler took them (a stage may install its own):
    the interpreter writes each one to a wakeup socket that is read after the stage."""

    def __enter__(self):
        try:
            self._r, self._w = socket.socketpair()
            self._r.setblocking(False)
            self._w.setblocking(False)
            self._old = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main thread: no signals reach this run anyway
            self._r = self._w = None
        self._seen: list[int] = []
        return self

    def __exit__(self, *exc):
        if self._w is not None:
            signal.set_wakeup_fd(self._old)
            self._r.close()
            self._w.close()
        return False

    def drain(self) -> list[int]:
        if getattr(self, "_r", None) is None:
            return []
        with contextlib.suppress(BlockingIOError, OSError):
            while True:
                data = self._r.recv(64)
                if not data:
                    break
                self._seen += [b for b in data if b in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)]
        return self._seen

    def reset(self) -> None:
        self.drain()
        self._seen = []

    def last(self) -> int | None:
        seen = self.drain()
        return seen[0] if seen else None
