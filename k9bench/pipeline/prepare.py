"""The demo's preparation (DEMO=1): the tiny random-weight model and, with AUDIO=1, the demo videos with
soundtracks. Not plan stages (they make the demo's inputs, not results), but each runs as a Stage object
like every stage (:class:`DemoModelStage`, :class:`DemoVideosStage`), named by its registry entry
(:attr:`k9bench.pipeline.registry.StageEntry.prepare`); each says what it did."""

from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from k9bench.pipeline.stages import Step
from k9bench.stage import Stage


class _DemoFolderStage(Stage):
    """A demo input made into one folder (the step's first output), the same for both demo stages."""

    def __init__(self, step: Step):
        self.name = step.name
        self.folder = Path(step.outputs[0])

    def outputs(self) -> list[Path]:
        return [self.folder]

    def folder_outputs(self) -> set[Path]:
        return {self.folder}


class DemoModelStage(_DemoFolderStage):
    """The tiny random-weight model (:func:`k9bench.tiny_model.build_tiny`) written into one folder."""

    def __init__(self, step: Step):
        super().__init__(step)
        self.family = str(step.values["--family"])

    def output_flags(self) -> list[str]:
        return ["MODEL_NAME (the tiny demo model is built beside it)"]

    def fingerprint(self) -> dict:
        return {"family": self.family}

    def done(self) -> str | None:
        return None if (self.folder / "config.json").is_file() else f"{self.folder / 'config.json'} is missing"

    def run(self) -> int:
        from k9bench.tiny_model import build_tiny

        print(build_tiny(self.family, self.folder))
        return 0


class DemoVideosStage(_DemoFolderStage):
    """The demo videos (:func:`k9bench.data.demo.make_demo_videos`) in one folder, those missing only."""

    def __init__(self, step: Step):
        super().__init__(step)
        self.soundtrack = bool(step.values["--soundtrack"])

    def output_flags(self) -> list[str]:
        return ["VIDEO_DIR"]

    def fingerprint(self) -> dict:
        return {"soundtrack": self.soundtrack}

    def run(self) -> int:
        from k9bench.data.demo import make_demo_videos

        for path in make_demo_videos(self.folder, soundtrack=self.soundtrack):
            print(path)
        return 0


@dataclass(frozen=True)
class Preparing:
    """What an entry's ``prepare`` is given besides its entry and the settings."""

    say: Callable[[str], None]
    enter: Callable[[str], None]
    """Told each step's name (a signal then names it)."""
    run: Callable[[Step], None]
    """Runs a step's Stage, as the launcher runs every stage; a failure is the launcher's ``StepFailed``
    (exit code and one line), a stop signal stops the run."""
    dry_run: bool = False
    """``--dry_run``: say what would be made, make nothing."""


def _by_hand(e, step: Step) -> str:
    return f"python -m {e.module} {shlex.join(step.argv)}"


def prepare_model(e, settings: "LaunchSettings", p: Preparing) -> None:
    """Build the tiny model at its own place (never into a folder the user named).

    Two launches that need the same tiny model (array tasks, two demos on one OUT_DIR) share it: the
    build holds a lock beside the model; the other waits ("waiting for ... built by pid N on host H") and
    then finds it built."""
    from k9bench.stage import build_lock

    say = p.say
    model = Path(settings["MODEL_NAME"])
    if p.dry_run:  # a line of the plan (k9bench.pipeline.plan.describe_plan's layout)
        why = ("skip  MODEL_NAME was set" if not settings.demo_build_model else f"skip  {model} exists"
               if (model / "config.json").is_file() else f"run   {model / 'config.json'} is missing (the tiny random-weight model)")
        say(f"{e.name:<18} {why} -> {model}")
        return
    p.enter(e.name)
    if (model / "config.json").is_file():
        say(f"step {e.name}: {model} exists, skipping")
        return
    if not settings.demo_build_model:
        say(f"step {e.name}: MODEL_NAME={model} was set, so the tiny demo model is not built there (unset MODEL_NAME to build it)")
        return
    with build_lock(model.parent / f".run_eval.{e.name}.lock", what=f"the tiny demo model {model}", say=say):
        if (model / "config.json").is_file():  # built by the launch we waited for
            say(f"step {e.name}: {model} was built by another launch meanwhile, using it")
            return
        # built beside its place and renamed when complete: an interrupted build leaves no half model behind
        partial = model.with_name(model.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        step = Step(name=e.name, script=e.script, positional=(str(partial),), values={"--family": settings.demo_family},
                    outputs=[partial])
        say(f"step {e.name}: {_by_hand(e, step)}")
        p.run(step)
        shutil.rmtree(model, ignore_errors=True)  # a half-built folder left by an older launcher (no config.json)
        partial.rename(model)
        say(f"step {e.name}: done, {partial.name} renamed to {model}")


def prepare_videos(e, settings: "LaunchSettings", p: Preparing) -> None:
    """With AUDIO=1 on the demo set: the demo videos with soundtracks (two of three), before the download
    step, which then finds them; launches sharing VIDEO_DIR make them one at a time."""
    from k9bench.stage import build_lock

    if not (settings.audio and settings["DATASET_NAME"] == "demo"):
        return
    video_dir = Path(settings["VIDEO_DIR"])
    if p.dry_run:
        p.say(f"{e.name:<18} run   the demo videos with soundtracks, those missing -> {video_dir}")
        return
    p.enter(e.name)
    step = Step(name=e.name, script=e.script, values={"--video_dir": video_dir, "--soundtrack": True}, outputs=[video_dir])
    with build_lock(video_dir / f".run_eval.{e.name}.lock", what=f"the demo videos in {video_dir}", say=p.say):
        p.say(f"step {e.name}: {_by_hand(e, step)}")
        p.run(step)
