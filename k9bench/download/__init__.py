"""Fetching K9-Bench videos: the download stage, its settings and checks, yt-dlp, the manifest, verification."""
