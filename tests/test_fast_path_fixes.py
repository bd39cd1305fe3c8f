"""Issue 29's HF fast-path fixes and issue 28's Backend base class, without a model or a GPU:
the suffix-prefill budget from free CUDA memory, the re-planning of prepared batches after an
out-of-memory error, bench_gpu's JSON layout with a baseline engine, and the base class's defaults."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference import registry
from k9bench.inference.backend import Backend, BackendError, GenerationRequest, backend_class
from k9bench.inference.runner import EXIT_OK
from tests.test_inference_units import FakeBackend, FakeOOM, args_for, records, use_backend  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- suffix-prefill budget


def test_prefill_budget_is_fixed_off_a_gpu_and_follows_free_memory_on_cuda(monkeypatch):
    import torch

    from k9bench.inference import shared_decode as sd

    assert sd.prefill_budget(torch.device("cpu")) == sd.CPU_PREFILL_ELEMENTS == 1 << 26
    assert sd.prefill_budget(torch.device("cpu"), 5) == 5  # a number given is used as given
    free = {"bytes": 100 * 2**30}
    seen = []

    def mem_get_info(device=None):
        seen.append(device)
        return free["bytes"], 141 * 2**30

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    cuda = torch.device("cuda:0")  # only the rule: nothing is allocated on it
    big = sd.prefill_budget(cuda)
    assert big == int(100 * 2**30 * sd.PREFILL_MEMORY_FRACTION) // sd.SCORE_BYTES
    assert big > 60 * sd.CPU_PREFILL_ELEMENTS and seen == [cuda]
    free["bytes"] = 50 * 2**30
    assert sd.prefill_budget(cuda) == pytest.approx(big / 2, rel=1e-6)
    free["bytes"] = 2**20  # nearly full: never below the fixed budget
    assert sd.prefill_budget(cuda) == sd.CPU_PREFILL_ELEMENTS
    assert sd.prefill_budget(cuda, 7) == 7


def test_the_suffix_prefill_takes_its_chunk_from_the_budget(monkeypatch):
    """More room for attention scores, fewer suffix-prefill forwards (one per chunk of slots)."""
    import torch

    from k9bench.inference import shared_decode as sd

    vocab, forwards = 11, []

    class Model:
        def __call__(self, *, input_ids, logits_to_keep, **kwargs):
            forwards.append(input_ids.shape[1])
            return type("Out", (), {"logits": torch.zeros(input_ids.shape[0], len(logits_to_keep), vocab)})()

    decoder = sd.SharedDecoder.__new__(sd.SharedDecoder)
    decoder.model, decoder.heads, decoder.prefill_elements, decoder.last_prefill_chunk = Model(), 4, None, None
    groups, slots, s_max, p_max = 3, 8, 5, 20
    width = p_max + slots * s_max + slots * 4
    owner = torch.zeros(groups, width, dtype=torch.long)
    ids = torch.zeros(groups, slots * s_max, dtype=torch.long)
    rows_g = torch.tensor([g for g in range(groups) for _ in range(slots)])
    rows_s = torch.tensor([s for _ in range(groups) for s in range(slots)])

    def mask(cols, query_slot, extent):
        return torch.ones(groups, 1, cols.shape[0], extent, dtype=torch.bool)

    per_slot = groups * decoder.heads * s_max * width
    for budget, chunk in ((per_slot * slots, slots), (per_slot * 3, 3), (1, 1)):
        forwards.clear()
        monkeypatch.setattr(sd, "prefill_budget", lambda device, given, b=budget: b)
        logits = decoder._prefill_suffixes(ids, ids, ids, owner, mask, slots, s_max, p_max, None, rows_g, rows_s)
        assert logits.shape == (groups * slots, vocab) and decoder.last_prefill_chunk == chunk
        assert len(forwards) == -(-slots // chunk) and sum(forwards) == slots * s_max


# --------------------------------------------------------------------------- out of memory: re-planned


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


def test_after_out_of_memory_the_batches_prepared_ahead_are_planned_again_at_the_new_size(use_backend, demo_video_dir, tmp_path):
    backend = use_backend(PreparingBackend())
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "4", "--prefetch_videos", "2")) == EXIT_OK
    recs = records(out)
    assert len(recs) == 12 and not any(r.get("error") for r in recs.values())
    # the 12 questions at 4: the first batch fails; every batch after it runs at 2, none at the old 4
    assert backend.run_sizes[0] == 4 and backend.run_sizes[1:] == [2] * 4
    assert 4 in backend.prepared_sizes[1:]  # batches had been prepared ahead at the old size (and were dropped)
    # the failed batch itself is rerun video by video at the new size through generate
    assert [len(c) for c in backend.calls] == [2, 2] + [2] * 4
    answered = [k for c in backend.calls for k in c]
    assert sorted(answered) == sorted(set(answered))  # no question answered twice
    stats = json.loads(out.read_text())["run_stats"]
    assert stats["batch_size"]["history"] == [[4, "given"], [2, "out of memory"]]
    assert stats["batch_fallbacks"] == 1 and stats["prepare"]["prepared"] >= 5


# --------------------------------------------------------------------------- bench_gpu's JSON


def _bench_gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu_under_test", ROOT / "bench" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_gpu_keeps_the_baseline_engine_under_its_own_key():
    bench = _bench_gpu()
    result: dict = {"today": {"questions_per_second": 1.0}}
    baseline = {"engine": "baseline", "questions_per_second": 2.0, "ratio": 2.0, "same_answers": 9}
    new = {"engine": "new", "questions_per_second": 5.0, "ratio": 5.0, "same_answers": 10}
    bench.add_engine_figures(result, "baseline", baseline)  # the baseline is timed first
    assert "new" not in result and "ratio" not in result and result["new_by_engine"] == {"baseline": baseline}
    bench.add_engine_figures(result, "new", new)
    assert result["new"] is new and (result["ratio"], result["same_answers"]) == (5.0, 10)
    assert result["new_by_engine"] == {"baseline": baseline, "new": new}
    alone: dict = {}
    bench.add_engine_figures(alone, "new", {"engine": "new", "questions_per_second": 3.0})  # --skip_today: no ratio
    assert alone["new"]["questions_per_second"] == 3.0 and "ratio" not in alone


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
