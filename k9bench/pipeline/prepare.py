"""The demo's preparation (DEMO=1): the tiny random-weight model and, with AUDIO=1, the demo videos with
soundtracks. Not stages (they make the demo's inputs, not results); each says what it did."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from k9bench.pipeline.env import LaunchSettings
from k9bench.pipeline.slurm import StepFailed


def prepare_demo(settings: LaunchSettings, *, say: Callable[[str], None], enter: Callable[[str], None] = lambda name: None) -> None:
    """Build the tiny model at its own place (never into a folder the user named), then the soundtracks.

    Two launches that need the same tiny model (array tasks, two demos on one OUT_DIR) share it: the
    build holds a lock beside the model; the other waits ("waiting for ... built by pid N on host H") and
    then finds it built. ``enter`` is told each step's name (a signal then names it)."""
    if not settings.demo:
        return
    from k9bench.pipeline.report_lines import step_output
    from k9bench.pipeline.scripts import run_main
    from k9bench.stage import build_lock

    model = Path(settings["MODEL_NAME"])
    enter("demo-model")
    if (model / "config.json").is_file():
        say(f"step demo-model: {model} exists, skipping")
    elif not settings.demo_build_model:
        say(f"step demo-model: MODEL_NAME={model} was set, so the tiny demo model is not built there (unset MODEL_NAME to build it)")
    else:
        with build_lock(model.parent / ".run_eval.demo-model.lock", what=f"the tiny demo model {model}", say=say):
            if (model / "config.json").is_file():  # built by the launch we waited for
                say(f"step demo-model: {model} was built by another launch meanwhile, using it")
            else:
                # built beside its place and renamed when complete: an interrupted build leaves no half model behind
                partial = model.with_name(model.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                say(f"step demo-model: python -m k9bench.tiny_model {partial} --family {settings.demo_family}")
                with step_output("demo-model"):
                    code = run_main("tiny_model", [str(partial), "--family", settings.demo_family])
                if code != 0:
                    raise StepFailed(code, f"step demo-model failed (exit {code})")
                shutil.rmtree(model, ignore_errors=True)  # a half-built folder left by an older launcher (no config.json)
                partial.rename(model)
                say("step demo-model: done")
    if settings.audio and settings["DATASET_NAME"] == "demo":
        enter("demo-videos")
        video_dir = Path(settings["VIDEO_DIR"])
        # the demo videos with soundtracks (two of three), before the download step, which then finds them
        with build_lock(video_dir / ".run_eval.demo-videos.lock", what=f"the demo videos in {video_dir}", say=say):
            say(f"step demo-videos: python -m k9bench.data.demo --video_dir {video_dir} --soundtrack")
            with step_output("demo-videos"):
                code = run_main("demo", ["--video_dir", str(video_dir), "--soundtrack"])
        if code != 0:
            raise StepFailed(code, f"step demo-videos failed (exit {code})")
