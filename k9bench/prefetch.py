"""Fetch everything a GPU job reads, on a login node, so the job runs offline (``HF_HUB_OFFLINE=1``).

``python -m k9bench.prefetch`` fetches, into the caches the job reads:

1. the model (``--model_name_or_path``; ``MODEL_NAME``): ``huggingface_hub.snapshot_download`` into
   the Hub cache (``HF_HOME``/``HF_HUB_CACHE``), where ``from_pretrained`` looks;
2. the embedding model (``--embedding_model``; ``EMBEDDING_MODEL``): the same, where
   sentence-transformers looks;
3. the dataset (``--dataset_name``, ``--split``; ``DATASET_NAME``, ``SPLIT``): loaded once the way the
   job loads it (``datasets.load_dataset``), which leaves it in the datasets cache;
4. the videos of the selected questions (``--video_dir``, ``--max_samples``; ``VIDEO_DIR``,
   ``MAX_SAMPLES``) with ``--cookies``/``--cookies_from_browser`` for YouTube's bot checks: the download
   stage itself (:class:`k9bench.download.stage.DownloadStage`), so the job's download step finds every video
   present and verified (it fetches nothing).

Each value defaults to the launcher's variable when it is set, so ``MODEL_NAME=... python -m
k9bench.prefetch`` prepares what ``MODEL_NAME=... sbatch run_eval.sh`` reads. Local folders and the
demo set need no fetching (said so). At the end every Hub item is looked up in the cache the way the
job's preflight does it (:func:`k9bench.models.hub.is_cached`); when all are there it says that
``HF_HUB_OFFLINE=1`` will work. The job must see the same ``HF_HOME`` (a shared file system).

Exit status: 0 all fetched; 1 something could not be fetched (each named; rerun to retry);
2 bad input (a flag value, a cookies file that is a folder, an output that cannot be written).
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger("k9bench.prefetch")

ENV = {
    "model_name_or_path": "MODEL_NAME",
    "embedding_model": "EMBEDDING_MODEL",
    "dataset_name": "DATASET_NAME",
    "split": "SPLIT",
    "video_dir": "VIDEO_DIR",
    "max_samples": "MAX_SAMPLES",
}
"""Setting -> the launcher variable that gives its default when set."""


@dataclass
class Outcome:
    """What one step did."""

    what: str
    ok: bool
    note: str
    hub_item: tuple[str, str] | None = None
    """``(repo_id, repo_type)`` to look up in the cache at the end (None: nothing on the Hub)."""


@dataclass(frozen=True)
class PrefetchSettings:
    """What to fetch (built once from the flags by :func:`settings_from_namespace`)."""

    model_name_or_path: str
    embedding_model: str
    dataset_name: str
    split: str
    video_dir: str
    max_samples: int = -1
    cookies: str | None = None
    cookies_from_browser: str | None = None
    workers: int | None = None
    skip: tuple[str, ...] = ()

    def download_argv(self) -> list[str]:
        """The download stage's command line for the videos."""
        argv = ["--dataset_name", self.dataset_name, "--split", self.split, "--output_dir", self.video_dir,
                "--max_samples", str(self.max_samples)]
        for flag in ("cookies", "cookies_from_browser", "workers"):
            if getattr(self, flag) is not None:
                argv += [f"--{flag}", str(getattr(self, flag))]
        return argv


def settings_from_namespace(args: argparse.Namespace) -> PrefetchSettings:
    values = vars(args)
    return PrefetchSettings(**{f: values[f] for f in PrefetchSettings.__dataclass_fields__ if f != "skip"},
                            skip=tuple(values["skip"]))


@dataclass
class PrefetchReport:
    steps: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [s for s in self.steps if not s.ok]


def _defaults() -> dict[str, str]:
    from k9bench.data.dataset import DEFAULT_DATASET, DEFAULT_SPLIT
    from k9bench.download.settings import DEFAULT_VIDEO_DIR
    from k9bench.inference.settings import DEFAULT_MODEL
    from k9bench.scoring.settings import DEFAULT_EMBEDDING_MODEL

    base = {"model_name_or_path": DEFAULT_MODEL, "embedding_model": DEFAULT_EMBEDDING_MODEL, "dataset_name": DEFAULT_DATASET,
            "split": DEFAULT_SPLIT, "video_dir": DEFAULT_VIDEO_DIR, "max_samples": "-1"}
    return {k: os.environ.get(ENV[k]) or v for k, v in base.items()}


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser, DefaultsHelpFormatter, add_logging_args
    from k9bench.validators import int_at_least, positive_int

    d = _defaults()
    parser = ArgumentParser(prog="python -m k9bench.prefetch", description=__doc__.split("\n\n")[0],
                            formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--model_name_or_path", default=d["model_name_or_path"], help="the video LLM (MODEL_NAME when set)")
    parser.add_argument("--embedding_model", default=d["embedding_model"], help="the scoring model (EMBEDDING_MODEL when set)")
    parser.add_argument("--dataset_name", default=d["dataset_name"], help="the questions (DATASET_NAME when set)")
    parser.add_argument("--split", default=d["split"], help="dataset split (SPLIT when set)")
    parser.add_argument("--video_dir", default=d["video_dir"], help="folder for the {scene}.mp4 files (VIDEO_DIR when set)")
    parser.add_argument("--max_samples", type=int_at_least(-1), default=int(d["max_samples"]),
                        help="only the videos of the first N questions, -1 all (MAX_SAMPLES when set)")
    parser.add_argument("--cookies", default=None, help="Netscape cookies.txt for YouTube (see docs/download.md)")
    parser.add_argument("--cookies_from_browser", default=None, metavar="BROWSER", help="read YouTube cookies from a browser")
    parser.add_argument("--workers", type=positive_int, default=None, help="parallel video downloads (download_videos.py's default)")
    parser.add_argument("--skip", action="append", default=[], choices=("model", "embedding", "dataset", "videos"),
                        help="leave one part out (repeatable)")
    add_logging_args(parser)
    return parser


def fetch_model(name: str, what: str) -> Outcome:
    """Snapshot a Hub model into the Hub cache (a local folder needs nothing)."""
    from k9bench.models import hub

    if not hub.is_hub_id(name):
        if os.path.isdir(os.path.expanduser(name)):
            return Outcome(what, True, f"{name} is a local folder: nothing to fetch")
        return Outcome(what, False, f"{name}: no such folder, and not a Hub id")
    from huggingface_hub import snapshot_download

    from k9bench.progress import quiet_library_progress_bars

    quiet_library_progress_bars()  # no Hub download bar in a batch log
    try:
        path = snapshot_download(repo_id=name)
    except Exception as exc:  # gated, missing, offline...: said in one line, the other steps go on
        return Outcome(what, False, f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
                       hub_item=(name, "model"))
    return Outcome(what, True, f"{name} -> {path}", hub_item=(name, "model"))


def fetch_dataset(name: str, split: str) -> Outcome:
    """Load the dataset once the way the job does (leaves it in the datasets cache)."""
    from k9bench.models import hub
    from k9bench.data.dataset import DatasetError, load_questions
    from k9bench.data.demo import is_demo_dataset

    try:
        loaded = load_questions(name, split)
    except DatasetError as exc:
        return Outcome("dataset", False, str(exc).splitlines()[0], hub_item=None if not hub.is_hub_id(name) else (name, "dataset"))
    if is_demo_dataset(name) or not hub.is_hub_id(name):
        return Outcome("dataset", True, f"{name}: {len(loaded.questions)} question(s), bundled or local: nothing to fetch")
    return Outcome("dataset", True, f"{name} ({split}): {len(loaded.questions)} question(s) in the datasets cache",
                   hub_item=(name, "dataset"))


def fetch_videos(s: PrefetchSettings) -> Outcome:
    """The download stage for the selected questions (the job's download step then fetches nothing)."""
    from k9bench.download.stage import DownloadStage, config_from_argv
    from k9bench.stage import run_stage

    code = run_stage(DownloadStage(config_from_argv(s.download_argv(), script="k9bench.prefetch")))
    if code == 0:
        return Outcome("videos", True, f"every video of the selection is in {s.video_dir}")
    return Outcome("videos", False, f"exit {code}: see the lines above and {s.video_dir}/download_manifest.json")


def offline_ready(report: PrefetchReport) -> list[str]:
    """The Hub items the job would not find in the cache (the job's own preflight test)."""
    from k9bench.models import hub

    return [f"{repo_type} {repo}" for s in report.steps if s.hub_item for repo, repo_type in [s.hub_item]
            if not hub.is_cached(repo, repo_type=repo_type)]


def prefetch(s: PrefetchSettings) -> PrefetchReport:
    """Every step not skipped, in order; each failure is recorded and the others still run."""
    report = PrefetchReport()
    if "model" not in s.skip:
        report.steps.append(fetch_model(s.model_name_or_path, "model"))
    if "embedding" not in s.skip:
        report.steps.append(fetch_model(s.embedding_model, "embedding model"))
    if "dataset" not in s.skip:
        report.steps.append(fetch_dataset(s.dataset_name, s.split))
    if "videos" not in s.skip:
        report.steps.append(fetch_videos(s))
    return report


def main(argv: list[str] | None = None) -> int:
    from k9bench.models import hub
    from k9bench.logs import setup_logging
    from k9bench.download.stage import config_from_argv
    from k9bench.stage import StageError

    args = build_parser().parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    settings = settings_from_namespace(args)
    offline = hub.offline_requested()
    if offline:
        log.error("%s is set: prefetch needs the network (run it on a login node without %s)", offline, offline)
        return 2
    if "videos" not in settings.skip:
        try:  # the cookies and the video folder's flags, before anything is fetched
            config_from_argv(settings.download_argv())
        except StageError as exc:
            log.error("%s", exc)
            return exc.exit_code
    log.info("Hub cache: %s (the job must see the same HF_HOME)", hub.hub_cache_dir())
    report = prefetch(settings)
    for step in report.steps:
        (log.info if step.ok else log.error)("%s: %s%s", step.what, "" if step.ok else "FAILED: ", step.note)
    not_cached = offline_ready(report)
    for item in not_cached:
        log.error("not in the cache the job reads: %s", item)
    if report.failed or not_cached:
        log.error("the job would still need the network (%d step(s) failed); rerun to retry", len(report.failed))
        return 1
    log.info("everything the job reads is here: HF_HUB_OFFLINE=1 will work (e.g. HF_HUB_OFFLINE=1 sbatch run_eval.sh)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
