"""ServerCoreOptions: composed of its parts' options; earlier releases' flat keywords still work."""

from __future__ import annotations

import attrs
import pytest

from servinglib import (
    FileSystemStoragePathSourceConfig,
    LoadRetryOptions,
    ManagerOptions,
    ServerCoreOptions,
)
from servinglib.sources import ServableToMonitor


def test_defaults_are_the_parts_defaults() -> None:
    """Each knob has one default: the part's own."""
    options = ServerCoreOptions()
    assert options.manager == ManagerOptions()
    assert options.source == FileSystemStoragePathSourceConfig()


def test_flat_keywords_warn_and_land_in_their_part() -> None:
    """Each flat keyword of earlier releases moves into its part, warning with the new spelling."""

    def never(_error: object) -> bool:
        return False

    flat = {
        "num_load_threads": 3,
        "num_unload_threads": 2,
        "max_num_load_retries": 0,
        "load_retry_interval_s": 0.5,
        "should_retry_model_load": never,
        "file_system_poll_wait_seconds": 7.0,
        "servable_versions_always_present": True,
        "file_system_settle_window_s": 0.25,
        "version_done_marker": "DONE",
    }
    with pytest.warns(DeprecationWarning, match="is deprecated: pass") as warned:
        options = ServerCoreOptions(**flat, start_degraded=True)  # type: ignore[arg-type]
    assert len(warned) == len(flat)
    assert "pass manager=ManagerOptions(num_load_threads=...)" in str(warned[0].message)
    assert options == ServerCoreOptions(
        manager=ManagerOptions(
            num_load_threads=3,
            num_unload_threads=2,
            load_retry=LoadRetryOptions(
                max_num_load_retries=0, load_retry_interval_s=0.5, should_retry=never
            ),
        ),
        source=FileSystemStoragePathSourceConfig(
            file_system_poll_wait_seconds=7.0,
            servable_versions_always_present=True,
            settle_window_s=0.25,
            version_done_marker="DONE",
        ),
        start_degraded=True,
        aspired_version_policy=options.aspired_version_policy,
    )


def test_flat_keywords_change_only_their_field_of_a_given_part() -> None:
    """A flat keyword next to its part's options object changes that field and keeps the rest."""
    source = FileSystemStoragePathSourceConfig(version_done_marker="DONE")
    with pytest.warns(DeprecationWarning, match="file_system_poll_wait_seconds"):
        options = ServerCoreOptions(source=source, file_system_poll_wait_seconds=9.0)  # type: ignore[call-arg]
    assert options.source == attrs.evolve(source, file_system_poll_wait_seconds=9.0)
    with pytest.warns(DeprecationWarning, match="max_num_load_retries"):
        evolved = attrs.evolve(options, max_num_load_retries=1)
    assert evolved.manager.load_retry.max_num_load_retries == 1
    assert evolved.source == options.source


def test_flat_reads_warn_and_read_the_part() -> None:
    """Reading a flat attribute of earlier releases warns and answers from the part."""
    options = ServerCoreOptions(
        manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=2)),
        source=FileSystemStoragePathSourceConfig(settle_window_s=0.0),
    )
    with pytest.warns(DeprecationWarning, match=r"manager=ManagerOptions\(load_retry="):
        assert options.max_num_load_retries == 2
    with pytest.warns(DeprecationWarning, match="settle_window_s"):
        assert options.file_system_settle_window_s == 0.0


def test_the_source_part_lists_no_servables() -> None:
    """The core watches its config's models: servables in the source options are refused."""
    source = FileSystemStoragePathSourceConfig([ServableToMonitor("m", "/models/m")])
    with pytest.raises(ValueError, match="must list no servables"):
        ServerCoreOptions(source=source)


def test_unknown_keywords_still_fail() -> None:
    """A misspelt keyword is a TypeError, as before."""
    with pytest.raises(TypeError):
        ServerCoreOptions(num_load_thread=2)  # type: ignore[call-arg]
