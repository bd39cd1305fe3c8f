"""Small helpers shared by the script front ends: logging and argparse types."""

from __future__ import annotations

import argparse
import logging
import os
import sys

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Configure the root logger once, from a script's ``main``.

    Level INFO by default, DEBUG with ``-v``, WARNING with ``-q``. Noisy
    third-party loggers stay at WARNING unless ``-vv``.
    """
    level = logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO)
    logging.basicConfig(level=level, format=LOG_FORMAT, datefmt="%H:%M:%S", stream=sys.stderr, force=True)
    for name in ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "urllib3", "filelock", "huggingface_hub", "datasets", "PIL", "matplotlib"):
        # NOTSET with -vv, so an earlier call in the same process does not keep them quiet
        logging.getLogger(name).setLevel(logging.WARNING if verbose < 2 else logging.NOTSET)


def add_logging_args(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` and ``-q/--quiet``."""
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for library logs too)")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")


def str2bool(value: str | bool) -> bool:
    """argparse type for ``True/False`` flags written the reference's way (``--use_system_message False``)."""
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "t", "yes", "y", "1", "on"):
        return True
    if lowered in ("false", "f", "no", "n", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {value!r}")


def add_dataset_args(parser: argparse.ArgumentParser) -> None:
    """``--dataset_name``, ``--split`` and ``--drop_invalid_rows``, the same in every script."""
    from k9bench.dataset import DEFAULT_DATASET, DEFAULT_SPLIT  # light module, no heavy imports

    parser.add_argument(
        "--dataset_name",
        default=DEFAULT_DATASET,
        help="Hub dataset id, a local parquet/json/jsonl file or save_to_disk folder, or 'demo' (default: %(default)s)",
    )
    parser.add_argument("--split", default=DEFAULT_SPLIT, help="dataset split (default: %(default)s)")
    parser.add_argument(
        "--drop_invalid_rows",
        action="store_true",
        help="drop rows that fail validation (reporting how many and which) instead of stopping",
    )


def progress_enabled() -> bool | None:
    """``disable`` value for tqdm: None lets tqdm stay quiet when stderr is not a terminal."""
    return True if os.environ.get("K9BENCH_NO_PROGRESS") else None


def quiet_library_progress_bars() -> None:
    """Turn off transformers' own bars ("Loading weights") where ours are off: not a terminal, or
    ``K9BENCH_NO_PROGRESS`` set. Call after importing transformers, before loading a model."""
    if progress_enabled() is True or not sys.stderr.isatty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def short_model_name(model: str) -> str:
    """The part of a model id after the last ``/`` (the launcher's file-name form)."""
    return str(model).rstrip("/").rsplit("/", 1)[-1]
