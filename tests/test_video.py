"""k9bench.video and k9bench.video.cache: sampling rules, errors, decoder choice, the frame caches."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest
import torch

from k9bench.video.ffmpeg import make_video, run_ffmpeg
from k9bench.video.cache import FrameCache, SamplingSettings
from k9bench.video.sampling import (
    DECODERS,
    DEFAULT_DECODER,
    DEFAULT_MIN_PIXELS,
    DecoderUnavailable,
    Frames,
    VideoError,
    check_decoder,
    default_min_pixels,
    frame_indices,
    resized_size,
    sample,
)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """Small generated clips plus broken files, made once for this module."""
    d = tmp_path_factory.mktemp("clips")
    out = {
        "short": make_video(d / "short.mp4", duration=5, fps=24, width=320, height=240),
        "av": make_video(d / "av.mp4", duration=4, fps=25, width=256, height=144, audio=True),
    }
    audio = d / "audio_only.mp4"
    run_ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000", "-t", "2", "-c:a", "aac", str(audio)])
    out["audio_only"] = audio
    empty = d / "empty.mp4"
    empty.write_bytes(b"")
    out["empty"] = empty
    garbage = d / "garbage.mp4"
    garbage.write_bytes(bytes((i * 97 + 13) % 256 for i in range(40_000)))
    out["garbage"] = garbage
    text = d / "notes.mp4"
    text.write_text("this is not a video\n" * 50)
    out["text"] = text
    data = out["short"].read_bytes()
    half = d / "truncated_half.mp4"  # moov first (faststart), media data cut in half
    half.write_bytes(data[: len(data) // 2])
    out["truncated_half"] = half
    tail = d / "truncated_tail.mp4"  # only the last bytes missing
    tail.write_bytes(data[: len(data) - 200])
    out["truncated_tail"] = tail
    nofast = make_video(d / "moov_last.mp4", duration=5, fps=24, width=320, height=240, faststart=False).read_bytes()
    head = d / "truncated_no_moov.mp4"  # moov at the end, lost
    head.write_bytes(nofast[: len(nofast) // 2])
    out["truncated_no_moov"] = head
    return out


# --------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    "total, fps, max_frames, expected",
    [
        # 10 s at 25 fps, 1 fps sampling -> 10 frames over 0..249
        (250, 25.0, 32, [0, 28, 55, 83, 111, 138, 166, 194, 221, 249]),
        # 3 s -> 3 frames, raised to the minimum of 4
        (72, 24.0, 32, [0, 24, 47, 71]),
        # 7 s -> 7 frames, floored to an even 6
        (210, 30.0, 32, [0, 42, 84, 125, 167, 209]),
        # 100 s -> capped at max_frames
        (3000, 30.0, 8, [0, 428, 857, 1285, 1714, 2142, 2571, 2999]),
    ],
)
def test_frame_indices_follow_qwen_rules(total, fps, max_frames, expected):
    assert frame_indices(total, fps, 1.0, max_frames) == expected


def test_frame_count_is_even_and_capped():
    for seconds in (4, 5, 9, 31, 33, 61, 600):
        n = len(frame_indices(int(seconds * 30), 30.0, 1.0, 32))
        assert n % 2 == 0 and 4 <= n <= 32, (seconds, n)


@pytest.mark.parametrize(
    "h, w, expected",
    [
        (720, 1280, (280, 504)),  # 16:9 above max_pixels -> scaled down, multiples of 28
        (1080, 1920, (280, 504)),
        (1280, 720, (504, 280)),  # portrait
        (240, 320, (280, 392)),  # 252x308 is below min_pixels (100352) -> scaled up, ceil to 28
        (360, 420, (336, 420)),  # 364x420 rounds above max_pixels -> floor to 28
    ],
)
def test_resized_size_table(h, w, expected):
    rh, rw = resized_size(h, w, 32, 360 * 420, None)
    assert (rh, rw) == expected
    assert rh % 28 == 0 and rw % 28 == 0
    assert DEFAULT_MIN_PIXELS <= rh * rw <= 360 * 420 or (h * w < DEFAULT_MIN_PIXELS)


def test_default_min_pixels_matches_qwen_vl_utils():
    from qwen_vl_utils import vision_process as vp

    assert DEFAULT_MIN_PIXELS == vp.VIDEO_MIN_TOKEN_NUM * (14 * vp.SPATIAL_MERGE_SIZE) ** 2 == 100352
    assert default_min_pixels(16) == 128 * 32 * 32


# --------------------------------------------------------------------------- sample()


@pytest.mark.parametrize("decoder", DECODERS)
def test_sample_returns_consistent_frames(clips, decoder):
    f = sample(clips["short"], decoder=decoder)
    assert isinstance(f, Frames)
    assert f.decoder == decoder
    assert f.frames.dtype == torch.uint8 and f.frames.shape == (len(f.indices), 3, f.height, f.width)
    assert f.total_frames == 120 and f.source_fps == pytest.approx(24.0)
    assert f.indices == frame_indices(120, 24.0, 1.0, 32) and len(f.indices) == 4
    assert f.duration == pytest.approx(5.0)
    assert f.sample_fps == pytest.approx(4 / 120 * 24)
    assert (f.source_height, f.source_width) == (240, 320)
    # consecutive sampled frames differ (the pattern moves), so these are real frames
    assert not torch.equal(f.frames[0], f.frames[1])
    meta = f.processor_metadata()
    assert meta == {"fps": 24.0, "frames_indices": f.indices, "total_num_frames": 120, "video_backend": decoder}
    assert f.timestamps() == [i / 24.0 for i in f.indices]


def test_decoders_agree(clips):
    a = sample(clips["av"], decoder="decord")
    b = sample(clips["av"], decoder="pyav")
    assert a.indices == b.indices and a.frames.shape == b.frames.shape
    assert (a.frames.float() - b.frames.float()).abs().mean() <= 1.0


def test_max_frames_and_pixels_are_honoured(clips):
    f = sample(clips["short"], fps=4.0, max_frames=6, max_pixels=200 * 200, min_pixels=28 * 28 * 4)
    assert len(f.indices) == 6
    assert f.height * f.width <= 200 * 200 and f.height % 28 == 0 and f.width % 28 == 0


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize(
    "name, reason, words",
    [
        ("missing", "missing_video", "not found"),
        ("empty", "decode_error", "zero-length"),
        ("garbage", "decode_error", "not a readable video"),
        ("text", "decode_error", "not a readable video"),
        ("audio_only", "decode_error", "no video stream"),
        ("truncated_half", "decode_error", "truncated"),
        ("truncated_tail", "decode_error", "truncated"),
        ("truncated_no_moov", "decode_error", "truncated"),
    ],
)
def test_bad_files_raise_clear_errors(clips, tmp_path, decoder, name, reason, words):
    path = clips.get(name, tmp_path / "missing.mp4")
    with pytest.raises(VideoError) as info:
        sample(path, decoder=decoder)
    err = info.value
    assert err.reason_class == reason
    assert err.path == str(path)
    assert str(path) in str(err)
    assert words in str(err)


def test_directory_is_not_a_video(tmp_path):
    with pytest.raises(VideoError, match="not a regular file") as info:
        sample(tmp_path)
    assert info.value.reason_class == "decode_error"


def test_unknown_decoder_stops():
    with pytest.raises(DecoderUnavailable, match="unknown decoder 'opencv'"):
        check_decoder("opencv")


@pytest.mark.parametrize("decoder, module", [("decord", "decord"), ("pyav", "av")])
def test_decoder_that_cannot_load_stops_without_fallback(monkeypatch, clips, decoder, module):
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError
    with pytest.raises(DecoderUnavailable, match="no fallback") as info:
        sample(clips["short"], decoder=decoder)
    assert repr(decoder) in str(info.value)
    with pytest.raises(DecoderUnavailable):
        FrameCache(decoder=decoder)


def test_default_decoder_is_documented_choice():
    assert DEFAULT_DECODER == "decord" and DEFAULT_DECODER in DECODERS


# --------------------------------------------------------------------------- FrameCache (memory)


def _count_samples(monkeypatch) -> list[str]:
    import k9bench.video.cache as fc

    calls: list[str] = []
    real = fc.sample

    def counting(path, **kw):
        calls.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(fc, "sample", counting)
    return calls


def test_cache_decodes_each_video_once(monkeypatch, clips):
    calls = _count_samples(monkeypatch)
    cache = FrameCache(max_frames=8)
    first = cache.get(clips["short"])
    for _ in range(4):
        assert cache.get(clips["short"]) is first
    cache.get(clips["av"])
    assert calls == [str(clips["short"]), str(clips["av"])]
    assert cache.stats.decodes == 2 and cache.stats.memory_hits == 4
    assert len(cache) == 2
    cache.release(clips["short"])
    assert len(cache) == 1
    cache.release(clips["short"])  # releasing twice is harmless
    cache.get(clips["short"])
    assert len(calls) == 3


def test_concurrent_gets_of_one_video_decode_it_once(monkeypatch, clips):
    """Two threads asking for the same video at once (or a get racing a prefetch) share one decode."""
    import threading
    import time

    import k9bench.video.cache as fc

    calls: list[str] = []
    real = fc.sample

    def slow(path, **kw):
        calls.append(str(path))
        time.sleep(0.4)  # long enough for the other threads to arrive mid-decode
        return real(path, **kw)

    monkeypatch.setattr(fc, "sample", slow)
    cache = FrameCache(max_frames=4)
    barrier = threading.Barrier(3)
    got: list = []

    def worker():
        barrier.wait()
        got.append(cache.get(clips["short"]))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert calls == [str(clips["short"])]
    assert len(got) == 3 and got[0] is got[1] is got[2]
    assert cache.stats.decodes == 1
    cache.prefetch(clips["short"])  # already in memory: nothing to do
    assert calls == [str(clips["short"])]
    # a failing decode is shared the same way, and the next get raises without a new attempt
    errors: list = []

    def bad():
        try:
            cache.get(clips["garbage"])
        except VideoError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=bad) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(errors) == 2 and calls.count(str(clips["garbage"])) == 1 and cache.stats.failures == 1


def test_prefetch_loads_in_background(monkeypatch, clips):
    calls = _count_samples(monkeypatch)
    with FrameCache() as cache:
        cache.prefetch(clips["short"])
        cache.prefetch(clips["short"])  # already pending: no second job
        cache.prefetch(clips["garbage"])
        cache.prefetch(clips["short"].with_name("absent.mp4"))  # left to get()
        frames = cache.get(clips["short"])
        assert cache.get(clips["short"]) is frames
        with pytest.raises(VideoError):
            cache.get(clips["garbage"])
        assert sorted(calls) == sorted([str(clips["short"]), str(clips["garbage"])])
        assert cache.stats.decodes == 1 and cache.stats.failures == 1
        cache.prefetch(clips["av"])
        cache.release(clips["av"])  # a pending job is dropped with it
        assert len(cache) == 2
    assert len(cache) == 0


def test_cache_key_includes_size_and_mtime(monkeypatch, tmp_path):
    calls = _count_samples(monkeypatch)
    path = make_video(tmp_path / "v.mp4", duration=2, fps=24, width=160, height=120)
    cache = FrameCache()
    a = cache.get(path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    b = cache.get(path)
    assert len(calls) == 2 and a is not b


def test_cache_remembers_failures(monkeypatch, clips):
    calls = _count_samples(monkeypatch)
    cache = FrameCache()
    for _ in range(3):
        with pytest.raises(VideoError) as info:
            cache.get(clips["garbage"])
        assert info.value.reason_class == "decode_error"
    assert len(calls) == 1 and cache.stats.failures == 1


def test_cache_missing_file(tmp_path):
    with pytest.raises(VideoError) as info:
        FrameCache().get(tmp_path / "nope.mp4")
    assert info.value.reason_class == "missing_video" and "nope.mp4" in str(info.value)


def test_settings_object_or_keywords():
    s = SamplingSettings(max_frames=16, decoder="pyav")
    assert FrameCache(s).settings == FrameCache(max_frames=16, decoder="pyav").settings
    with pytest.raises(TypeError):
        FrameCache(s, max_frames=8)
    assert FrameCache().summary()["settings"]["decoder"] == DEFAULT_DECODER


# --------------------------------------------------------------------------- FrameCache (disk)


def test_disk_cache_round_trip(monkeypatch, clips, tmp_path):
    calls = _count_samples(monkeypatch)
    disk = tmp_path / "frames"
    first = FrameCache(disk_dir=disk).get(clips["short"])
    entries = list(disk.iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".npz"  # no temporary file left behind
    second_cache = FrameCache(disk_dir=disk)
    second = second_cache.get(clips["short"])
    assert len(calls) == 1
    assert second.from_disk_cache and not first.from_disk_cache
    assert second_cache.stats.disk_hits == 1 and second_cache.stats.decodes == 0
    assert torch.equal(first.frames, second.frames)
    for attr in ("indices", "source_fps", "total_frames", "sample_fps", "height", "width", "duration", "decoder"):
        assert getattr(first, attr) == getattr(second, attr), attr
    # other sampling settings or decoder -> a separate entry
    FrameCache(disk_dir=disk, max_frames=2).get(clips["short"])
    FrameCache(disk_dir=disk, decoder="pyav").get(clips["short"])
    assert len(list(disk.glob("*.npz"))) == 3 and len(calls) == 3


def test_disk_entries_get_the_umask_mode_not_0600(clips, tmp_path):
    """A cache shared by a group's runs: entries are created like plain files (0666 minus umask), not private."""
    umask = os.umask(0)
    os.umask(umask)
    disk = tmp_path / "frames"
    cache = FrameCache(disk_dir=disk)
    cache.get(clips["short"])
    mode = cache.entry_path(clips["short"]).stat().st_mode & 0o777
    assert mode == 0o666 & ~umask


def test_stale_temporary_entries_of_killed_runs_are_removed(tmp_path):
    import time

    disk = tmp_path / "frames"
    disk.mkdir()
    old = disk / ".0123456789abcdef.x1y2z3.tmp"  # what _write_entry's mkstemp names look like
    old.write_bytes(b"half an entry")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    fresh = disk / ".fedcba9876543210.a1b2c3.tmp"  # another run writing right now
    fresh.write_bytes(b"being written")
    FrameCache(disk_dir=disk)
    assert not old.exists() and fresh.exists()


def _flip_byte(path: Path, offset_from_end: int) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    ["truncate", "garbage", "pixel_flip", "empty"],
)
def test_damaged_disk_entry_is_redecoded_and_logged(monkeypatch, clips, tmp_path, caplog, damage):
    disk = tmp_path / "frames"
    good = FrameCache(disk_dir=disk).get(clips["short"])
    entry = FrameCache(disk_dir=disk).entry_path(clips["short"])
    assert entry is not None and entry.exists()
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"not an npz" * 100)
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        # a byte inside the stored pixels (the first array of the uncompressed archive)
        raw = bytearray(data)
        raw[2000] ^= 0xFF
        entry.write_bytes(bytes(raw))
    calls = _count_samples(monkeypatch)
    cache = FrameCache(disk_dir=disk)
    with caplog.at_level(logging.WARNING, logger="k9bench.video.cache"):
        again = cache.get(clips["short"])
    assert calls == [str(clips["short"])]
    assert cache.stats.damaged == 1 and cache.stats.decodes == 1
    assert "damaged" in caplog.text and entry.name in caplog.text
    assert torch.equal(again.frames, good.frames) and not again.from_disk_cache
    # the entry was rewritten and is good again
    third = FrameCache(disk_dir=disk)
    assert third.get(clips["short"]).from_disk_cache and third.stats.damaged == 0


def test_disk_entry_for_other_key_is_rejected(clips, tmp_path, caplog):
    disk = tmp_path / "frames"
    FrameCache(disk_dir=disk).get(clips["short"])
    other = FrameCache(disk_dir=disk)
    entry_short = other.entry_path(clips["short"])
    entry_av = other.entry_path(clips["av"])
    entry_av.write_bytes(entry_short.read_bytes())  # an entry copied under the wrong name
    with caplog.at_level(logging.WARNING, logger="k9bench.video.cache"):
        f = other.get(clips["av"])
    assert "key mismatch" in caplog.text and other.stats.damaged == 1
    assert f.total_frames == 100  # the av clip: 4 s at 25 fps


def test_the_video_package_reexports_nothing():
    """Callers import each name from the module that defines it (issue 28: no re-export shims)."""
    import k9bench.video as video

    assert not hasattr(video, "FrameCache") and not hasattr(video, "sample")


def test_unwritable_disk_cache_is_logged_not_fatal(monkeypatch, clips, tmp_path, caplog):
    import numpy as np

    def full_disk(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    disk = tmp_path / "frames"
    cache = FrameCache(disk_dir=disk)
    with caplog.at_level(logging.WARNING, logger="k9bench.video.cache"):
        f = cache.get(clips["short"])
    assert f.num_frames == 4
    assert cache.stats.disk_write_errors == 1 and "no space left" in caplog.text.lower()
    assert list(disk.iterdir()) == []  # the temporary file was removed


def test_unusable_disk_cache_dir_is_logged_recorded_and_not_fatal(monkeypatch, clips, tmp_path, caplog):
    """A --frame_cache_dir that is a file (or cannot be created) loses only the reuse: warned, recorded, frames still given."""
    calls = _count_samples(monkeypatch)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger="k9bench.video.cache"):
        cache = FrameCache(disk_dir=blocker)
    assert "cannot be used" in caplog.text and "not_a_dir" in caplog.text
    assert cache.get(clips["short"]).num_frames == 4 and calls == [str(clips["short"])]
    summary = cache.summary()
    assert summary["frame_cache_dir"] == str(blocker) and "FileExistsError" in summary["frame_cache_dir_error"]
    assert cache.stats.disk_writes == 0 and blocker.read_text() == "x"
    assert FrameCache(disk_dir=tmp_path / "ok").summary()["frame_cache_dir_error"] is None


def test_pixel_bounds_below_the_minimum_are_a_clear_settings_error(tmp_path):
    from k9bench.video.sampling import check_pixel_bounds, sample

    with pytest.raises(ValueError, match="max_pixels=16384 is below min_pixels"):
        sample(tmp_path / "never_opened.mp4", max_pixels=16384)
    check_pixel_bounds(16384, 4096)  # a smaller explicit min_pixels makes it valid


# --------------------------------------------------------------------------- module layering, exact frame size


def _k9bench_imports(module_file: Path) -> set[str]:
    """Every k9bench module a file imports, at any depth (function-level imports included)."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(module_file.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("k9bench"):
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("k9bench"))
    return names


def test_frame_modules_import_one_way():
    """video.sampling <- video.cache <- video.policy: no lower module imports a higher one (issue 12)."""
    import k9bench

    pkg = Path(k9bench.__file__).parent / "video"
    sampling = _k9bench_imports(pkg / "sampling.py")
    cache = _k9bench_imports(pkg / "cache.py")
    audio = _k9bench_imports(pkg / "audio.py")
    assert not {n for n in sampling if n.startswith("k9bench.video.")}
    assert not {n for n in cache if n in ("k9bench.video.policy",)}
    assert not {n for n in audio if n.startswith("k9bench.video.") and not n.startswith("k9bench.video.ffmpeg")}


def test_defaults_are_defined_once():
    import k9bench

    pkg = Path(k9bench.__file__).parent
    for name in ("DEFAULT_MAX_FRAMES", "DEFAULT_FPS", "DEFAULT_MAX_PIXELS", "DEFAULT_DECODER"):
        defining = [p.name for p in pkg.rglob("*.py") if f"\n{name} = " in p.read_text()]
        assert defining == ["sampling.py"], (name, defining)


def test_exact_frame_size_replaces_the_size_rule(clips):
    import k9bench.video.sampling as fs

    f = sample(clips["short"], max_frames=4, frame_size=(56, 72))
    assert (f.height, f.width) == (56, 72) and tuple(f.frames.shape[-2:]) == (56, 72)
    assert f.indices == sample(clips["short"], max_frames=4).indices
    assert f.settings["frame_size"] == [56, 72]
    with pytest.raises(ValueError, match="frame_size"):
        fs.sample(clips["short"], frame_size=(0, 10))


def test_cache_keys_without_frame_size_are_unchanged(tmp_path, clips):
    """Entries written before ``frame_size`` existed keep their keys (the field is left out when None)."""
    import hashlib
    import json

    from k9bench.video.cache import CACHE_FORMAT, _file_id

    cache = FrameCache(disk_dir=tmp_path / "c")
    fid = _file_id(clips["short"])
    old_settings = {"fps": 1.0, "max_frames": 32, "max_pixels": 360 * 420, "min_pixels": None, "image_patch_size": 14,
                    "decoder": DEFAULT_DECODER}
    old_key = hashlib.sha256(json.dumps({"format": CACHE_FORMAT, "file": list(fid), "settings": old_settings}, sort_keys=True).encode()).hexdigest()
    assert cache.entry_key(fid) == old_key
    sized = FrameCache(disk_dir=tmp_path / "c", frame_size=(56, 56))
    assert sized.entry_key(fid) != old_key
    assert sized.get(clips["short"]).height == 56
    assert FrameCache(disk_dir=tmp_path / "c", frame_size=(56, 56)).get(clips["short"]).from_disk_cache
