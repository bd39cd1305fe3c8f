"""Question subsets: compare runs whose video sets differ on the questions they all had; the paper's
short-video subset; only some questions run, judged and reported.

K9-Bench's videos live on YouTube and disappear over time, so two labs that downloaded at different
times evaluate different questions. A *subset file* names the questions whose videos a set of runs
all had, with a hash of its own so that a lab can cite it::

    python -m k9bench.data.subset --runs raw_lab_a.json raw_lab_b.json --output subset_ab.json
    evaluate_results.py --mode report --input_file eval_lab_a.json eval_lab_b.json --subset subset_ab.json

``--short_videos VIDEO_DIR`` writes the paper's short-video subset instead (Table 2's Qwen3-Omni-Flash
rows): the dataset's questions whose video in VIDEO_DIR is shorter than ``--max_seconds`` (150 s, the
paper's 2,693 questions on the full set; a folder holding fewer videos gives fewer, and says how many
videos it found)::

    python -m k9bench.data.subset --short_videos k9bench_videos --output short150.json
    eval_video_llm.py ... --subset short150.json       # only those questions run
    subjective_evals.py ... --subset short150.json     # only those paid for

A run *had* a question's video when its file holds a record of the question that did not fail with
``missing_video``. ``--runs`` takes raw, sim or eval files (all hold ``individual_results``).

``--subset FILE`` (inference, the judge, scoring and the report) accepts, through :func:`read_subset`:

- a subset file written here;
- a JSON list of idx, or a text file of idx separated by white space or commas;
- another run's raw, sim or eval file: the questions whose video that run had.

The subset file::

    {"kind": "k9bench-subset", "version": 1,
     "sha256": "<SHA-256 of the canonical JSON of 'subset'>",
     "subset": {"idx": [sorted idx], "count": N},
     "description": "...", "runs": [{"path", "sha256", "records", "with_video"}, ...],
     "videos_differing_by_content": [scenes whose file SHA-256 differs between the runs' raw files]}

Only ``subset`` is hashed (``json.dumps(subset, sort_keys=True, separators=(",", ":"))``), so the same
questions give the same hash whoever writes them; the file holds no timestamp, so two writes from the
same runs are byte-identical. Exit status: 0, 2 for a bad input or output (one line naming it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from k9bench.artifact_io import parse_json
from k9bench.artifacts import RecordsArtifact, load_records_artifact, records_artifact_from
from k9bench.artifact_io import ArtifactError, read_text, write_json_atomic

log = logging.getLogger(__name__)

KIND = "k9bench-subset"
"""The ``kind`` of a subset file."""

VERSION = 1
"""The subset file's format version."""

VIDEO_ABSENT = frozenset({"missing_video"})
"""Failure classes that mean the run did not have the question's video."""


class SubsetError(ArtifactError):
    """A subset input is unusable; the message names the file."""


@dataclass(frozen=True)
class Subset:
    """A set of questions with its provenance."""

    idx: frozenset
    """The question ids."""
    description: str
    """What the questions are (shown in reports)."""
    source: str | None = None
    """The file it was read from, if any."""

    @property
    def sha256(self) -> str:
        """SHA-256 of the canonical JSON of the sorted idx (the hashed part of a subset file)."""
        return subset_sha256(self.idx)

    def summary(self) -> dict:
        """``{"path", "description", "sha256", "count"}`` as recorded in artifacts."""
        return {"path": self.source, "description": self.description, "sha256": self.sha256, "count": len(self.idx)}


def _hashed_part(idx: Iterable[int]) -> dict:
    ordered = sorted(idx)
    return {"idx": ordered, "count": len(ordered)}


def subset_sha256(idx: Iterable[int]) -> str:
    """The hash a subset file carries for these questions."""
    text = json.dumps(_hashed_part(idx), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def questions_with_video(artifact: RecordsArtifact) -> frozenset:
    """idx of the records whose video the run had (not failed with ``missing_video``)."""
    return frozenset(r.idx for r in artifact.records if r.error_class not in VIDEO_ABSENT)


def _int_idx(values: Iterable[Any], where: str) -> frozenset:
    out = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SubsetError(f"{where}: {value!r} is not a question idx (an integer)")
        out.add(value)
    return frozenset(out)


def read_subset(path: str | Path) -> Subset:
    """A subset from a subset file, a list of idx, or a run's raw/sim/eval file (see the module doc)."""
    path = Path(path)
    try:  # the one reader: missing, a folder, not UTF-8 (never silently altered) or empty is one line
        text = read_text(path)
    except ArtifactError as exc:
        raise SubsetError(f"--subset {exc}") from None
    stripped = text.strip()
    if stripped and stripped[0] not in "[{":
        tokens = [t for t in re.split(r"[\s,]+", stripped) if t]
        bad = next((t for t in tokens if not re.fullmatch(r"-?\d+", t)), None)
        if bad is not None:
            raise SubsetError(f"--subset {path}: {bad!r} is not a question idx (give idx separated by spaces or commas, a JSON list, "
                              "a subset file or a run's file)")
        return Subset(frozenset(int(t) for t in tokens), f"{len(set(tokens))} idx listed in {path.name}", str(path))
    try:
        data = parse_json(text, path)
    except ArtifactError as exc:
        raise SubsetError(f"--subset {exc}") from None
    if isinstance(data, list):
        idx = _int_idx(data, f"--subset {path}")
        return Subset(idx, f"{len(idx)} idx listed in {path.name}", str(path))
    if isinstance(data, dict) and data.get("kind") == KIND:
        block = data.get("subset")
        if not isinstance(block, dict) or not isinstance(block.get("idx"), list):
            raise SubsetError(f"--subset {path}: a subset file needs 'subset': {{'idx': [...]}}")
        idx = _int_idx(block["idx"], f"--subset {path}: subset.idx")
        recorded = data.get("sha256")
        if recorded != subset_sha256(idx):
            raise SubsetError(f"--subset {path}: its sha256 {recorded!r} does not match its questions (the file was edited); write it again")
        return Subset(idx, str(data.get("description") or f"subset {recorded[:12]}"), str(path))
    try:
        artifact = records_artifact_from(data, path)
    except ArtifactError as exc:
        raise SubsetError(f"--subset {path}: neither a subset file, a list of idx nor a run's file ({exc})") from None
    idx = questions_with_video(artifact)
    return Subset(idx, f"the {len(idx):,} questions whose video {path.name} had", str(path))


def load_subset(path: str | Path) -> frozenset:
    """The question ids of ``--subset PATH`` (see :func:`read_subset`)."""
    return read_subset(path).idx


def restrict(items: Iterable[Any], subset: Subset | None) -> list:
    """``items`` (questions, judge tasks: anything with an ``idx``) of the subset, in their order; all without one."""
    return list(items) if subset is None else [item for item in items if item.idx in subset.idx]


def subset_digest(path: str | Path | None) -> str | None:
    """The SHA-256 a ``--subset`` file's questions carry (:func:`subset_sha256`), for a stage's fingerprint; None
    without a file, or for one that cannot be read (the stage refuses it, naming it, when it reads it)."""
    if not path:
        return None
    try:
        return read_subset(path).sha256
    except SubsetError:
        return None


def video_seconds(path: Path) -> float | None:
    """The duration of a video file in seconds (its container's), or None when it cannot be read."""
    try:
        import av  # heavy import, only when durations are read

        with av.open(str(path), mode="r") as container:
            if container.duration is None or not container.streams.video:
                return None
            return container.duration / 1_000_000
    except Exception:  # av raises its own FFmpegError family, plus OSError
        return None


def build_short_video_file(questions: list, video_dir: str | Path, max_seconds: float) -> dict:
    """The subset file of the questions whose video (``{scene}.mp4`` in ``video_dir``) lasts less than
    ``max_seconds``; what was found is recorded (videos present, unreadable, missing)."""
    video_dir = Path(video_dir)
    scenes = list(dict.fromkeys(q.scene_name for q in questions))
    seconds: dict[str, float] = {}
    unreadable: list[str] = []
    for scene in scenes:
        path = video_dir / f"{scene}.mp4"
        if path.is_file():
            value = video_seconds(path)
            if value is None:
                unreadable.append(scene)
            else:
                seconds[scene] = value
    idx = frozenset(q.idx for q in questions if seconds.get(q.scene_name, max_seconds) < max_seconds)
    short_videos = sum(1 for v in seconds.values() if v < max_seconds)
    return {
        "kind": KIND,
        "version": VERSION,
        "sha256": subset_sha256(idx),
        "subset": _hashed_part(idx),
        "description": f"the {len(idx):,} questions whose video is shorter than {max_seconds:g} s ({short_videos:,} of the "
                       f"{len(seconds):,} videos found in {video_dir.name or video_dir}, of {len(scenes):,})",
        "runs": [],
        "videos": {"folder": str(video_dir), "dataset_videos": len(scenes), "found": len(seconds), "shorter": short_videos,
                   "max_seconds": max_seconds, "unreadable": unreadable, "missing": len(scenes) - len(seconds) - len(unreadable)},
        "videos_differing_by_content": [],
    }


def video_hashes(artifact: RecordsArtifact) -> dict[str, str]:
    """scene -> SHA-256 of the video file the run used, from the raw file's ``videos`` list (carried
    under ``input_meta`` by sim and eval files); empty when the file does not record them."""
    meta = artifact.meta
    videos = meta.get("videos")
    if not isinstance(videos, list) and isinstance(meta.get("input_meta"), dict):
        videos = meta["input_meta"].get("videos")
    out = {}
    for entry in videos if isinstance(videos, list) else []:
        if isinstance(entry, dict) and entry.get("scene_name") and entry.get("sha256"):
            out[str(entry["scene_name"])] = str(entry["sha256"])
    return out


def build_subset_file(runs: list[str | Path]) -> dict:
    """The subset file's content for the questions whose videos every run had. Videos that two runs
    had with different bytes (a later download re-encoded, say) stay in, and are listed."""
    from k9bench.stage import file_digest

    if not runs:
        raise SubsetError("--runs: give at least one raw, sim or eval file")
    common: frozenset | None = None
    sources = []
    scene_of: dict[int, str] = {}
    hashes: dict[str, set] = {}
    for path in runs:
        try:
            artifact = load_records_artifact(path)
        except ArtifactError as exc:
            raise SubsetError(f"--runs {exc}") from None
        have = questions_with_video(artifact)
        common = have if common is None else common & have
        scene_of.update({r.idx: str(r.scene_name) for r in artifact.records if r.scene_name})
        for scene, digest in video_hashes(artifact).items():
            hashes.setdefault(scene, set()).add(digest)
        sources.append({"path": str(path), "sha256": file_digest(Path(path)), "records": len(artifact.records),
                        "with_video": len(have)})
    idx = common or frozenset()
    scenes = {scene_of[i] for i in idx if i in scene_of}
    differing = sorted(s for s in scenes if len(hashes.get(s, ())) > 1)
    names = [Path(p).name for p in runs]
    shown = ", ".join(names if len(set(names)) == len(names) else [str(p) for p in runs])
    return {
        "kind": KIND,
        "version": VERSION,
        "sha256": subset_sha256(idx),
        "subset": _hashed_part(idx),
        "description": f"the {len(idx):,} questions whose videos all {len(runs)} runs had ({shown})",
        "runs": sources,
        "videos_differing_by_content": differing,
    }


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser
    from k9bench.data.dataset import DatasetSettings
    from k9bench.data.published import PAPER_SETUP
    from k9bench.settings import add_arguments

    parser = ArgumentParser(prog="python -m k9bench.data.subset", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--runs", nargs="+", metavar="RUN_JSON", help="raw, sim or eval files of the runs: the questions whose video all had")
    what.add_argument("--short_videos", metavar="VIDEO_DIR", help="the dataset's questions whose video ({scene}.mp4 in VIDEO_DIR) "
                      "is shorter than --max_seconds (the paper's short-video subset)")
    parser.add_argument("--max_seconds", type=float, default=PAPER_SETUP.short_video_seconds,
                        help="with --short_videos: the duration cut in seconds (default: %(default)g, the paper's)")
    add_arguments(parser.add_argument_group("with --short_videos: the questions"), DatasetSettings)
    parser.add_argument("--output", required=True, metavar="SUBSET_JSON", help="the subset file to write")
    return parser


def short_video_content(video_dir: str, max_seconds: float, dataset_name: str, split: str, drop_invalid: bool = False) -> dict:
    """``--short_videos``: the dataset's questions, checked, then :func:`build_short_video_file`."""
    from k9bench.data.dataset import DatasetError, load_questions

    if not Path(video_dir).is_dir():
        raise SubsetError(f"--short_videos {video_dir}: not a folder of videos")
    if not max_seconds > 0:
        raise SubsetError(f"--max_seconds {max_seconds:g}: give a positive number of seconds")
    try:
        loaded = load_questions(dataset_name, split, drop_invalid=drop_invalid)
    except (DatasetError, FileNotFoundError) as exc:
        raise SubsetError(f"--dataset_name {dataset_name}: {exc}") from None
    return build_short_video_file(loaded.questions, video_dir, max_seconds)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from k9bench.logs import basic_logging
    basic_logging(logging.INFO)
    from k9bench.stage import StageError, check_output

    inputs = [Path(p) for p in args.runs] if args.runs else []
    try:
        output = check_output(Path(args.output), flag="--output", inputs=inputs)
        content = build_subset_file(args.runs) if args.runs else short_video_content(
            args.short_videos, args.max_seconds, args.dataset_name, args.split, args.drop_invalid_rows)
    except (ArtifactError, StageError) as exc:
        print(f"subset: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(output, content)
    count = content["subset"]["count"]
    if args.runs:
        print(f"{output}: {count:,} questions common to {len(args.runs)} runs, sha256 {content['sha256']}")
    else:
        videos = content["videos"]
        print(f"{output}: {content['description']}, sha256 {content['sha256']}")
        if videos["found"] < videos["dataset_videos"]:
            log.warning("%d of the dataset's %d videos are in %s (%d missing, %d unreadable): the subset holds the short videos "
                        "found, not the paper's %s questions of the full set", videos["found"], videos["dataset_videos"],
                        args.short_videos, videos["missing"], len(videos["unreadable"]), "2,693")
    differing = content["videos_differing_by_content"]
    if differing:
        log.warning("%d of their videos differ by content between the runs (listed in %s): %s", len(differing), output,
                    ", ".join(differing[:10]) + (" ..." if len(differing) > 10 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
