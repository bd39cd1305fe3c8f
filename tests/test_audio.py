"""k9bench.video.audio and FrameCache.get_audio: a video's soundtrack, read once, at the processor's rate."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from k9bench.video.audio import AudioError, NoAudioStream, read_audio
from k9bench.video.ffmpeg import make_video, run_ffmpeg
from k9bench.video.cache import FrameCache


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("audio_clips")
    return {
        "sine": make_video(d / "sine.mp4", duration=3, fps=10, width=64, height=48, audio="sine"),
        "noise": make_video(d / "noise.webm", duration=2.5, fps=10, width=64, height=48, audio="noise", audio_rate=44100),
        "legacy": make_video(d / "legacy.mp4", duration=2, fps=10, width=64, height=48, audio=True),
        "silent": make_video(d / "silent.mp4", duration=2, fps=10, width=64, height=48),
    }


@pytest.mark.parametrize("name, rate, seconds", [("sine", 16000, 3.0), ("sine", 24000, 3.0), ("noise", 16000, 2.5), ("legacy", 16000, 2.0)])
def test_soundtrack_has_the_asked_rate_and_the_video_length(clips, name, rate, seconds):
    audio = read_audio(clips[name], rate)
    assert audio.sampling_rate == rate and audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert abs(audio.num_samples - seconds * rate) <= rate * 0.03  # the codec may pad a few ms
    assert audio.duration == pytest.approx(seconds, abs=0.03)
    assert 0.05 < float(np.abs(audio.samples).max()) <= 1.0  # not silence


def test_sine_is_a_440_hz_tone(clips):
    audio = read_audio(clips["sine"], 16000)
    spectrum = np.abs(np.fft.rfft(audio.samples[1600:-1600]))
    peak_hz = np.argmax(spectrum) * 16000 / (audio.num_samples - 3200)
    assert peak_hz == pytest.approx(440, abs=2)


def test_video_without_audio_stream_raises_named_error(clips):
    with pytest.raises(NoAudioStream) as err:
        read_audio(clips["silent"], 16000)
    assert err.value.reason_class == "no_audio_stream"
    assert str(clips["silent"]) in str(err.value) and err.value.path == str(clips["silent"])
    assert isinstance(err.value, AudioError)


def test_missing_and_broken_files(clips, tmp_path):
    with pytest.raises(AudioError) as err:
        read_audio(tmp_path / "nope.mp4", 16000)
    assert err.value.reason_class == "missing_video" and "nope.mp4" in str(err.value)
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all" * 10)
    with pytest.raises(AudioError) as err:
        read_audio(junk, 16000)
    assert not isinstance(err.value, NoAudioStream) and err.value.reason_class == "audio_decode_error"
    assert "junk.mp4" in str(err.value)
    with pytest.raises(ValueError):
        read_audio(clips["sine"], 0)


def test_audio_only_file_gives_audio(tmp_path):
    """Only the soundtrack is read: a file without video still has one."""
    path = tmp_path / "only.m4a"
    run_ffmpeg(["-f", "lavfi", "-i", "sine=frequency=300:sample_rate=8000", "-t", "1", "-c:a", "aac", str(path)])
    assert read_audio(path, 16000).duration == pytest.approx(1.0, abs=0.03)


def test_frame_cache_reads_each_soundtrack_once_and_remembers_failures(monkeypatch, clips):
    import k9bench.video.cache as fc

    calls = []
    real = fc.read_audio
    monkeypatch.setattr(fc, "read_audio", lambda path, rate: calls.append((str(path), rate)) or real(path, rate))
    cache = FrameCache()
    a = cache.get_audio(clips["sine"], 16000)
    assert cache.get_audio(clips["sine"], 16000) is a
    cache.get_audio(clips["sine"], 24000)  # another rate is another entry
    for _ in range(2):
        with pytest.raises(NoAudioStream, match="silent.mp4"):
            cache.get_audio(clips["silent"], 16000)
    assert calls == [(str(clips["sine"]), 16000), (str(clips["sine"]), 24000), (str(clips["silent"]), 16000)]
    assert cache.stats.audio_reads == 2 and cache.stats.audio_failures == 1
    cache.release(clips["sine"])
    cache.get_audio(clips["sine"], 16000)
    assert len(calls) == 4  # released with the frames, read again after
    with pytest.raises(AudioError) as err:
        cache.get_audio(clips["sine"].with_name("gone.mp4"), 16000)
    assert err.value.reason_class == "missing_video"


def test_disk_store_round_trip_and_damage(monkeypatch, clips, tmp_path, caplog):
    import k9bench.video.cache as fc

    disk = tmp_path / "cache"
    first = FrameCache(disk_dir=disk).get_audio(clips["noise"], 16000)
    entry = FrameCache(disk_dir=disk).audio_entry_path(clips["noise"], 16000)
    assert entry.is_file() and entry.name.endswith(".audio.npz")
    monkeypatch.setattr(fc, "read_audio", lambda *a: pytest.fail("read again although stored"))
    second_cache = FrameCache(disk_dir=disk)
    second = second_cache.get_audio(clips["noise"], 16000)
    assert second.from_disk_cache and second_cache.stats.audio_disk_hits == 1
    np.testing.assert_array_equal(first.samples, second.samples)
    monkeypatch.undo()
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    third = FrameCache(disk_dir=disk)
    with caplog.at_level(logging.WARNING, logger="k9bench.video.cache"):
        again = third.get_audio(clips["noise"], 16000)
    assert "damaged" in caplog.text and third.stats.damaged == 1 and third.stats.audio_reads == 1
    np.testing.assert_array_equal(first.samples, again.samples)


def test_make_video_default_output_is_unchanged(monkeypatch, tmp_path):
    """No soundtrack by default, and audio=True still writes the same 440 Hz / 16 kHz sine as before."""
    import k9bench.video.ffmpeg as ff

    seen = []
    def fake_run(args, **kw):
        seen.append(args)
        Path(args[-1]).write_bytes(b"")  # the temporary output make_video renames

    monkeypatch.setattr(ff, "run_ffmpeg", fake_run)
    make_video(tmp_path / "x.mp4")
    make_video(tmp_path / "x.mp4", audio=True)
    assert "sine" not in " ".join(seen[0]) and "-c:a" not in seen[0]
    assert "sine=frequency=440:sample_rate=16000" in seen[1]
    with pytest.raises(ValueError, match="unknown soundtrack"):
        make_video(tmp_path / "x.mp4", audio="music")


@pytest.mark.slow
def test_audio_reaching_the_processor_has_the_expected_length_and_rate(tmp_path, clips):
    """Through the tiny Qwen2.5-Omni processor: the feature extractor gets 3 s at 16 kHz, mono."""
    from transformers import AutoProcessor

    from k9bench.video.policy import policy_for
    from k9bench.tiny_model import build_tiny

    processor = AutoProcessor.from_pretrained(build_tiny("qwen2_5_omni", tmp_path / "omni"))
    policy = policy_for(processor)
    fe = processor.feature_extractor
    seen = []
    real_call = type(fe).__call__

    def spy(self, raw_speech, *args, **kwargs):
        seen.append(([np.asarray(x).shape for x in raw_speech], kwargs.get("sampling_rate")))
        return real_call(self, raw_speech, *args, **kwargs)

    type(fe).__call__ = spy
    try:
        cache = FrameCache(max_frames=4, **policy.sampling_overrides())
        frames = cache.get(clips["sine"])
        audio = cache.get_audio(clips["sine"], policy.audio_sampling_rate)
        text = processor.apply_chat_template([{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "hi"}]}],
                                             tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[text], return_tensors="pt", **policy.processor_kwargs([frames], [audio]))
    finally:
        type(fe).__call__ = real_call
    assert seen == [([(48000,)], 16000)]
    assert int(inputs["feature_attention_mask"].sum()) == 300  # 3 s of 10 ms mel frames


@pytest.mark.parametrize("fmt", ["wav", "mp3"])
def test_input_audio_part_for_openai_compatible_endpoints(clips, fmt, tmp_path):
    import base64

    from k9bench.video.audio import encode_audio, input_audio_part

    audio = read_audio(clips["sine"], 16000)
    part = input_audio_part(audio, fmt)
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == fmt
    blob = base64.b64decode(part["input_audio"]["data"])
    assert blob == encode_audio(audio, fmt)
    path = tmp_path / f"back.{fmt}"
    path.write_bytes(blob)
    back = read_audio(path, 16000)  # decodes to the same length and level
    assert back.duration == pytest.approx(audio.duration, abs=0.1)
    assert float(np.abs(back.samples).max()) == pytest.approx(float(np.abs(audio.samples).max()), rel=0.1)
    with pytest.raises(ValueError, match="unknown audio format"):
        encode_audio(audio, "flac")


def test_prefetch_reads_the_soundtrack_in_background(monkeypatch, clips):
    import threading

    import k9bench.video.cache as fc

    threads = []
    real = fc.read_audio
    monkeypatch.setattr(fc, "read_audio", lambda path, rate: threads.append((threading.current_thread().name, Path(path).name)) or real(path, rate))
    with FrameCache() as cache:
        cache.prefetch(clips["sine"], audio_sampling_rate=16000)
        cache.prefetch(clips["silent"])
        assert cache.get(clips["silent"]).num_frames > 0  # one worker, in order: the sine soundtrack was read before
        assert threads == [("k9bench-frames_0", "sine.mp4")]
        assert cache.get_audio(clips["sine"], 16000).num_samples == 48000
        cache.prefetch(clips["silent"], audio_sampling_rate=16000)
        for _ in range(2):
            with pytest.raises(NoAudioStream):
                cache.get_audio(clips["silent"], 16000)
        assert cache.stats.audio_reads == 1 and cache.stats.audio_failures == 1
    assert [name for _, name in threads] == ["sine.mp4", "silent.mp4"]
