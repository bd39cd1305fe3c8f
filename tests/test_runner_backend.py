"""The loop and the Backend base class without a model or a GPU (issues 28, 29, 36, 40): batches prepared ahead
after an out-of-memory error, the base class's defaults, the registry's classes, a backend whose engine dies."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference import registry
from k9bench.inference.backend import Backend, BackendError, EngineDead, GenerationRequest, backend_class
from k9bench.inference.runner import EXIT_OK
from tests.test_inference_units import FakeBackend, FakeOOM, args_for, records, use_backend  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- out of memory: batches prepared ahead


class PreparingBackend(FakeBackend):
    """A backend whose batches span videos (prepared ahead); its first prepared batch runs out of memory."""

    def __init__(self):
        super().__init__()
        self.prepared_sizes: list[int] = []
        self.run_sizes: list[int] = []

    def prepares_batches(self) -> bool:
        return True

    def prepare_batch(self, requests):
        self.prepared_sizes.append(len(requests))
        return list(requests)

    def run_prepared(self, prepared):
        self.run_sizes.append(len(prepared))
        if len(self.run_sizes) == 1:
            raise FakeOOM("CUDA out of memory (fake)")
        return self.generate(prepared)


def test_after_out_of_memory_the_batches_prepared_ahead_run_at_the_new_size(use_backend, demo_video_dir, tmp_path):
    backend = use_backend(PreparingBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "4", "--prefetch_videos", "2")) == EXIT_OK
    recs = records(out)
    assert len(recs) == 12 and not any(r.get("error") for r in recs.values())
    # the 12 questions at 4: the first batch fails; the batches prepared ahead at the old size are not run at it
    assert backend.run_sizes == [4] and backend.prepared_sizes == [4, 4, 4]
    # the failed batch and those prepared ahead are rerun video by video at the new size through generate
    assert [len(c) for c in backend.calls] == [2] * 6
    answered = [k for c in backend.calls for k in c]
    assert sorted(answered) == sorted(set(answered)) and len(answered) == 12  # no question answered twice
    stats = json.loads(out.read_text())["run_stats"]
    assert stats["batch_size"]["history"] == [[4, "given"], [2, "out of memory"]]
    assert stats["batch_fallbacks"] == 1 and stats["prepare"]["prepared"] == 3


def test_batches_planned_after_out_of_memory_are_planned_at_the_new_size(use_backend, demo_video_dir, tmp_path):
    backend = use_backend(PreparingBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "2", "--prefetch_videos", "0")) == EXIT_OK
    # at 2, depth 2: batches 1-3 were taken at 2 before the first one ran out of memory (two ahead of it); after the
    # halving to 1 the rest are planned at 1 and run prepared
    assert backend.run_sizes[0] == 2 and sorted(backend.prepared_sizes) == [1] * 6 + [2] * 3  # workers finish in any order
    assert backend.run_sizes[1:] == [1] * (12 - 6) and [len(c) for c in backend.calls] == [1] * 12  # 6 rerun, 6 run prepared
    assert len(records(out)) == 12


# --------------------------------------------------------------------------- an engine that dies (issue 40)


class DyingBackend(PreparingBackend):
    """Its engine dies at the ``dies_at``-th call of ``where`` (``generate``, ``prepare_batch`` or ``run_prepared``)."""

    def __init__(self, where: str, dies_at: int = 2, prepares: bool = True):
        super().__init__()
        self.where, self.dies_at, self.prepares, self.counts = where, dies_at, prepares, {}

    def _tick(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        if name == self.where and self.counts[name] >= self.dies_at:
            raise EngineDead("the engine core died: RuntimeError: head_dim 16 is not supported by the CPU attention backend")

    def prepares_batches(self) -> bool:
        return self.prepares

    def generate(self, batch):
        self._tick("generate")
        return super().generate(batch)

    def prepare_batch(self, requests):
        self._tick("prepare_batch")
        return super().prepare_batch(requests)

    def run_prepared(self, prepared):
        self._tick("run_prepared")
        self.run_sizes.append(len(prepared))
        return FakeBackend.generate(self, prepared)


@pytest.mark.parametrize("where, batch", [("generate", "1"), ("generate", "3"), ("prepare_batch", "3"), ("run_prepared", "3")])
def test_an_engine_that_dies_ends_the_run_at_once_with_its_reason(use_backend, demo_video_dir, tmp_path, capfd, where, batch):
    from k9bench.layout import checkpoint_path

    backend = use_backend(DyingBackend(where, prepares=where != "generate"))  # generate: the video-by-video path
    out = tmp_path / "raw.json"
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", batch, "--prefetch_videos", "0")) == 3
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "ERROR" in line]
    assert len(lines) == 1 and "head_dim 16 is not supported" in lines[0] and "Traceback" not in err
    assert backend.counts[where] == 2  # nothing tried against the dead engine after it died
    kept = [json.loads(line) for line in checkpoint_path(out).read_text().splitlines() if line.strip()]
    assert kept and not any(r.get("error") for r in kept) and not out.exists()  # the answers before it kept, no failed record
    assert f"{len(kept)} record(s) are safe" in lines[0]


def test_a_backend_refusal_during_the_run_is_one_line(use_backend, demo_video_dir, tmp_path, capfd):
    """--audio with a backend that takes no soundtrack, refused by the loop: one line, exit 3, no traceback."""
    use_backend(FakeBackend())
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, tmp_path / "raw.json", "--audio")) == 3
    err = capfd.readouterr().err
    assert "takes no soundtrack" in err and "Traceback" not in err


# --------------------------------------------------------------------------- the Backend base class


class Minimal(Backend):
    name = "minimal"

    def load(self):
        pass

    def render_prompt(self, messages):
        return "p"

    def generate(self, batch):
        return []

    def describe(self):
        return {}


def test_the_base_class_defaults_say_not_supported():
    b = Minimal()
    assert b.frame_patch_size() is None and b.sampling_overrides() == {} and b.audio_sampling_rate() is None
    assert b.prepares_batches() is False and b.max_batches_in_flight() == 1 and b.server_info() is None
    assert b.run_stats() == {} and b.is_out_of_memory(MemoryError()) is False
    b.recover_from_out_of_memory()
    b.close()
    auto = b.choose_batch_size("auto", questions=10, videos=2, max_frames=8, max_pixels=None)
    assert (auto.batch_size, auto.requested) == (1, "auto") and "minimal" in auto.reason
    assert b.choose_batch_size(6, questions=10, max_frames=8, max_pixels=None).batch_size == 6
    with pytest.raises(NotImplementedError):
        b.prepare_batch([GenerationRequest(key=0, messages=[])])
    for required in ("load", "render_prompt", "generate", "describe"):
        with pytest.raises(NotImplementedError):
            getattr(Backend(), required)(*([[]] if required in ("render_prompt", "generate") else []))


def test_registered_backends_subclass_the_base_class_and_name_the_choices(monkeypatch):
    from k9bench.inference.hf.backend import HFBackend
    from k9bench.inference.openai_compat.backend import OpenAIBackend
    from k9bench.inference.registry import BACKEND_NAMES

    assert issubclass(HFBackend, Backend) and issubclass(OpenAIBackend, Backend)
    assert HFBackend.prepares_batches(object.__new__(HFBackend)) is True
    assert BACKEND_NAMES == tuple(registry.REGISTRY)
    assert registry.entry("hf").local_weights and not registry.entry("openai").local_weights
    with pytest.raises(KeyError, match="choose one of"):
        registry.entry("nope")
    import types

    fake = types.ModuleType("k9bench_fake_backend_module")
    fake.NotABackend = type("NotABackend", (), {})
    monkeypatch.setitem(__import__("sys").modules, fake.__name__, fake)
    monkeypatch.setitem(registry.REGISTRY, "odd", dataclasses.replace(registry.REGISTRY["hf"], target=f"{fake.__name__}:NotABackend", local_weights=False))
    with pytest.raises(BackendError, match="not a subclass"):
        backend_class("odd")


def test_the_loop_calls_backend_methods_instead_of_probing_for_them():
    for name in ("runner.py", "stage.py"):
        text = (ROOT / "k9bench" / "inference" / name).read_text(encoding="utf-8")
        assert "getattr(self.backend" not in text and "getattr(backend" not in text, name
    for name in ("records.py", "resume_check.py", "settings.py", "planning.py", "runner.py", "stage.py"):
        text = (ROOT / "k9bench" / "inference" / name).read_text(encoding="utf-8")
        for backend in registry.BACKEND_NAMES:
            assert f'backend == "{backend}"' not in text and f"backend != \"{backend}\"" not in text, (name, backend)
