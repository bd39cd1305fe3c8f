"""The bundled synthetic demo set.

Twelve questions written for this project (never K9-Bench content) over three
short videos that ffmpeg generates on demand, so nothing large is committed. Every source is
deterministic or seeded (``life`` with a fixed seed, the noise soundtrack too), so two
generations give byte-identical files with the same ffmpeg.
The questions describe the generated test patterns, one category label each, so
that every category appears; a model is not expected to answer them well.

With ``soundtrack`` (``--soundtrack``; the launcher's ``DEMO=1 AUDIO=1``) two of the videos get a
soundtrack (a sine tone, pink noise) and the third stays silent, so an audio+video run meets both
cases (the silent one becomes a failed ``no_audio_stream`` record). Without it the videos are
exactly the silent ones they always were.

The download (``download_videos.py --dataset_name demo`` and ``eval_video_llm.py --dataset_name demo
--auto_download``) makes these videos locally through :func:`demo_generators`: a missing or corrupt
demo video is made again, never looked for on YouTube.

Usage::

    python -m k9bench.data.demo --video_dir k9bench_videos               # writes the three demo videos
    python -m k9bench.data.demo --video_dir k9bench_videos_av --soundtrack
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

log = logging.getLogger(__name__)

DEMO_VIDEOS = {
    # scene name -> generation settings for k9bench.video.ffmpeg.make_video
    "demoVid0001": {"pattern": "testsrc2", "duration": 6.0, "fps": 24, "width": 320, "height": 240},
    "demoVid0002": {"pattern": "mandelbrot", "duration": 5.0, "fps": 25, "width": 320, "height": 240},
    "demoVid0003": {"pattern": "life", "duration": 8.0, "fps": 30, "width": 240, "height": 320},
}

DEMO_SOUNDTRACKS = {"demoVid0001": "sine", "demoVid0002": "noise"}
"""Scene name -> the soundtrack ``make_video`` gives it with ``soundtrack=True``; scenes not named stay silent."""


DEMO_NAME = "demo"
"""The bundled demo set's name (``--dataset_name demo``, ``DATASET_NAME=demo``)."""


def demo_rows() -> list[dict]:
    """The demo rows, in the Hub schema."""
    text = resources.files("k9bench.data").joinpath("demo.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def is_demo_dataset(dataset_name: str) -> bool:
    """True for the bundled demo set's name (``--dataset_name demo``)."""
    return dataset_name == DEMO_NAME


def make_demo_video(scene: str, path: str | Path, *, soundtrack: bool = False) -> Path:
    """Generate demo video ``scene`` at ``path`` (with its soundtrack of :data:`DEMO_SOUNDTRACKS` if asked)."""
    from k9bench.video.ffmpeg import make_video

    sound = DEMO_SOUNDTRACKS.get(scene) if soundtrack else None
    log.info("generating demo video %s%s", path, f" (soundtrack: {sound})" if sound else "")
    return make_video(path, **DEMO_VIDEOS[scene], **({"audio": sound} if sound else {}))


def demo_generators(scenes: Iterable[str] | None = None, *, soundtrack: bool = False) -> dict[str, Callable[[Path], Path]]:
    """Scene -> a function that makes that demo video at the path it is given, for the demo scenes
    among ``scenes`` (all of them by default): the download's ``generators``."""
    wanted = DEMO_VIDEOS if scenes is None else [s for s in scenes if s in DEMO_VIDEOS]
    return {scene: (lambda path, scene=scene: make_demo_video(scene, path, soundtrack=soundtrack)) for scene in wanted}


def make_demo_videos(video_dir: str | Path, *, overwrite: bool = False, soundtrack: bool = False) -> list[Path]:
    """Generate the demo videos as ``{scene}.mp4`` in ``video_dir``; existing files are kept.

    ``soundtrack``: the scenes of :data:`DEMO_SOUNDTRACKS` get theirs (keep such videos in a folder
    of their own: an existing file is kept as it is, with or without sound)."""
    video_dir = Path(video_dir)
    video_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for scene in DEMO_VIDEOS:
        path = video_dir / f"{scene}.mp4"
        if overwrite or not path.exists():
            make_demo_video(scene, path, soundtrack=soundtrack)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(description="Generate the demo videos.")
    parser.add_argument("--video_dir", default="k9bench_videos", help="folder for {scene}.mp4 files")
    parser.add_argument("--overwrite", action="store_true", help="regenerate existing files")
    parser.add_argument("--soundtrack", action="store_true",
                        help=f"give {' and '.join(DEMO_SOUNDTRACKS)} a soundtrack (the other video stays silent), for audio+video runs")
    args = parser.parse_args(argv)
    from k9bench.logs import basic_logging
    basic_logging(logging.INFO)
    from k9bench.stage import StageError, check_output

    try:
        check_output(Path(args.video_dir), flag="--video_dir", folder=True)
    except StageError as exc:
        log.error("%s", exc)
        return 2
    for path in make_demo_videos(args.video_dir, overwrite=args.overwrite, soundtrack=args.soundtrack):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
