"""Fixtures of the Triton loader tests: ``serve``, a batch recorder model placed by its
dynamic batcher, and a :class:`Client` sending it requests as a server's threads and loops do."""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.loaders.triton.request_batching import RequestBatching
from servinglib.request_extras import RequestExtras, request_extras_scope
from servinglib.servable import CallSite, CallStages, ModelCall, Servable
from servinglib.testing import triton_python_model, wait_until
from tests.triton.python_models import write_batch_recorder

Outputs = dict[str, np.ndarray]


class Client:
    """Sends requests to a model's placement from threads of its own, as a server's do."""

    def __init__(self, servable: Servable) -> None:
        self.servable = servable
        placement = servable.placement("serving_default")
        assert isinstance(placement, RequestBatching)
        self.placement = placement
        self.model: Any = servable.model  # type: ignore[attr-defined]
        self.pool = concurrent.futures.ThreadPoolExecutor(128)  # (threads made as needed)
        self._lock = threading.Lock()
        self._released = 0  # guarded by: _lock
        self.stages: list[CallStages] = []

    def send(
        self,
        x: list[int],
        *,
        outputs: list[str] | None = None,
        parameters: dict[str, object] | None = None,
        deadline_s: float | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        with_b: bool = False,
    ) -> concurrent.futures.Future[Outputs]:
        """Submits a request of X = ``x`` (one row per item); its future outputs."""
        stages = CallStages()
        self.stages.append(stages)

        def release() -> None:
            with self._lock:
                self._released += 1

        def run() -> Outputs:
            deadline = None if deadline_s is None else time.monotonic() + deadline_s
            call = ModelCall(
                CallSite("batch_recorder", 1, "serving_default"),
                self.servable,
                self.servable.signatures["serving_default"],
                {
                    "X": np.array([[v] for v in x], dtype=np.int32),
                    **({"B": np.array([[v] for v in x], dtype=np.int32)} if with_b else {}),
                },
                outputs,
                deadline,
                stages,
                release,
            )
            extras = RequestExtras(
                parameters=parameters or {}, priority=priority, timeout_us=timeout_us
            )
            with request_extras_scope(extras):
                return self.placement.run_blocking(call)

        return self.pool.submit(run)

    async def call(self, x: int, *, deadline_s: float | None = None) -> Outputs:
        """A request of X = [[x]] awaited on the running event loop, as the async front ends'."""
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        call = ModelCall(
            CallSite("batch_recorder", 1, "serving_default"),
            self.servable,
            self.servable.signatures["serving_default"],
            {"X": np.array([[x]], dtype=np.int32)},
            None,
            deadline,
            CallStages(),
            self._release,
        )
        return await self.placement.run(call)

    def _release(self) -> None:
        with self._lock:
            self._released += 1

    def hold(self) -> concurrent.futures.Future[Outputs]:
        """Sends a request and holds the model inside its execute()."""
        self.model.gate.clear()
        future = self.send([0])
        assert self.model.entered.wait(10)
        return future

    @property
    def released(self) -> int:
        """How many calls released their version (each once, when done)."""
        with self._lock:
            return self._released

    def wait_queued(self, count: int) -> None:
        wait_until(lambda: self.placement.statistics().queued_tasks == count)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    with contextlib.ExitStack() as stack:

        def serve(dynamic_batching: str, *, optional_b: bool = False) -> Client:
            directory = write_batch_recorder(tmp_path, dynamic_batching, optional_b=optional_b)
            harness = stack.enter_context(triton_python_model(directory))
            client = Client(stack.enter_context(harness.handle()).servable)
            stack.callback(client.model.gate.set)  # a failed test must not hold execute()
            return client

        yield serve
