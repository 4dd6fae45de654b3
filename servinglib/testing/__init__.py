"""Test doubles, waiters and conformance checks for servinglib and your own Loaders and Sources.

Importing this package imports neither TensorFlow, grpc nor watchdog.
"""

from servinglib.testing._concurrent_calls import zero_inputs as zero_inputs
from servinglib.testing._fake_adapter import (
    FakeStoragePathSourceAdapter as FakeStoragePathSourceAdapter,
)
from servinglib.testing._fake_clock import FakeClock as FakeClock
from servinglib.testing._fake_loader import FakeLoader as FakeLoader
from servinglib.testing._fake_loader import LiveCounter as LiveCounter
from servinglib.testing._fake_source import FakeSource as FakeSource
from servinglib.testing._fixture_types import GrpcChannelFactory as GrpcChannelFactory
from servinglib.testing._fixture_types import ModelDirs as ModelDirs
from servinglib.testing._fixture_types import RestClientFactory as RestClientFactory
from servinglib.testing._fixture_types import ServerCoreFactory as ServerCoreFactory
from servinglib.testing._loader_conformance import (
    assert_loader_conforms as assert_loader_conforms,
)
from servinglib.testing._loader_conformance import check_loader as check_loader
from servinglib.testing._model_dirs import make_version_dirs as make_version_dirs
from servinglib.testing._model_dirs import write_python_model as write_python_model
from servinglib.testing._recording_target import AspiredVersionsCall as AspiredVersionsCall
from servinglib.testing._recording_target import RecordingTarget as RecordingTarget
from servinglib.testing._servable_harness import ServableHarness as ServableHarness
from servinglib.testing._source_conformance import (
    assert_source_conforms as assert_source_conforms,
)
from servinglib.testing._source_conformance import check_source as check_source
from servinglib.testing._static_manager import static_manager as static_manager
from servinglib.testing._triton_python import triton_python_model as triton_python_model
from servinglib.testing._violation import Violation as Violation
from servinglib.testing._waiters import run_until as run_until
from servinglib.testing._waiters import wait_for_state as wait_for_state
from servinglib.testing._waiters import wait_until as wait_until
from servinglib.testing._waiters import wait_until_available as wait_until_available
from servinglib.testing._waiters import wait_until_state as wait_until_state

__all__ = [
    "AspiredVersionsCall",
    "FakeClock",
    "FakeLoader",
    "FakeSource",
    "FakeStoragePathSourceAdapter",
    "GrpcChannelFactory",
    "LiveCounter",
    "ModelDirs",
    "RecordingTarget",
    "RestClientFactory",
    "ServableHarness",
    "ServerCoreFactory",
    "Violation",
    "assert_loader_conforms",
    "assert_source_conforms",
    "check_loader",
    "check_source",
    "make_version_dirs",
    "run_until",
    "static_manager",
    "triton_python_model",
    "wait_for_state",
    "wait_until",
    "wait_until_available",
    "wait_until_state",
    "write_python_model",
    "zero_inputs",
]
