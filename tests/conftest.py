"""Shared fixtures. Every test runs offline: the Hub, YouTube and OpenAI are unreachable
by construction (pytest-socket allows loopback only; see pyproject.toml)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in the suite may reach a hub; set before any test imports transformers/datasets.
for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_var] = "1"
os.environ.setdefault("K9BENCH_NO_PROGRESS", "1")
os.environ.pop("OPENAI_API_KEY", None)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def demo_video_dir(tmp_path_factory) -> Path:
    """The three demo videos, generated once per session."""
    from k9bench.demo import make_demo_videos

    folder = tmp_path_factory.mktemp("demo_videos")
    make_demo_videos(folder)
    return folder
