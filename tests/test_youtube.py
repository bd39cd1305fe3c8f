import pytest

from k9bench.download.youtube import InvalidYouTubeURL, canonical_url, is_valid_scene_name, parse_youtube_id

ID = "dQw4w9WgXcQ"


@pytest.mark.parametrize(
    "url",
    [
        f"https://www.youtube.com/watch?v={ID}",
        f"http://youtube.com/watch?v={ID}",
        f"https://www.youtube.com/watch?v={ID}&t=42s&list=PL123",
        f"https://www.youtube.com/watch?feature=share&v={ID}",
        f"https://m.youtube.com/watch?v={ID}",
        f"https://music.youtube.com/watch?v={ID}&si=abc",
        f"https://youtu.be/{ID}",
        f"https://youtu.be/{ID}?t=10",
        f"youtu.be/{ID}",
        f"www.youtube.com/watch?v={ID}",
        f"https://www.youtube.com/shorts/{ID}",
        f"https://youtube.com/shorts/{ID}?feature=share",
        f"https://www.youtube.com/embed/{ID}",
        f"https://www.youtube.com/embed/{ID}?start=3",
        f"https://www.youtube.com/live/{ID}",
        f"https://www.youtube.com/v/{ID}",
        f"https://www.youtube-nocookie.com/embed/{ID}",
        f"  https://www.youtube.com/watch?v={ID}  ",
        "https://www.youtube.com/watch?v=a-b_c-d_e-f",
    ],
)
def test_accepts_every_url_form(url):
    got = parse_youtube_id(url)
    assert is_valid_scene_name(got)
    assert got == (ID if "a-b_c" not in url else "a-b_c-d_e-f")


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        f"https://vimeo.com/{ID}",
        f"https://www.youtube.com.evil.example/watch?v={ID}",
        f"https://evil.example/?v={ID}",
        f"ftp://youtube.com/watch?v={ID}",
        "https://www.youtube.com/watch?v=short",
        "https://www.youtube.com/watch?v=waytoolongid123",
        "https://www.youtube.com/watch?v=../../etc/pa",
        "https://www.youtube.com/watch?v=abc%2F..%2Fxyz",
        "https://www.youtube.com/channel/UC1234567890",
        "https://www.youtube.com/playlist?list=PL123",
        "https://youtu.be/",
        "https://www.youtube.com/shorts/",
        "https://www.youtube.com/embed/abc$defghij",
        f"https://[::1/watch?v={ID}",  # urlsplit's own ValueError must become InvalidYouTubeURL
    ],
)
def test_rejects_non_youtube_and_unsafe(url):
    with pytest.raises(InvalidYouTubeURL):
        parse_youtube_id(url)


@pytest.mark.parametrize("name,ok", [(ID, True), ("../../etc/x", False), ("a/b/c/d/e/f", False), ("", False), ("abcdefghij", False), ("abcdefghijk\n", False)])
def test_scene_name_safety(name, ok):
    assert is_valid_scene_name(name) is ok


def test_canonical_url_round_trip():
    assert parse_youtube_id(canonical_url(ID)) == ID
    with pytest.raises(InvalidYouTubeURL):
        canonical_url("../etc")
