"""k9bench.settings.with_values: typed values set by flag or field on a stage's frozen config; an unknown flag is one line."""

import pytest

from k9bench.download.stage import config_from_argv
from k9bench.settings import UnknownSetting, with_values


def test_typed_download_config_equals_the_parsed_record():
    argv = ["--dataset_name", "demo", "--split", "test", "--output_dir", "vids", "--max_samples", "3"]
    typed = with_values(config_from_argv([]), {"--dataset_name": "demo", "--split": "test", "--output_dir": "vids",
                                               "--max_samples": 3, "argv": tuple(argv)})
    assert typed == config_from_argv(argv)
    assert isinstance(typed.job.max_samples, int) and typed.job.max_samples == 3


def test_unknown_flag_is_refused_in_one_line():
    with pytest.raises(UnknownSetting) as exc:
        with_values(config_from_argv([]), {"--no_such_flag": 1})
    assert str(exc.value) == "DownloadRun has no setting --no_such_flag"
