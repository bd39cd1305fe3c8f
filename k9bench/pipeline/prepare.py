"""The demo's preparation (DEMO=1): the tiny random-weight model and, with AUDIO=1, the demo videos with
soundtracks. Not stages (they make the demo's inputs, not results); each says what it did."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Callable, Iterator

from k9bench.pipeline.env import LaunchSettings
from k9bench.pipeline.slurm import StepFailed


@contextlib.contextmanager
def _array_lock(settings: LaunchSettings, in_array: bool) -> Iterator[None]:
    if not in_array:
        yield
        return
    from k9bench.pipeline.slurm import waiting_lock

    # array tasks share OUT_DIR: one builds the model, the others then find it
    with waiting_lock(Path(settings["OUT_DIR"]) / ".run_eval.demo-model.lock"):
        yield


def prepare_demo(settings: LaunchSettings, *, in_array: bool, say: Callable[[str], None]) -> None:
    """Build the tiny model at its own place (never into a folder the user named), then the soundtracks."""
    if not settings.demo:
        return
    from k9bench.pipeline.scripts import run_main

    model = Path(settings["MODEL_NAME"])
    with _array_lock(settings, in_array):
        if (model / "config.json").is_file():
            say(f"step demo-model: {model} exists, skipping")
        elif not settings.demo_build_model:
            say(f"step demo-model: MODEL_NAME={model} was set, so the tiny demo model is not built there (unset MODEL_NAME to build it)")
        else:
            # built beside its place and renamed when complete: an interrupted build leaves no half model behind
            partial = model.with_name(model.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            say(f"step demo-model: python -m k9bench.tiny_model {partial} --family {settings.demo_family}")
            code = run_main("tiny_model", [str(partial), "--family", settings.demo_family])
            if code != 0:
                raise StepFailed(code, f"step demo-model failed (exit {code})")
            shutil.rmtree(model, ignore_errors=True)  # a half-built folder left by an older launcher (no config.json)
            partial.rename(model)
            say("step demo-model: done")
        if settings.audio and settings["DATASET_NAME"] == "demo":
            # the demo videos with soundtracks (two of three), before the download step, which then finds them
            say(f"step demo-videos: python -m k9bench.demo --video_dir {settings['VIDEO_DIR']} --soundtrack")
            code = run_main("demo", ["--video_dir", settings["VIDEO_DIR"], "--soundtrack"])
            if code != 0:
                raise StepFailed(code, f"step demo-videos failed (exit {code})")
