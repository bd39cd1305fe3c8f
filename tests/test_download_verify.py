"""k9bench.download.verify: which files count as a good {scene}.mp4, table-driven."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from k9bench.video.ffmpeg import make_video
from k9bench.download.verify import check_box_layout, probe_media, read_top_level_boxes, verify_video

SMALL = {"duration": 1.0, "fps": 10, "width": 96, "height": 64}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("verify")
    good = make_video(folder / "good.mp4", **SMALL)
    data = good.read_bytes()
    out = {
        "good": good,
        "audio": make_video(folder / "audio.mp4", audio=True, **SMALL),
        "moov_at_end": make_video(folder / "end.mp4", faststart=False, **SMALL),
        "fragmented": make_video(folder / "frag.mp4", fragmented=True, **SMALL),
        "webm": make_video(folder / "clip.webm", **SMALL),
    }
    (folder / "truncated.mp4").write_bytes(data[: len(data) * 2 // 3])
    out["truncated"] = folder / "truncated.mp4"
    # Truncated, with the mdat size rewritten to 0 ("runs to the end of the file"): the
    # box layout looks fine, so only the packet count against the header can catch it.
    boxes = read_top_level_boxes(good)
    mdat_offset = next(off for kind, off, _ in boxes if kind == "mdat")
    short = bytearray(data[: mdat_offset + (len(data) - mdat_offset) // 3])
    short[mdat_offset:mdat_offset + 4] = struct.pack(">I", 0)
    (folder / "short.mp4").write_bytes(bytes(short))
    out["short"] = folder / "short.mp4"
    (folder / "garbage.mp4").write_bytes(os.urandom(4096))
    out["garbage"] = folder / "garbage.mp4"
    (folder / "fake.mp4").write_bytes(b"\x00\x00\x00\x10ftypisom\x00\x00\x02\x00" + b"\x00\x00\x00\x08free")
    out["fake"] = folder / "fake.mp4"
    (folder / "empty.mp4").write_bytes(b"")
    out["empty"] = folder / "empty.mp4"
    return out


@pytest.mark.parametrize(
    "name, ok, needle",
    [
        ("good", True, None),
        ("audio", True, None),
        ("moov_at_end", False, "not faststart"),
        ("fragmented", False, "fragmented"),
        ("webm", False, "not an mp4 file"),
        ("truncated", False, "truncated"),
        ("short", False, "video packets of the 10 the header promises"),
        ("garbage", False, "not an mp4 file"),
        ("fake", False, "no 'moov' box"),
        ("empty", False, "empty file"),
    ],
)
def test_verify_video(files, name, ok, needle):
    result = verify_video(files[name])
    assert result.ok is ok, result.reason
    if ok:
        assert result.reason is None
        assert result.packets >= result.header_frames == 10
        assert (result.width, result.height, result.video_codec) == (96, 64, "h264")
        assert result.duration > 0
    else:
        assert needle in result.reason
    assert result.only_not_faststart is (name == "moov_at_end")


def test_a_folder_is_reported_not_raised(tmp_path):
    result = verify_video(tmp_path)
    assert result.ok is False and "cannot read the file" in result.reason


def test_audio_stream_is_reported(files):
    assert verify_video(files["audio"]).has_audio is True
    assert verify_video(files["good"]).has_audio is False


@pytest.mark.parametrize("name, ok", [("good", True), ("moov_at_end", True), ("fragmented", True), ("webm", True), ("garbage", False), ("empty", False)])
def test_probe_media_accepts_any_container(files, name, ok):
    assert probe_media(files[name])[0] is ok


def test_box_layout_of_a_faststart_file(files):
    types, problem = check_box_layout(files["good"])
    assert problem is None
    assert types[0] == "ftyp" and types.index("moov") < types.index("mdat")
