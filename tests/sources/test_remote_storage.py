"""Models served from object storage: real S3, GCS and Azure protocol servers, real clients."""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from servinglib import (
    FileSystemStoragePathSourceConfig,
    LoadRetryOptions,
    ManagerOptions,
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    PythonPlatformConfig,
    ServerCore,
    ServerCoreOptions,
)
from servinglib.core import ManagerState, ServableState
from servinglib.errors import InvalidArgumentError, UnavailableError
from servinglib.loaders.platform_inference import PlatformChoice, infer_model_platform
from servinglib.servable import call_signature
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.sources import (
    BasePathSource,
    RemoteStoragePathSource,
    ServableToMonitor,
    connect,
    remote_store,
)
from servinglib.sources.cache_claim import CLAIM_FILE
from servinglib.sources.remote_mirror import StoreEvent
from servinglib.sources.remote_store import _tf_serving_s3_options, check_installed
from servinglib.testing import FakeClock, RecordingTarget, wait_until, write_python_model
from tests.server.cli.test_model_server import Server
from tests.sources.object_stores import (
    SCALER_PY,
    STORES,
    UNLOAD_GATE,
    HoldingProxy,
    S3Store,
    Store,
)

POLL_S = 0.2
TIMEOUT_S = 30.0


@contextlib.contextmanager
def _serving(kind: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """Store ``kind``'s real server, with its environment (and only its) set, until the end."""
    for name in ("AWS_ENDPOINT_URL_S3", "S3_ENDPOINT", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    try:
        started = STORES[kind]()
    except FileNotFoundError as missing:  # Azurite without Node.js: nothing else skips
        pytest.skip(str(missing))
    for name, value in started.env.items():
        monkeypatch.setenv(name, value)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """Each store's real server, its environment set for this test."""
    with _serving(request.param, monkeypatch) as started:
        yield started


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Store]:
    """The S3 server alone (for what only S3 has: TF Serving's variables)."""
    with _serving("s3", monkeypatch) as started:
        assert isinstance(started, S3Store)
        yield started


def options(cache: Path) -> ServerCoreOptions:
    return ServerCoreOptions(
        manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
        source=FileSystemStoragePathSourceConfig(
            file_system_poll_wait_seconds=POLL_S, model_cache_dir=str(cache)
        ),
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        servable_state_waiter_timeout_s=TIMEOUT_S,
    )


def predict(core: ServerCore, name: str) -> tuple[int, list[float]]:
    with core.servable_handle(ModelSpec.latest(name)) as handle:
        y = call_signature(handle.servable, None, {"x": np.array([1.0], np.float32)})["y"]
        return handle.id.version, y.tolist()


def test_a_model_serves_from_a_store_and_a_new_version_once_complete(
    store: Store, tmp_path: Path
) -> None:
    """A store's base path serves; a new version serves once its listing held still."""
    store.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", store.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])
        store.put_model("m", 2, 3.0)
        wait_until(lambda: predict(core, "m") == (2, [3.0]), timeout_s=TIMEOUT_S)
        # The version the policy no longer picks leaves the cache once it unloaded.
        wait_until(
            lambda: sorted(p.name for p in (tmp_path / "cache").glob("*/[0-9]*")) == ["2"],
            timeout_s=TIMEOUT_S,
        )


def test_a_version_still_being_uploaded_is_not_loaded(store: Store, tmp_path: Path) -> None:
    """Objects arriving between polls keep a version waiting; it loads when the listing settles."""
    store.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", store.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        store.put_model("m", 2, 3.0)  # loadable already: only the listing holds it back
        uploaded = 0
        started = time.monotonic()
        while time.monotonic() - started < POLL_S * 5:  # an uploader busy over five polls
            store.fs.pipe(f"models/m/2/assets/part{uploaded}", b"x" * 100)
            uploaded += 1
            time.sleep(POLL_S / 10)  # a writer's pace (fake-gcs-server stalls on a tight loop)
            assert predict(core, "m")[0] == 1
        wait_until(lambda: predict(core, "m") == (2, [3.0]), timeout_s=TIMEOUT_S)
        assert all(v.error is None for v in core.model_status("m").versions)
        assert len(list((tmp_path / "cache").glob("*/2/assets/part*"))) == uploaded


def test_a_store_that_fails_keeps_serving_and_says_why(s3: S3Store, tmp_path: Path) -> None:
    """A store that stops answering unloads nothing; the model's status says why.

    S3 alone: what fails is the SDK's call, which RemoteMirror handles the same for every
    store, and gcsfs and the Azure SDK retry a refused connection for 30 and 60 s first.
    """
    store = s3
    store.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", store.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        store.stop()
        wait_until(lambda: core.model_status("m").error is not None, timeout_s=60)
        error = core.model_status("m").error
        assert error is not None
        assert f"Cannot list {store.url('m')}" in error.message
        assert predict(core, "m") == (1, [2.0])


def test_an_empty_listing_keeps_what_serves(store: Store, tmp_path: Path) -> None:
    """A bucket rewrite that lists nothing for a while unloads nothing."""
    store.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", store.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        store.fs.rm("models/m", recursive=True)
        wait_until(lambda: core.model_status("m").error is not None, timeout_s=TIMEOUT_S)
        assert "found no versions" in core.model_status("m").error.message  # type: ignore[union-attr]
        assert predict(core, "m") == (1, [2.0])
        store.put_model("m", 1, 2.0)
        wait_until(lambda: core.model_status("m").error is None, timeout_s=TIMEOUT_S)


def test_a_restart_reuses_the_cache(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second start with the same cache downloads nothing and serves at once."""
    store.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", store.url("m"))])
    caplog.set_level(logging.INFO, logger="servinglib.sources")
    with ServerCore(config, options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])
    assert (
        sum(f"Downloaded version 1 of {store.url('m')}" in r.message for r in caplog.records) == 1
    )
    caplog.clear()
    with ServerCore(config, options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])
    assert not any("Downloaded" in r.message for r in caplog.records)


def test_tf_servings_s3_variables_still_work(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TF Serving's S3_ENDPOINT and S3_USE_HTTPS=0 reach the store without AWS_ENDPOINT_URL."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("S3_ENDPOINT", s3.endpoint.removeprefix("http://"))
    monkeypatch.setenv("S3_USE_HTTPS", "0")
    s3.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", "s3://models/m")])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])


def test_tf_serving_s3_options() -> None:
    """S3_ENDPOINT with S3_USE_HTTPS and S3_VERIFY_SSL map onto s3fs's client options."""
    env = {"S3_ENDPOINT": "minio:9000", "S3_USE_HTTPS": "0", "S3_VERIFY_SSL": "0"}
    options: dict[str, Any] = _tf_serving_s3_options(env)
    assert options == {"client_kwargs": {"endpoint_url": "http://minio:9000", "verify": False}}
    assert _tf_serving_s3_options({**env, "AWS_ENDPOINT_URL": "http://x"}) == {
        "client_kwargs": {"verify": False}
    }


def test_a_store_whose_extra_is_missing_is_one_line_naming_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scheme whose store is not installed: the error names the pip install."""
    monkeypatch.setitem(remote_store._EXTRAS, "gs", ("no_such_gcs_module", "gcs"))
    with pytest.raises(InvalidArgumentError, match=r"pip install '\.\[gcs\]'"):
        check_installed("gs://bucket/m")
    with pytest.raises(InvalidArgumentError, match=r"pip install '\.\[gcs\]'"):
        ServerCore(ModelServerConfig([ModelConfig.python("m", "gs://bucket/m")]))


def test_the_cli_serves_s3_and_local_models_from_one_config(s3: S3Store, tmp_path: Path) -> None:
    """servinglib-server with a models.config naming an s3:// and a local model serves both."""
    s3.put_model("remote", 1, 2.0)
    local = write_python_model(tmp_path, "local", SCALER_PY.format(factor=5.0))
    config = tmp_path / "models.config"
    config.write_text(
        textwrap.dedent(
            f"""
            model_config_list {{
              config {{ name: "remote" base_path: "s3://models/remote" model_platform: "python" }}
              config {{ name: "local" base_path: "{local}" model_platform: "python" }}
            }}
            """
        )
    )
    server = Server(
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        f"--model_cache_dir={tmp_path / 'cache'}",
        "--file_system_poll_wait_seconds=0.2",
    )
    try:
        server.wait_ready()
        assert server.predict("remote", [1.0]).json() == {"predictions": [2.0]}
        assert server.predict("local", [1.0]).json() == {"predictions": [5.0]}
        s3.put_model("remote", 2, 3.0)
        wait_until(
            lambda: server.predict("remote", [1.0]).json() == {"predictions": [3.0]},
            timeout_s=TIMEOUT_S,
        )
    finally:
        server.close()


def _without_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


def _storage_options(s3: S3Store) -> dict[str, str]:
    """What a model needs to reach the S3 server without any variable."""
    return {"key": "test", "secret": "test", "endpoint_url": s3.endpoint}


def test_a_model_takes_its_own_storage_options(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's storage_options reach its store: credentials and endpoint without any variable."""
    _without_aws_environment(monkeypatch)
    s3.put_model("m", 1, 2.0)
    model = ModelConfig("m", "s3://models/m", "python", storage_options=_storage_options(s3))
    with ServerCore(ModelServerConfig([model]), options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])
        assert core.model_status("m").error is None


# A dead endpoint that refuses at once, asked once per listing (no SDK retries).
_DEAD_S3 = {
    "key": "test",
    "secret": "test",
    "endpoint_url": "http://127.0.0.1:9",
    "config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}},
}


def _remote_source(
    cache: Path, storage_options: dict[str, Any], *, poll_s: float = 0.0, url: str = "s3://models/m"
) -> tuple[RemoteStoragePathSource, FakeClock]:
    """A remote source of servable ``m`` at ``url``, polled by hand on a fake clock (``poll_s``:
    the period its backoff doubles from; the source is not connected, so it starts no thread)."""
    servable = ServableToMonitor("m", url, storage_options=storage_options)
    config = FileSystemStoragePathSourceConfig(
        [servable], file_system_poll_wait_seconds=poll_s, model_cache_dir=str(cache),
        download_concurrency=1,
    )  # fmt: skip
    clock = FakeClock()
    return RemoteStoragePathSource(config, clock=clock), clock


def test_a_failing_store_is_asked_again_with_backoff(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After failed listings the store is left alone for 1, 2, 4, ... poll periods."""
    _without_aws_environment(monkeypatch)
    source, clock = _remote_source(tmp_path, _DEAD_S3, poll_s=1.0)
    failed: list[StoreEvent] = []  # every event: failures, then the download
    source.store_events.subscribe(failed.append)
    listed_at = []
    for now in (0.0, 0.5, 1.0, 2.0, 2.9, 3.0, 6.9, 7.0):
        clock.advance(now - clock.now())
        before = len(failed)
        source.poll_once()
        assert "Cannot list s3://models/m" in source.servable_errors()["m"].message
        if len(failed) > before:
            listed_at.append(now)
    assert listed_at == [0.0, 1.0, 3.0, 7.0]  # waits of 1, 2 and 4 periods
    assert {(e.servable_name, e.kind) for e in failed} == {("m", "listing_failed")}
    s3.put_model("m", 1, 2.0)
    alive = (ServableToMonitor("m", "s3://models/m", storage_options=_storage_options(s3)),)
    source.update_config(attrs.evolve(source.config, servables=alive))
    clock.advance(1.0)
    source.poll_once()  # new options: a new mirror, asked at once
    source.poll_once()  # listed twice, the same: complete and downloaded
    assert failed[-1].kind == "downloaded"
    assert failed[-1].version == 1
    assert failed[-1].size_bytes > 0
    source.close()


def test_metrics_count_downloads_and_storage_errors(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scrape shows each model's downloaded bytes and time, and its failed listings."""
    _without_aws_environment(monkeypatch)
    s3.put_model("m", 1, 2.0)
    alive = _storage_options(s3)
    models = [
        ModelConfig("m", "s3://models/m", "python", storage_options=alive),
        ModelConfig("gone", "s3://models/gone", "python", storage_options=_DEAD_S3),
    ]
    metrics = ServerMetrics()
    with ServerCore(ModelServerConfig([]), options(tmp_path / "cache")) as core:
        metrics.attach(core)
        core.reload_config(ModelServerConfig(models[:1]))
        assert predict(core, "m") == (1, [2.0])
        with pytest.raises(UnavailableError, match="gone"):
            core.reload_config(ModelServerConfig(models))
        scrape = metrics.render().decode()
    size = len(textwrap.dedent(SCALER_PY.format(factor=2.0)).encode())
    assert f'servinglib_model_download_bytes_total{{model_name="m"}} {float(size)}' in scrape
    assert 'servinglib_model_download_seconds_count{model_name="m"} 1.0' in scrape
    errors = re.search(
        r'servinglib_model_storage_errors_total\{model_name="gone",operation="list"\} (\S+)', scrape
    )
    assert errors is not None
    assert float(errors[1]) >= 1


def test_a_removed_model_leaves_the_cache(store: Store, tmp_path: Path) -> None:
    """Taking a remote model out of the config removes its copies once it unloaded."""
    store.put_model("m", 1, 2.0)
    store.put_model("kept", 1, 3.0)
    both = [ModelConfig.python(name, store.url(name)) for name in ("m", "kept")]
    with ServerCore(ModelServerConfig(both), options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])
        core.reload_config(ModelServerConfig(both[1:]))
        wait_until(
            lambda: all(v.state is ManagerState.END for v in core.model_status("m").versions),
            timeout_s=TIMEOUT_S,
        )

        def copies() -> list[str]:
            return sorted(p.parent.name.rsplit("-", 1)[0] for p in (tmp_path / "cache").glob("*/1"))

        wait_until(lambda: copies() == ["models_kept"], timeout_s=TIMEOUT_S)  # the next poll's
        assert predict(core, "kept") == (1, [3.0])


def test_a_base_path_ending_in_a_slash_keeps_its_mirror(s3: S3Store, tmp_path: Path) -> None:
    """``s3://models/m/`` keeps one mirror across polls: two equal listings complete a version."""
    s3.put_model("m", 1, 2.0)
    source, _clock = _remote_source(tmp_path, _storage_options(s3), url="s3://models/m/")
    events: list[StoreEvent] = []
    source.store_events.subscribe(events.append)
    with source:
        source.poll_once()
        source.poll_once()
    assert [(e.kind, e.version) for e in events] == [("downloaded", 1)]


def _version_error(core: ServerCore, name: str, version: int) -> str | None:
    """The error message of ``version`` of ``name`` once it ended, else None."""
    for status in core.model_status(name).versions:
        if status.version == version and status.state is ManagerState.END and status.error:
            return status.error.message
    return None


def test_a_key_leaving_its_version_writes_nothing_and_fails_that_version(
    s3: S3Store, tmp_path: Path
) -> None:
    """A key with ``..`` writes nothing outside the cache; its version fails naming it; 1 serves."""
    s3.put_model("m", 1, 2.0)
    s3.put_model("m", 2, 3.0)
    s3.put_text("m/2/../../../escaped.py", "print('hostile')")
    sentinel = tmp_path / "escaped.py"  # where the key lands from the version's staging dir
    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        wait_until(lambda: _version_error(core, "m", 2) is not None, timeout_s=TIMEOUT_S)
        message = _version_error(core, "m", 2)
        assert message is not None
        assert "'../../../escaped.py'" in message
        assert f"version 2 of {s3.url('m')}" in message
        assert predict(core, "m") == (1, [2.0])
    assert not sentinel.exists()
    assert not list((tmp_path / "cache").glob("*/2"))


def test_a_refused_version_loads_once_its_unsafe_key_is_gone(s3: S3Store, tmp_path: Path) -> None:
    """Deleting the unsafe key heals the version: it downloads and replaces the one serving."""
    s3.put_model("m", 1, 2.0)
    s3.put_model("m", 2, 3.0)
    s3.put_text("m/2/a//b", "x")
    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        wait_until(lambda: _version_error(core, "m", 2) is not None, timeout_s=TIMEOUT_S)
        s3.fs.rm("models/m/2/a//b")
        wait_until(lambda: predict(core, "m") == (2, [3.0]), timeout_s=TIMEOUT_S)


@pytest.mark.parametrize(
    "key",
    [
        "../escaped",
        "a/../../escaped",
        "./model.py",
        "a//b",
        "/abs",
        "sub/.",
        "back\\..\\slash",
        "nul\0byte",
        "content-under-a-slash/",
    ],
)
def test_every_unsafe_key_is_refused_before_anything_is_downloaded(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """A version holding an unsafe key downloads none of its objects and says which key."""
    _without_aws_environment(monkeypatch)
    s3.put_model("m", 1, 2.0)
    s3.fs.pipe(f"models/m/1/{key}", b"hostile")
    source, _clock = _remote_source(tmp_path / "cache", _storage_options(s3))
    events: list[StoreEvent] = []
    source.store_events.subscribe(events.append)
    target: RecordingTarget[str] = RecordingTarget()
    with source:
        connect(source, target)  # polled by hand: once now
        source.poll_once()
        source.poll_once()
    assert [(e.kind, e.version) for e in events] == [("download_failed", 1)]  # reported once
    assert events[0].error is not None
    assert repr(key) in events[0].error.message
    last = target.last("m")
    assert last is not None
    assert [(v.id.version, v.ok) for v in last] == [(1, False)]
    (local,) = (tmp_path / "cache").iterdir()
    assert sorted(tmp_path.rglob("*")) == [tmp_path / "cache", local, local / CLAIM_FILE]


def test_directory_markers_are_not_files(s3: S3Store, tmp_path: Path) -> None:
    """Empty keys ending in ``/`` (a console's "Create folder") are skipped, not refused."""
    s3.put_model("m", 1, 2.0)
    s3.fs.pipe("models/m/1/", b"")
    s3.fs.pipe("models/m/1/assets/", b"")
    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        assert predict(core, "m") == (1, [2.0])
        assert all(v.error is None for v in core.model_status("m").versions)
    (copy,) = (tmp_path / "cache").glob("*/1")
    assert sorted(p.name for p in copy.iterdir()) == ["model.py"]


MANY_FILES = 200
"""Objects of the big version in the cancelling tests (the store holds the 51st)."""


def _upload_many(s3: S3Store, version: int) -> bytes:
    """Uploads MANY_FILES objects into ``m/<version>``; returns the request naming the 51st."""
    s3.fs.pipe({f"models/m/{version}/f{i:03d}": b"x" * 100 for i in range(MANY_FILES)})
    return f"/models/m/{version}/f050 ".encode()


def test_cancelling_the_store_work_ends_a_download_at_once(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download the store holds is named with its progress; closing ends it leaving no copy."""
    _without_aws_environment(monkeypatch)
    hold = _upload_many(s3, 1)
    with HoldingProxy(s3.endpoint, hold) as proxy:
        options = {**_storage_options(s3), "endpoint_url": proxy.endpoint}
        source, _clock = _remote_source(tmp_path / "cache", options)
        events: list[StoreEvent] = []
        source.store_events.subscribe(events.append)
        source.poll_once()  # listed once: not complete yet
        syncing = threading.Thread(target=source.poll_once)  # listed the same: downloaded
        syncing.start()
        assert proxy.held.wait(TIMEOUT_S)
        (doing,) = source.store_work()
        assert doing.startswith(f"downloading version 1 of s3://models/m (50 of {MANY_FILES} files")
        source.close()
        syncing.join(TIMEOUT_S)
        assert not syncing.is_alive()
        assert source.store_work() == []
    assert events == []  # a cancel is no storage error
    left = [p.name for p in (tmp_path / "cache").glob("*/*")]
    assert left == [CLAIM_FILE]  # no copy, no partial download


def test_sigterm_during_a_download_cancels_it_and_names_it(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while a store holds a download: the server exits at once, naming what it cut."""
    s3.put_model("m", 1, 2.0)
    with HoldingProxy(s3.endpoint, b"/models/m/2/f050 ") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        server = Server(
            "--model_name=m",
            "--model_base_path=s3://models/m",
            "--model_platform=python",
            "--allow_python_code_execution",
            f"--model_cache_dir={tmp_path / 'cache'}",
            "--file_system_poll_wait_seconds=0.2",
            "--shutdown_grace_seconds=1",
        )
        try:
            server.wait_ready()
            _upload_many(s3, 2)
            assert proxy.held.wait(TIMEOUT_S)
            server.process.send_signal(signal.SIGTERM)
            server.process.wait(TIMEOUT_S)  # the hard exit would come after 12 s
        finally:
            server.close()
    out = server.output()
    assert server.process.returncode == 0, out
    assert "cancelled downloading version 2 of s3://models/m (" in out
    assert "Shutdown did not finish" not in out


def test_cancelling_the_store_work_ends_a_listing_at_once(
    s3: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing the store holds is named; closing ends it with no failure reported."""
    _without_aws_environment(monkeypatch)
    s3.put_model("m", 1, 2.0)
    with HoldingProxy(s3.endpoint, b"list-type=2") as proxy:
        options = {**_storage_options(s3), "endpoint_url": proxy.endpoint}
        source, _clock = _remote_source(tmp_path / "cache", options)
        events: list[StoreEvent] = []
        source.store_events.subscribe(events.append)
        syncing = threading.Thread(target=source.poll_once)
        syncing.start()
        assert proxy.held.wait(TIMEOUT_S)
        (doing,) = source.store_work()
        assert doing.startswith("listing s3://models/m (")
        source.close()
        syncing.join(TIMEOUT_S)
        assert not syncing.is_alive()
    assert events == []
    assert source.servable_errors() == {}


def test_a_version_that_failed_to_load_heals_when_uploaded_again(
    s3: S3Store, tmp_path: Path
) -> None:
    """A broken version 2 fails beside version 1; uploaded fixed, it is loaded again and serves."""
    s3.put_model("m", 1, 2.0)
    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(tmp_path / "cache")) as core:
        s3.put_text("m/2/model.py", "raise RuntimeError('broken on purpose')")
        wait_until(lambda: _version_error(core, "m", 2) is not None, timeout_s=TIMEOUT_S)
        assert "broken on purpose" in (_version_error(core, "m", 2) or "")
        assert predict(core, "m") == (1, [2.0])
        s3.put_model("m", 2, 3.0)
        wait_until(lambda: predict(core, "m") == (2, [3.0]), timeout_s=TIMEOUT_S)
        assert all(v.error is None for v in core.model_status("m").versions if v.version == 2)


def test_a_remote_models_platform_is_inferred_from_its_keys(s3: S3Store) -> None:
    """The highest version's keys decide a remote model's platform, as its files do locally."""
    s3.put_model("py", 1, 2.0)
    s3.put_text("py/2/model.py.partial", "")  # no platform's file: the next version down decides
    s3.put_text("tf/3/saved_model.pb", "")
    s3.put_text("tf/3/variables/variables.index", "")
    s3.put_text("both/1/saved_model.pb", "")
    s3.put_text("both/1/model.py", "")
    assert infer_model_platform(s3.url("py")) == PlatformChoice(
        "python", f"inferred from version 1's keys under {s3.url('py')}"
    )
    assert infer_model_platform(s3.url("tf")).platform == "tensorflow"
    with pytest.raises(InvalidArgumentError, match=r"python and tensorflow.*--model_platform"):
        infer_model_platform(s3.url("both"))
    empty = infer_model_platform(s3.url("nothing"))
    assert empty.platform == "tensorflow"
    assert "no version under s3://models/nothing" in empty.reason
    assert "--model_platform" in empty.reason


def test_a_remote_model_that_cannot_be_listed_keeps_the_default_and_says_why(
    s3: S3Store,
) -> None:
    """A bucket that cannot be listed at start: tensorflow, the reason naming the error and flag."""
    choice = infer_model_platform("s3://no-such-bucket/m")
    assert choice.platform == "tensorflow"
    assert "Cannot list s3://no-such-bucket/m" in choice.reason
    assert "--model_platform" in choice.reason


def test_a_guess_at_a_store_that_does_not_answer_gives_up_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unknown GCS host (gcsfs retries it for ~50 s) costs the guess its bound, not more."""
    from servinglib.loaders import platform_inference

    monkeypatch.setattr(platform_inference, "INFERENCE_LISTING_TIMEOUT_S", 0.2)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://no-such-host.invalid:4443")
    choice = infer_model_platform("gs://bucket/m")
    assert choice.platform == "tensorflow"
    assert "Cannot list gs://bucket/m: TimeoutError" in choice.reason


def test_the_cli_serves_a_python_model_on_s3_without_model_platform(
    s3: S3Store, tmp_path: Path
) -> None:
    """--model_base_path=s3://... holding model.py serves as python, no --model_platform needed."""
    s3.put_model("scaler", 1, 2.0)
    server = Server(
        "--model_name=scaler",
        "--model_base_path=s3://models/scaler",
        "--allow_python_code_execution",
        f"--model_cache_dir={tmp_path / 'cache'}",
        "--file_system_poll_wait_seconds=0.2",
    )
    try:
        server.wait_ready()
        assert server.predict("scaler", [1.0]).json() == {"predictions": [2.0]}
    finally:
        server.close()
    assert "Model scaler: platform python (inferred from version 1's keys" in server.output()


def test_a_dropped_versions_copy_stays_until_its_version_unloaded(
    s3: S3Store, tmp_path: Path
) -> None:
    """The copy of a version the policy drops stays while it serves and goes once it unloaded."""
    s3.put_model("m", 1, 2.0)
    cache = tmp_path / "cache"
    copy_at_end: list[bool] = []

    def on_state(state: ServableState) -> None:
        if state.id.version == 1 and state.manager_state is ManagerState.END:
            copy_at_end.append(bool(list(cache.glob("*/1/model.py"))))

    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(cache), state_listeners=[on_state]) as core:
        s3.put_text("m/2/model.py", "raise RuntimeError('broken on purpose')")
        wait_until(lambda: _version_error(core, "m", 2) is not None, timeout_s=TIMEOUT_S)
        assert list(cache.glob("*/1/model.py"))  # version 1 still serves: its copy stays
        assert predict(core, "m") == (1, [2.0])
        s3.put_model("m", 2, 3.0)
        wait_until(lambda: predict(core, "m") == (2, [3.0]), timeout_s=TIMEOUT_S)
        wait_until(lambda: not list(cache.glob("*/1")), timeout_s=TIMEOUT_S)
    assert copy_at_end == [True]


def test_a_removed_models_copies_stay_until_its_versions_unloaded(
    s3: S3Store, tmp_path: Path
) -> None:
    """A model taken out of the config keeps its copies while its version unloads, then not."""
    s3.put_text(
        "m/1/model.py",
        SCALER_PY.format(factor=2.0)
        + "\n    def unload(self):\n"
        + "        import tests.sources.object_stores as stores\n"
        + "        stores.UNLOAD_GATE.wait(30)\n",
    )
    cache = tmp_path / "cache"
    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(cache)) as core:
        assert predict(core, "m") == (1, [2.0])
        UNLOAD_GATE.clear()
        try:
            core.reload_config(ModelServerConfig([]))
            wait_until(
                lambda: core.model_status("m").versions[0].state is ManagerState.UNLOADING,
                timeout_s=TIMEOUT_S,
            )
            assert list(cache.glob("models_m-*/1/model.py"))  # unloading: its copy stays
        finally:
            UNLOAD_GATE.set()
        wait_until(lambda: not list(cache.glob("models_m-*")), timeout_s=TIMEOUT_S)


def test_two_servers_sharing_a_cache_keep_their_own_copies(s3: S3Store, tmp_path: Path) -> None:
    """A second server finding the cache directory of a model locked uses a private one, removed
    when it closes; the first keeps the shared one, found again after its restart."""
    s3.put_model("m", 1, 2.0)
    cache = tmp_path / "cache"
    config = ModelServerConfig([ModelConfig.python("m", s3.url("m"))])
    with ServerCore(config, options(cache)) as first:
        (shared,) = cache.glob("models_m-*")
        with ServerCore(config, options(cache)) as second:
            assert predict(second, "m") == (1, [2.0])
            (private,) = set(cache.glob("models_m-*")) - {shared}
            assert (private / "1" / "model.py").exists()
            s3.put_model("m", 2, 3.0)
            for core in (first, second):
                wait_until(lambda c=core: predict(c, "m") == (2, [3.0]), timeout_s=TIMEOUT_S)
            for directory in (shared, private):
                wait_until(lambda d=directory: not (d / "1").exists(), timeout_s=TIMEOUT_S)
            assert (shared / "2" / "model.py").exists()
            assert (private / "2" / "model.py").exists()
        assert not private.exists()
        assert predict(first, "m") == (2, [3.0])
    assert list(cache.glob("models_m-*")) == [shared]
    assert (shared / "2" / "model.py").exists()  # what a restart finds again


def test_gcs_is_served_by_the_json_api_file_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """gs:// opens gcsfs's JSON-API file system, not its gRPC-probing default, which waited 60 s
    per listing for a bucket layout an emulator never gives; the variable chooses the other."""
    import gcsfs
    from gcsfs.core import GCSFileSystem

    from servinglib.sources.remote_store import open_store

    monkeypatch.delenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", raising=False)
    fs, inner = open_store("gs://models/m/", {"token": "anon"})
    assert type(fs) is GCSFileSystem
    assert inner == "models/m"
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "true")
    assert type(open_store("gs://models/m", {"token": "anon"})[0]) is gcsfs.GCSFileSystem


def test_a_servable_moving_between_a_directory_and_a_store_is_never_emptied(
    s3: S3Store, tmp_path: Path
) -> None:
    """BasePathSource hands a servable between its sources without an empty set between them."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    s3.put_model("m", 2, 3.0)
    local = ServableToMonitor("m", str(tmp_path / "m"))
    remote = ServableToMonitor("m", "s3://models/m", storage_options=_storage_options(s3))
    config = FileSystemStoragePathSourceConfig(
        [local], file_system_poll_wait_seconds=-1, model_cache_dir=str(tmp_path / "cache")
    )
    emitted: list[list[int]] = []
    with BasePathSource(config) as source:
        source.set_aspired_versions_callback(
            lambda _name, versions: emitted.append([v.id.version for v in versions])
        )
        source.poll_once()
        source.update_config(attrs.evolve(config, servables=[remote]))
        source.poll_once()  # the first listing: not complete yet, nothing emitted
        source.poll_once()  # the same listing again: complete, copied, emitted
        source.update_config(config)
        source.poll_once()
    assert emitted == [[1], [2], [1]]
