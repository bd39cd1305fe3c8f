"""A yt-dlp extractor plugin for the tests only: it answers real YouTube URL forms
(watch?v=, youtu.be/, shorts/, embed/, live/, v/) from the local video server
(tests/video_server.py) whose base URL is in the K9TEST_SERVER environment variable.

It is loaded only by the tests (tests/video_server.py: install_test_extractor), which also
restrict yt-dlp to this extractor, so the real YouTube extractor can never run.
"""

from __future__ import annotations

import os

from yt_dlp.extractor.common import InfoExtractor
from yt_dlp.utils import ExtractorError

_ERRORS = {
    "unavailable": "Video unavailable. This video is no longer available",
    "private": "Private video. Sign in if you've been granted access to this video",
    "bot": "Sign in to confirm you're not a bot. Use --cookies-from-browser or --cookies for the authentication.",
}


class K9TestIE(InfoExtractor):
    IE_NAME = "k9test"
    IE_DESC = "K9-Bench test stand-in for YouTube (local server)"
    _VALID_URL = (
        r"https?://(?:(?:www\.|m\.|music\.)?youtube(?:-nocookie)?\.com/(?:watch\?(?:.*&)?v=|shorts/|embed/|live/|v/)"
        r"|(?:www\.)?youtu\.be/)(?P<id>[A-Za-z0-9_-]{11})"
    )

    def _real_extract(self, url):
        video_id = self._match_id(url)
        base = os.environ.get("K9TEST_SERVER")
        if not base:
            raise ExtractorError("K9TEST_SERVER is not set (test plugin)", expected=True)
        meta = self._download_json(f"{base}/meta/{video_id}", video_id, note="Fetching test metadata")
        error = meta.get("error")
        if error:
            raise ExtractorError(_ERRORS.get(error, error), expected=True, video_id=video_id)
        if meta.get("warning"):
            self.report_warning(meta["warning"], video_id)
        return {
            "id": video_id,
            "title": meta.get("title") or video_id,
            "formats": meta["formats"],
        }
