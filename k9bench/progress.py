"""Progress bars: ours (tqdm) and the libraries' own, quiet when not on a terminal."""

from __future__ import annotations

import os
import sys

def progress_enabled() -> bool | None:
    """``disable`` value for tqdm: None lets tqdm stay quiet when stderr is not a terminal."""
    return True if os.environ.get("K9BENCH_NO_PROGRESS") else None


def quiet_library_progress_bars() -> None:
    """Turn off transformers' own bars ("Loading weights") where ours are off: not a terminal, or
    ``K9BENCH_NO_PROGRESS`` set. Call after importing transformers, before loading a model."""
    if progress_enabled() is True or not sys.stderr.isatty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
