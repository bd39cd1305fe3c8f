"""``--backend vllm`` with the engine stubbed: one frames array per video, its uuid hashed once, the model family's
frame rule (the HF backend's frame sizes for a fixed-size InternVL checkpoint), the chunk's memory bound, and a
dead engine ending the run at once in one line with its own reason (the real engine: tests/test_vllm_inprocess.py).

The stub is a ``vllm`` package written to a temporary folder and put first on ``sys.path``: ``LLM`` records every
prompt it is given and answers each with a fixed reply; its tokenizer is the checkpoint's own, so the prompt
token counts are real (video tokens are not expanded: the stub has no vision processor)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import eval_video_llm
from k9bench.inference.backend import GenerationRequest
from k9bench.inference.vllm.prompts import CHUNK_FRAME_BYTES, MIN_CHUNK, build_prompts, chunk_size, frame_bytes_bound, video_uuid
from k9bench.video.sampling import Frames

STUB = r'''
import json, os
__version__ = "0.0-stub"
PROMPTS = []  # every prompt dict given to generate, in order

class SamplingParams:
    def __init__(self, max_tokens=16, temperature=1.0, top_p=1.0, top_k=-1, repetition_penalty=1.0, seed=None):
        self.max_tokens, self.temperature, self.top_p, self.top_k = max_tokens, temperature, top_p, top_k
        self.repetition_penalty, self.seed = repetition_penalty, seed

class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)

class LLM:
    def __init__(self, model, **kwargs):
        from transformers import AutoTokenizer
        self._tok = AutoTokenizer.from_pretrained(model)
        self.kwargs = kwargs
        self.llm_engine = _NS(model_config=_NS(dtype="torch.float32", max_model_len=4096),
                              vllm_config=_NS(scheduler_config=_NS(max_num_seqs=8, max_num_batched_tokens=2048, enable_chunked_prefill=True),
                                              device_config=_NS(device_type="cpu")),
                              engine_core=_NS(shutdown=lambda: None))

    def get_tokenizer(self):
        return self._tok

    def get_default_sampling_params(self):
        return SamplingParams()

    def generate(self, prompts, params, use_tqdm=False):
        if os.environ.get("K9_STUB_DIE"):
            os.write(2, b"(EngineCore pid=1) ERROR 12-05 00:54:02 [core.py:1512] RuntimeError: Worker failed with error "
                        b"'Unsupported CPU attention configuration: head_dim=16'\n")  # as the engine's process: on fd 2
            from vllm.v1.engine.exceptions import EngineDeadError
            raise EngineDeadError()
        PROMPTS.extend(prompts)
        out = []
        for p in prompts:
            ids = self._tok(p["prompt"])["input_ids"]
            out.append(_NS(prompt_token_ids=ids, outputs=[_NS(text="B", token_ids=[1, 2], finish_reason="stop")]))
        return out
'''
EXC = '''
class EngineDeadError(Exception):
    def __init__(self, *args, **kwargs):
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.")
'''


@pytest.fixture
def stub_vllm(tmp_path, monkeypatch):
    """A fake ``vllm`` package (see the module doc); returns the module after it is imported."""
    root = tmp_path / "stub"
    (root / "vllm" / "v1" / "engine").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(textwrap.dedent(STUB))
    (root / "vllm" / "v1" / "__init__.py").write_text("")
    (root / "vllm" / "v1" / "engine" / "__init__.py").write_text("")
    (root / "vllm" / "v1" / "engine" / "exceptions.py").write_text(textwrap.dedent(EXC))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(root))
    import vllm

    yield vllm
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def tiny_internvl(tmp_path_factory) -> Path:
    from k9bench.tiny_model.families import build_tiny_internvl

    return build_tiny_internvl(tmp_path_factory.mktemp("ivl") / "model", seed=0)


@pytest.fixture(scope="module")
def tiny_qwen3vl(tmp_path_factory) -> Path:
    from k9bench.tiny_model import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.mktemp("q3") / "model", seed=0)


def _frames(t: int = 4, h: int = 64, w: int = 96, fill: int = 7) -> Frames:
    pixels = torch.full((t, 3, h, w), fill, dtype=torch.uint8)
    return Frames(frames=pixels, indices=list(range(0, 2 * t, 2)), source_fps=2.0, total_frames=2 * t, sample_fps=1.0, height=h, width=w,
                  duration=float(t), decoder="pyav")


def _request(i: int, frames: Frames) -> GenerationRequest:
    return GenerationRequest(key=i, messages=[{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": f"q{i}"}]}],
                             frames=frames, seed=i)


def _policy(checkpoint: Path):
    from transformers import AutoProcessor

    from k9bench.video.policy import policy_for

    return policy_for(AutoProcessor.from_pretrained(checkpoint), model_type=json.loads((checkpoint / "config.json").read_text())["model_type"])


def test_five_questions_of_one_video_share_one_array_and_one_uuid(tiny_qwen3vl):
    """One array per video (a view of the sampled tensor: no copy), one uuid hashed once, metadata kept."""
    policy = _policy(tiny_qwen3vl)
    one, other = _frames(fill=7), _frames(fill=9)
    requests = [_request(i, one) for i in range(5)] + [_request(5, other)]
    hashed = []
    import k9bench.inference.vllm.prompts as prompts

    original = prompts.video_uuid
    prompts.video_uuid = lambda frames, metadata: hashed.append(id(frames)) or original(frames, metadata)
    try:
        prepared = build_prompts(requests, lambda messages: messages[0]["content"][1]["text"], policy)
    finally:
        prompts.video_uuid = original
    arrays = [p["multi_modal_data"]["video"][0][0] for p in prepared.prompts]
    assert prepared.videos == 2 and len({id(a) for a in arrays}) == 2 and len({id(a) for a in arrays[:5]}) == 1
    assert hashed == [id(one), id(other)]  # each video hashed once, not once per question
    assert arrays[0].shape == (4, 64, 96, 3) and arrays[0].dtype == np.uint8 and np.shares_memory(arrays[0], one.frames.numpy())
    uuids = [p["multi_modal_uuids"]["video"][0] for p in prepared.prompts]
    assert len(set(uuids[:5])) == 1 and uuids[5] != uuids[0] and uuids[0] == video_uuid(one, prepared.prompts[0]["multi_modal_data"]["video"][0][1])
    metadata = prepared.prompts[0]["multi_modal_data"]["video"][0][1]
    assert metadata["frames_indices"] == [0, 2, 4, 6] and metadata["do_sample_frames"] is False
    assert prepared.prompts[0]["mm_processor_kwargs"] == {"do_sample_frames": False, "do_resize": False}
    assert prepared.texts == [f"q{i}" for i in range(6)] and prepared.seeds == list(range(6))


def test_an_omni_processor_gets_the_sampled_fps_as_the_hf_path_gives_it(tiny_qwen3vl):
    import dataclasses

    policy = dataclasses.replace(_policy(tiny_qwen3vl), fps_keyword=True)  # the Omni rows' quirk (families.py: fps_keyword)
    frames = _frames()
    prepared = build_prompts([_request(0, frames)], lambda m: "p", policy)
    assert prepared.prompts[0]["mm_processor_kwargs"] == {"do_sample_frames": False, "do_resize": False, "fps": 1.0}
    assert policy.processor_kwargs([frames])["fps"] == 1.0  # what the HF backend hands its processor


def test_the_uuid_follows_the_pixels_and_the_metadata():
    a, b = _frames(fill=7), _frames(fill=7)
    assert video_uuid(a, {"fps": 2.0}) == video_uuid(b, {"fps": 2.0})
    b.frames[0, 0, 0, 0] = 8
    assert video_uuid(a, {"fps": 2.0}) != video_uuid(b, {"fps": 2.0}) and video_uuid(a, {"fps": 2.0}) != video_uuid(a, {"fps": 3.0})


def test_a_fixed_size_family_gets_its_size_and_no_metadata(tiny_internvl):
    policy = _policy(tiny_internvl)
    assert policy.rule == "fixed_size" and policy.frame_size == (56, 56)
    prepared = build_prompts([_request(0, _frames(h=56, w=56))], lambda m: "p", policy)
    video = prepared.prompts[0]["multi_modal_data"]["video"][0]
    assert isinstance(video, np.ndarray) and video.shape == (4, 56, 56, 3)
    with pytest.raises(ValueError, match="expects 56x56 frames"):
        build_prompts([_request(0, _frames(h=64, w=96))], lambda m: "p", policy)


def test_chunk_is_four_times_the_running_sequences_within_the_frame_bound():
    assert chunk_size(256, 4744)[0] == 1024 and chunk_size(4, 4744)[0] == MIN_CHUNK
    assert chunk_size(256, 12)[0] == 12 and chunk_size(256, 0)[0] == 1
    per_video = frame_bytes_bound(32, 360 * 420)
    assert per_video == 32 * 360 * 420 * 3
    size, reason = chunk_size(1024, 4744, videos=907, frame_bytes=per_video)
    fit = CHUNK_FRAME_BYTES // per_video
    assert size == int(fit * 4744 / 907) < 1024 and f"{fit} video(s)" in reason
    assert chunk_size(256, 4744, videos=907, frame_bytes=1000)[0] == 1024  # small frames: the engine's rule


def _argv(model: Path, videos: Path, out: Path, backend: str) -> list[str]:
    return ["--backend", backend, "--model_name_or_path", str(model), "--dataset_name", "demo", "--video_dir", str(videos),
            "--output_file", str(out), "--max_new_tokens", "4", "--greedy", "--max_frames", "4", "--device", "cpu"][:None if backend == "hf" else -2]


def _records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["individual_results"]


def test_internvl_frames_are_the_hf_backends_and_each_video_is_one_array(stub_vllm, tiny_internvl, demo_video_dir, tmp_path):
    """The same checkpoint through both backends: the same frame sizes recorded (56x56), the stubbed engine given one
    array per video (12 questions, 3 videos), each 56x56, with one uuid per video."""
    assert eval_video_llm.main(_argv(tiny_internvl, demo_video_dir, tmp_path / "hf.json", "hf")) == 0
    assert eval_video_llm.main(_argv(tiny_internvl, demo_video_dir, tmp_path / "vllm.json", "vllm")) == 0
    hf, vl = _records(tmp_path / "hf.json"), _records(tmp_path / "vllm.json")
    assert len(hf) == len(vl) == 12
    assert [r["frame_size"] for r in vl] == [r["frame_size"] for r in hf] == [[56, 56]] * 12
    assert [r["frame_indices"] for r in vl] == [r["frame_indices"] for r in hf]
    arrays = [p["multi_modal_data"]["video"][0] for p in stub_vllm.PROMPTS]
    assert len(arrays) == 12 and len({id(a) for a in arrays}) == 3 and {a.shape[1:] for a in arrays} == {(56, 56, 3)}
    assert len({p["multi_modal_uuids"]["video"][0] for p in stub_vllm.PROMPTS}) == 3
    raw = json.loads((tmp_path / "vllm.json").read_text())
    assert raw["inference"]["backend"]["frame_policy"]["rule"] == "fixed_size"


def test_a_dead_engine_ends_the_run_at_once_with_its_own_reason(stub_vllm, tiny_qwen3vl, demo_video_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("K9_STUB_DIE", "1")
    code = eval_video_llm.main(_argv(tiny_qwen3vl, demo_video_dir, tmp_path / "raw.json", "vllm"))
    err = capsys.readouterr().err
    assert code == 3
    line = next(x for x in err.splitlines() if "the engine died" in x)
    assert "Unsupported CPU attention configuration: head_dim=16" in line and "Traceback" not in err
    assert "generation failed" not in err and "rerunning it by video" not in err  # no question retried against it
