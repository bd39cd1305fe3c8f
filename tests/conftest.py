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
    from k9bench.data.demo import make_demo_videos

    folder = tmp_path_factory.mktemp("demo_videos")
    make_demo_videos(folder)
    return folder


@pytest.fixture(scope="session")
def av_video_dir(tmp_path_factory) -> Path:
    """The demo videos with soundtracks (demoVid0001 a sine tone, demoVid0002 pink noise; demoVid0003
    silent), generated once per session."""
    from k9bench.data.demo import make_demo_videos

    folder = tmp_path_factory.mktemp("av_videos")
    make_demo_videos(folder, soundtrack=True)
    return folder


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny models run far faster single-threaded on a shared CPU; restored afterwards.
    Modules that run them use it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random-weight Qwen3-VL (``k9bench.tiny_model``), built once per session for the launcher tests."""
    from k9bench.tiny_model import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.mktemp("launcher_model") / "tiny-qwen3vl")
