"""The ``video`` transport's mp4 is lossless by default: decoded, it is byte for byte the uint8 frames
we sampled, the very array in-process vLLM gets (``--backend vllm``). Checked with the decoder the
vLLM server itself uses on a ``video_url`` data URL (its Qwen3-VL video loader over OpenCV, run in the
vLLM environment ``K9BENCH_VLLM_PYTHON`` names, tests marked ``vllm``) and with PyAV here; the lossy
``--video_crf`` mp4 is not, and the record says which one was sent."""

from __future__ import annotations

import base64
import json
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import eval_video_llm
from k9bench.inference.runner import EXIT_OK
from k9bench.inference.openai_compat.video_transport import MediaBuilder, encode_frames_mp4, mp4_codec, video_timing
from tests.fake_openai_server import FakeOpenAIServer
from tests.test_vllm import vllm_python  # noqa: F401

ANSWER = json.dumps({"reasoning": "r", "answer": "a"})

DECODE_AS_VLLM = r"""
import json, sys
import numpy as np
from vllm.multimodal.video import VIDEO_LOADER_REGISTRY, get_video_loader_backend_for_processor

backend = get_video_loader_backend_for_processor("Qwen3VLVideoProcessor")  # what the server picks for a Qwen3-VL model
loader = VIDEO_LOADER_REGISTRY.load(backend)
data = open(sys.argv[1], "rb").read()
# num_frames -1: the serve command's --media-io-kwargs '{"video": {"num_frames": -1}}'; fps 2 is the loader's default
frames, meta = loader.load_bytes(data, num_frames=-1)
np.save(sys.argv[2], frames)
print(json.dumps({"backend": backend, "fps": meta["fps"], "frames_indices": meta["frames_indices"],
                  "total_num_frames": meta["total_num_frames"], "video_backend": meta["video_backend"]}))
"""


def textured_frames(count: int = 6, height: int = 64, width: int = 96, seed: int = 0) -> torch.Tensor:
    """uint8 (T, 3, H, W): a moving colour gradient plus per-pixel noise (what 4:2:0 and YUV rounding lose)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    frames = []
    for t in range(count):
        base = np.stack([(x * 255 // width + 20 * t) % 256, (y * 255 // height + 35 * t) % 256, (x + y + 50 * t) % 256], axis=-1)
        frames.append((base + rng.integers(-40, 41, base.shape)).clip(0, 255).astype(np.uint8))
    return torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).contiguous()


def as_thwc(frames: torch.Tensor) -> np.ndarray:
    return frames.permute(0, 2, 3, 1).contiguous().numpy()


def decode_pyav(data: bytes) -> np.ndarray:
    import io

    import av

    with av.open(io.BytesIO(data)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def decode_in_vllm(python: str, data: bytes, folder: Path) -> tuple[np.ndarray, dict]:
    mp4, out = folder / "sent.mp4", folder / "decoded.npy"
    mp4.write_bytes(data)
    done = subprocess.run([python, "-c", DECODE_AS_VLLM, str(mp4), str(out)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return np.load(out), json.loads(done.stdout.strip().splitlines()[-1])


def test_lossless_mp4_decodes_to_the_same_bytes():
    frames = textured_frames()
    decoded = decode_pyav(encode_frames_mp4(frames, Fraction(120, 119)))
    assert decoded.dtype == np.uint8 and decoded.shape == (6, 64, 96, 3)
    assert np.array_equal(decoded, as_thwc(frames))


def test_lossy_crf_mp4_does_not():
    frames = textured_frames()
    decoded = decode_pyav(encode_frames_mp4(frames, Fraction(1), crf=15))
    assert decoded.shape == (6, 64, 96, 3)
    diff = np.abs(decoded.astype(int) - as_thwc(frames).astype(int))
    assert diff.max() > 2 and not np.array_equal(decoded, as_thwc(frames))  # the server would see other pixels


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_server_loader_decodes_the_lossless_mp4_to_our_frames(vllm_python, tmp_path):  # noqa: F811
    frames = textured_frames(count=8, height=64, width=96)
    timing = video_timing([0, 17, 34, 51, 69, 86, 103, 119], 24.0)  # qwen-vl-utils' rounding: not quite even
    decoded, meta = decode_in_vllm(vllm_python, encode_frames_mp4(frames, timing.rate), tmp_path)
    assert meta["backend"] == "qwen3_vl" and meta["video_backend"] == "opencv"
    assert decoded.dtype == np.uint8 and decoded.shape == (8, 64, 96, 3)
    assert np.array_equal(decoded, as_thwc(frames)), "vLLM's loader does not see our bytes"
    assert meta["frames_indices"] == list(range(8)) and meta["total_num_frames"] == 8  # every frame kept, in order
    assert meta["fps"] == pytest.approx(float(timing.rate), rel=1e-6)  # frame k at k / rate: the sampled frame's time
    lossy, _ = decode_in_vllm(vllm_python, encode_frames_mp4(frames, timing.rate, crf=15), tmp_path)
    assert lossy.shape == decoded.shape and not np.array_equal(lossy, decoded)


class _Frames:
    """What MediaBuilder reads of a sampler's Frames."""

    def __init__(self, frames: torch.Tensor):
        self.frames, self.indices, self.source_fps = frames, list(range(0, 10 * len(frames), 10)), 10.0
        self.num_frames = len(frames)


class _Request:
    def __init__(self, frames: _Frames):
        self.frames, self.audio, self.key, self.video_path = frames, None, 0, None


@pytest.mark.parametrize("crf", [None, 15])
def test_the_record_says_which_mp4_was_sent(crf):
    builder = MediaBuilder(transport="video", frame_size=None, jpeg_quality=90, image_detail=None, video_url_base=None, fps=1.0,
                           max_frames=8, audio=False, audio_format="wav", keep=4, video_crf=crf)
    frames = _Frames(textured_frames())
    parts, fields, body = builder.parts_for(_Request(frames))
    [part] = parts
    url = part["video_url"]["url"]
    sent = fields["video_sent"]
    assert body == {} and sent["codec"] == mp4_codec(crf) and sent["url_bytes"] == len(url)
    data = base64.b64decode(url.split(",", 1)[1])
    assert sent["mp4_bytes"] == len(data)
    assert np.array_equal(decode_pyav(data), as_thwc(frames.frames)) == (crf is None)
    assert ("lossless" in sent["codec"]) == (crf is None)


@pytest.fixture(scope="module")
def ramp(tmp_path_factory) -> tuple[Path, Path]:
    from k9bench.video.ffmpeg import make_video

    folder = tmp_path_factory.mktemp("ramp")
    make_video(folder / "rampVid0001.mp4", duration=4, fps=10, width=96, height=64, extra_args=["-vf", "geq=lum='min(250,T*40)':cb=128:cr=128"])
    data = folder / "ramp.jsonl"
    data.write_text(json.dumps({"idx": 0, "video_url": "https://www.youtube.com/watch?v=rampVid0001", "scene_name": "rampVid0001",
                                "question_category": "posture analysis", "question": "how does it change?",
                                "options": {k: f"option {k}" for k in "ABCDE"}, "correct_answer": "A"}) + "\n", encoding="utf-8")
    return folder, data


@pytest.mark.parametrize("extra, codec", [((), "libx264rgb qp 0 rgb24 (lossless)"), (("--video_crf", "15"), "libx264 crf 15 yuv420p (lossy)")])
def test_a_run_records_the_codec(ramp, tmp_path, extra, codec):
    videos, data = ramp
    out = tmp_path / "raw.json"
    with FakeOpenAIServer(lambda req: ANSWER, model="served", engine="vllm") as server:
        code = eval_video_llm.main(["--backend", "openai", "--api_model", "served", "--base_url", server.base_url, "--dataset_name", str(data),
                                    "--video_dir", str(videos), "--output_file", str(out), "--max_frames", "4", "--min_pixels", "1024", "-q",
                                    *extra])
    assert code == EXIT_OK
    raw = json.loads(out.read_text())
    assert raw["inference"]["backend"]["video_codec"] == codec
    [rec] = raw["individual_results"]
    assert rec["video_sent"]["codec"] == codec and rec["video_sent"]["mp4_bytes"] > 0


@pytest.mark.parametrize("value", ["-1", "52", "x"])
def test_a_bad_video_crf_is_one_line(ramp, tmp_path, capsys, value):
    videos, data = ramp
    code = eval_video_llm.main(["--backend", "openai", "--api_model", "m", "--base_url", "http://127.0.0.1:9/v1", "--dataset_name", str(data),
                                "--video_dir", str(videos), "--output_file", str(tmp_path / "o.json"), "--video_crf", value])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "--video_crf" in err[-1] and "Traceback" not in "\n".join(err)
