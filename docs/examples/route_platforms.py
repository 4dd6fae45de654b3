"""Route one file-system source to one adapter per platform; unknown platforms end in error.

Run: .venv/bin/python docs/examples/route_platforms.py
"""

from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path

from servinglib import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    ManagerState,
    ServableId,
    ServableRequest,
    ServableState,
    ServableStateMonitor,
    SimpleLoader,
)
from servinglib.errors import UnimplementedError
from servinglib.sources import (
    DynamicSourceRouter,
    ErrorInjectingSourceAdapter,
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    Source,
    StoragePath,
    UnarySourceAdapter,
    connect,
)

TIMEOUT_S = 10.0
# What each servable's files are; "notes" has a platform nothing can load yet.
PLATFORMS = {"greeting": "text", "settings": "json", "notes": "markdown"}
TEXT_PORT, JSON_PORT, DEFAULT_PORT = 0, 1, 2
PORTS = {"text": TEXT_PORT, "json": JSON_PORT}


class TextAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """A version directory holding model.txt → a Loader of its text.  Thread-safe."""

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return SimpleLoader(lambda: (Path(data) / "model.txt").read_text(encoding="utf-8"))


class JsonAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """A version directory holding model.json → a Loader of the parsed JSON.  Thread-safe."""

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        def load() -> object:
            return json.loads((Path(data) / "model.json").read_text(encoding="utf-8"))

        return SimpleLoader(load)


def write_models(root: Path) -> None:
    """One version of each servable: root/<name>/1/model.<ext>."""
    files = {"greeting": "model.txt", "settings": "model.json", "notes": "model.txt"}
    contents = {"greeting": "hello", "settings": '{"threshold": 0.5}', "notes": "# notes"}
    for name, file_name in files.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / file_name).write_text(contents[name], encoding="utf-8")


def describe(monitor: ServableStateMonitor, name: str) -> str:
    """Waits until version 1 of ``name`` is AVAILABLE or END; describes where it is."""
    monitor.wait_until_servables_reach_state(
        [ServableRequest.specific(name, 1)], ManagerState.AVAILABLE, timeout_s=TIMEOUT_S
    )
    event = monitor.get_state(ServableId(name, 1))
    assert event is not None
    health = "" if event.ok else f" ({event.health!r})"
    return f"{name} v1 {event.manager_state}{health}"


def wire(
    manager: AspiredVersionsManager,
    router: DynamicSourceRouter[StoragePath],
    source: Source[StoragePath],
) -> None:
    """source → router → one adapter per port → manager; connecting the source polls the disk."""
    unknown = UnimplementedError("No adapter for this servable's platform")
    adapters = (
        TextAdapter(),  # port 0
        JsonAdapter(),  # port 1
        ErrorInjectingSourceAdapter[StoragePath, Loader](unknown),  # port 2, the default
    )
    for port, adapter in zip(router.output_ports, adapters, strict=True):
        connect(adapter, manager)
        connect(port, adapter)
    connect(source, router)


def route_notes_to_text(
    manager: AspiredVersionsManager,
    router: DynamicSourceRouter[StoragePath],
    source: FileSystemStoragePathSource,
) -> None:
    """Routes "notes" to the text adapter, then polls again so that its set is re-emitted."""
    loaded = threading.Event()

    def on_event(state: ServableState) -> None:
        if state.id == ServableId("notes", 1) and state.manager_state is ManagerState.AVAILABLE:
            loaded.set()

    with manager.event_bus.subscribe(on_event):
        router.update_routes({**router.routes, "notes": TEXT_PORT})
        # A route change applies to the next emission: nothing is re-sent by itself.
        source.poll_once()
        assert loaded.wait(TIMEOUT_S)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_models(root)
        config = FileSystemStoragePathSourceConfig(
            servables=[ServableToMonitor(name, str(root / name)) for name in PLATFORMS],
            file_system_poll_wait_seconds=0,  # poll once, when connected
        )
        routes = {name: PORTS[p] for name, p in PLATFORMS.items() if p in PORTS}
        router = DynamicSourceRouter[StoragePath](DEFAULT_PORT + 1, routes)
        # The version of "notes" that failed is loaded again once it comes with a loader.
        with (
            AspiredVersionsManager(
                AvailabilityPreservingPolicy(), enable_reload_servables_with_error=True
            ) as manager,
            FileSystemStoragePathSource(config) as source,
        ):
            monitor = ServableStateMonitor(manager.event_bus)
            wire(manager, router, source)
            for name in PLATFORMS:
                print(describe(monitor, name))
            with manager.servable_handle(ServableRequest.latest("settings")) as handle:
                print("settings:", handle.servable)

            route_notes_to_text(manager, router, source)
            with manager.servable_handle(ServableRequest.latest("notes")) as handle:
                print("notes:", handle.servable)
            monitor.close()


if __name__ == "__main__":
    main()
