"""Serve the shipped half_plus_two SavedModel: predict with numpy, regress on tf.Examples."""

import numpy as np
import numpy.typing as npt

from servinglib.codecs import make_example
from servinglib.core import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    EventBus,
    ManagerState,
    ServableId,
    ServableRequest,
    ServableState,
    ServableStateMonitor,
)
from servinglib.errors import InvalidArgumentError
from servinglib.examples import HALF_PLUS_TWO
from servinglib.loaders import default_registry
from servinglib.loaders.tensorflow import TensorFlowPlatformConfig
from servinglib.servable import call_signature
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    ServableVersionPolicy,
    connect,
)
from servinglib.testing import wait_for_state


def serialized_examples(x: npt.NDArray[np.float32]) -> npt.NDArray[np.object_]:
    """One tf.Example per value, with the float feature "x": a string tensor of bytes objects."""
    return np.array([make_example({"x": value}).SerializeToString() for value in x], dtype=object)


bus: EventBus[ServableState] = EventBus()
monitor = ServableStateMonitor(bus)
with AspiredVersionsManager(AvailabilityPreservingPolicy(), event_bus=bus) as manager:
    # Building the adapter does not import TensorFlow; the first load does (a few seconds).
    adapter = default_registry.make_adapter("tensorflow", TensorFlowPlatformConfig())
    connect(adapter, manager)
    config = FileSystemStoragePathSourceConfig(
        [ServableToMonitor("half_plus_two", HALF_PLUS_TWO, ServableVersionPolicy.all())],
        file_system_poll_wait_seconds=0,
    )
    with FileSystemStoragePathSource(config) as source:
        connect(source, adapter)
        for version in (1, 2):
            wait_for_state(
                monitor, ServableId("half_plus_two", version), ManagerState.AVAILABLE, 30
            )

        x = np.array([1.0, 2.0, 5.0], np.float32)
        with manager.servable_handle(ServableRequest.specific("half_plus_two", 1)) as handle:
            print("v1 y:", call_signature(handle.servable, None, {"x": x})["y"])

        with manager.servable_handle(ServableRequest.latest("half_plus_two")) as handle:
            servable = handle.servable
            for name, signature in sorted(servable.signatures.items()):
                print(f"{name}: {signature.method_name}, inputs {sorted(signature.inputs)}")

            print("v2 y:", call_signature(servable, "serving_default", {"x": x})["y"])

            # Regress signatures take serialized tf.Examples.
            outputs = call_signature(servable, "regress_x_to_y", {"inputs": serialized_examples(x)})
            print("v2 regress:", outputs["outputs"].tolist())

            # A request that does not fit the signature is rejected before TensorFlow runs.
            try:
                call_signature(servable, None, {"x": x.astype(np.float64)})
            except InvalidArgumentError as error:
                print(f"{error.code.name}: {error}")

            # An op failing on the request's data: TensorFlow's own code and message.
            no_x = np.array([make_example({"z": 1.0}).SerializeToString()], dtype=object)
            try:
                call_signature(servable, "regress_x_to_y", {"inputs": no_x})
            except InvalidArgumentError as error:
                print(f"{error.code.name}: {error}")
