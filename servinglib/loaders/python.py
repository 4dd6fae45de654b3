"""The "python" platform: a model version directory holding a ``model.py``.

Executing code from a model directory is a trust decision: the platform is
off unless its config says ``allow_code_execution=True``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import itertools
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast, final

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.core.loader import Loader
from servinglib.errors import (
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServingError,
)
from servinglib.loaders.instances import InstancesLoader, InstancesServable
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.process import ProcessServable, process_loaders
from servinglib.loaders.python_sequences import Sequences, stateful_signatures
from servinglib.loaders.triton.backend_utils_import import backend_utils_importable
from servinglib.loaders.warmup import WarmupOptions
from servinglib.servable import (
    PREDICT_METHOD,
    CallSite,
    CallStages,
    ExecutionMode,
    ModelCall,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    TensorSpec,
    request_deadline,
)
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import (
    ErrorInjectingSourceAdapter,
    FunctionSourceAdapter,
    SourceAdapter,
)
from servinglib.sources.version_check import VersionCheck

if TYPE_CHECKING:
    from servinglib.loaders.triton.config import TritonModelConfig

F = TypeVar("F", bound=Callable[..., Any])

_log = logging.getLogger(__name__)

_loader_numbers = itertools.count()

_SPEC_ATTRIBUTE = "__servinglib_signature__"
_SEQUENCES_ATTRIBUTE = "__servinglib_sequences__"
_TRITON_CLASS_NAME = "TritonPythonModel"


@final
@attrs.frozen
class PythonPlatformConfig:
    """How the "python" platform loads ``model.py`` from each version directory.

    ``allow_code_execution`` must be True: loading runs the directory's code.
    ``entry_point`` is the file, ``class_name`` the PythonModel subclass in it.
    ``model_process``: load and serve each version in a process of its own
    (:class:`~servinglib.loaders.process.ProcessLoader`): its load at idle CPU
    priority, its calls on its own interpreter lock; each call crosses a
    socket, and streaming signatures cannot run there.
    ``instance_count``: instances of each version, calls going to a free one
    (:mod:`servinglib.loaders.instances`); more than one are a model process
    each, so a model holding the interpreter lock uses as many cores.  0: as
    a Triton model's ``config.pbtxt`` ``instance_group`` says, else 1.
    Immutable, so thread-safe.
    """

    allow_code_execution: bool = False
    entry_point: str = "model.py"
    class_name: str = "Model"
    warmup: WarmupOptions = attrs.field(factory=WarmupOptions)
    model_process: bool = False
    instance_count: int = attrs.field(default=0, validator=attrs.validators.ge(0))


def config_from_message(message: Any) -> PythonPlatformConfig:  # noqa: ANN401 - a PythonPlatformOptions
    """The config a ``--platform_config_file`` entry (``PythonPlatformOptions``) describes."""
    return PythonPlatformConfig(
        allow_code_execution=message.allow_code_execution,
        entry_point=message.entry_point or "model.py",
        class_name=message.class_name or "Model",
        model_process=message.model_process,
        instance_count=message.instance_count,
    )


class PythonModel:
    """Base class of a Python model: ``load(path)`` once, then signature methods per request.

    Declare signatures with :func:`signature` on methods taking the input
    tensors as keyword arguments and returning a mapping of output tensors.
    Thread safety: signature methods may run on several threads at once.
    """

    def load(self, path: str) -> None:
        """Reads the model from its version directory ``path``.  Default: nothing."""

    def unload(self) -> None:
        """Releases what :meth:`load` acquired.  Default: nothing."""


def signature(
    *,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    name: str | None = None,
    method_name: str = PREDICT_METHOD,
    execution_mode: ExecutionMode = ExecutionMode.THREAD,
    response_cache: bool = False,
    sequences: Sequences | None = None,
) -> Callable[[F], F]:
    """Declares a PythonModel method as a signature (named after the method unless ``name``).

    The method is called with each input tensor as a keyword argument and
    returns a mapping of output name → array (anything ``numpy.asarray``
    accepts).  An ``async def`` method needs ``execution_mode=ASYNC``.
    A generator method (``yield``) is a streaming signature: each mapping
    it yields is one part of the answer (``outputs`` describe each part);
    an async generator needs ``execution_mode=ASYNC``.  A stream stopped
    early (the client left, the deadline passed) closes the generator, so
    its ``finally`` runs.  ``response_cache=True``: the method's answer depends
    on its inputs (and request parameters) alone, so a server started with a
    response cache (``--cache_config``) may answer a repeated request from it
    without calling the method (a streaming signature is never cached).
    ``sequences``: the signature is stateful, served as sequences of requests
    (:mod:`servinglib.loaders.python_sequences`): the method also gets ``state``,
    ``start`` and ``end`` keywords and returns ``(outputs, next state)``.
    """
    spec = SignatureSpec(
        inputs, outputs, method_name, execution_mode, response_cache=response_cache
    )

    def mark(method: F) -> F:
        streaming = inspect.isgeneratorfunction(method) or inspect.isasyncgenfunction(method)
        marked = attrs.evolve(spec, streaming=True) if streaming else spec
        if sequences is not None and (streaming or execution_mode is not ExecutionMode.THREAD):
            raise InvalidArgumentError(
                f"Signature '{name or method.__name__}': a stateful signature (sequences) is a "
                "plain method in thread mode, not a stream nor async"
            )
        setattr(method, _SPEC_ATTRIBUTE, (name or method.__name__, marked))
        if sequences is not None:
            setattr(method, _SEQUENCES_ATTRIBUTE, sequences)
        return method

    return mark


def version_check(config: PythonPlatformConfig | None) -> VersionCheck:
    """A "python" version directory is complete once it holds its entry point file."""
    entry_point = (config if config is not None else PythonPlatformConfig()).entry_point

    def check(path: str) -> str | None:
        if os.path.isfile(os.path.join(path, entry_point)):
            return None
        return f"no {entry_point} yet"

    return check


_FACTORY = "servinglib.loaders.python:PythonLoader"


def make_adapter(config: PythonPlatformConfig | None) -> SourceAdapter[StoragePath, Loader]:
    """The "python" platform's adapter (refuses every version without allow_code_execution)."""
    config = config if config is not None else PythonPlatformConfig()
    if not config.allow_code_execution:
        return ErrorInjectingSourceAdapter(
            FailedPreconditionError(
                "Model platform 'python' runs the code in each model directory, which is not "
                "allowed: enable it with PythonPlatformConfig(allow_code_execution=True) "
                "(servinglib-server: --allow_python_code_execution)"
            )
        )
    processes = process_loaders(_FACTORY, config)
    in_process = functools.partial(PythonLoader, config=config)

    def loader(path: str) -> Loader:
        count = _instance_count(path, config)
        if _sequence_batching(path):
            if count > 1 or config.model_process:
                return sequence_instances_loader(path, count, config)
            return in_process(path)
        if count > 1:
            return instances_loader(path, count, config)
        return processes(path) if config.model_process else in_process(path)

    return FunctionSourceAdapter(loader)


def _instance_count(path: str, config: PythonPlatformConfig) -> int:
    """The platform's ``instance_count``, else the one the model's ``config.pbtxt`` asks for."""
    model_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isfile(os.path.join(model_dir, "config.pbtxt")):
        return config.instance_count or 1
    # Imported here: only Triton models need the config reader and its protos.
    from servinglib.loaders.triton.config import instance_count, read_model_config

    try:
        config_pbtxt = read_model_config(model_dir)
        count = config.instance_count or instance_count(config_pbtxt)
    except ServingError:
        return config.instance_count or 1  # the load reads the config again, failing with why
    message = config_pbtxt.message
    if count > 1 and message.model_transaction_policy.decoupled:
        _log.warning(
            "Model %s: a decoupled model streams its answers, which a model process cannot: "
            "it is served by one instance, not the %d instance_group asks for",
            message.name,
            count,
        )
        return 1
    return max(1, count)


def _sequence_batching(path: str) -> bool:
    """Whether the model's ``config.pbtxt`` sets ``sequence_batching`` (and is not decoupled):
    its sequence batcher lives in the server's process, in front of its instances."""
    model_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isfile(os.path.join(model_dir, "config.pbtxt")):
        return False
    from servinglib.loaders.triton.config import read_model_config  # only Triton models

    try:
        message = read_model_config(model_dir).message
    except ServingError:
        return False  # the load reads the config again and fails with what is wrong
    return message.HasField("sequence_batching") and not message.model_transaction_policy.decoupled


def sequence_instances_loader(path: str, count: int, config: PythonPlatformConfig) -> Loader:
    """``count`` instances of a sequence model's version in ``path``, each in a model process
    of its own (each ``initialize`` s one instance), behind one sequence batcher in the
    server's process (:class:`~servinglib.loaders.triton.sequence_servable.TritonSequenceServable`):
    a sequence sticks to the instance of its slot, its controls and state travel with each
    request."""
    from servinglib.loaders.triton.config import read_model_config  # only Triton models
    from servinglib.loaders.triton.sequence_servable import TritonSequenceServable

    inner = attrs.evolve(config, model_process=False, instance_count=1)
    model_dir = os.path.dirname(os.path.abspath(path))

    def start(version_path: str, index: int) -> Servable:
        return ProcessServable.start(_INSTANCE_FACTORY, version_path, (inner, index))

    def serve(instances: Sequence[Servable]) -> Servable:
        version = int(os.path.basename(os.path.normpath(path)))
        processes = cast("list[ProcessServable]", list(instances))
        return TritonSequenceServable(processes, read_model_config(model_dir), model_dir, version)

    return InstancesLoader(path, max(1, count), start, WarmupOptions(enabled=False), serve=serve)


def instances_loader(path: str, count: int, config: PythonPlatformConfig) -> Loader:
    """``count`` instances of the version in ``path``, each loaded, warmed up (its warmup
    records replayed) and served by a model process of its own
    (:class:`~servinglib.loaders.instances.InstancesLoader`)."""
    inner = attrs.evolve(config, model_process=False, instance_count=1)

    def start(version_path: str, index: int) -> Servable:
        return ProcessServable.start(
            _INSTANCE_FACTORY, version_path, (inner, index), one_call_at_a_time=True
        )

    triton = _triton_config(path)
    return InstancesLoader(
        path,
        count,
        start,
        WarmupOptions(enabled=False),
        _instances_batching(path, count, triton),
        batch_dimension=triton is not None and triton.message.max_batch_size > 0,
    )


def _triton_config(path: str) -> TritonModelConfig | None:
    """The ``config.pbtxt`` of the Triton model whose version is in ``path``; None for other
    models, or one that does not parse (the instances' loads read it again and fail with
    why)."""
    model_dir = os.path.dirname(os.path.abspath(path))
    if not os.path.isfile(os.path.join(model_dir, "config.pbtxt")):
        return None
    from servinglib.loaders.triton.config import read_model_config  # only Triton models

    try:
        return read_model_config(model_dir)
    except ServingError:
        return None


def _instances_batching(
    path: str, count: int, config: TritonModelConfig | None
) -> Callable[[InstancesServable], Placement | None] | None:
    """The batching placement of ``count`` instances of a Triton Python model whose
    ``config`` sets ``dynamic_batching``: batches formed in the server's process, each run
    by one ``execute`` on a free instance, ``count`` at once (as Triton batches in front of
    its instances); None for other models."""
    if config is None or config.message.model_transaction_policy.decoupled:
        return None
    from servinglib.loaders.triton.request_batching import request_batching

    try:
        version = int(os.path.basename(os.path.normpath(path)))
    except ValueError:
        return None  # the instances' loads fail with why
    return lambda servable: request_batching(servable, config, version, threads=count)


_INSTANCE_FACTORY = "servinglib.loaders.python:instance_loader"


def instance_loader(path: str, config: tuple[PythonPlatformConfig, int]) -> PythonLoader:
    """The model process's loader of instance ``config[1]`` (a model process factory)."""
    platform_config, index = config
    return PythonLoader(path, platform_config, instance=index)


@final
class PythonLoader(ModelLoader):
    """Imports a version directory's ``model.py``, instantiates its model and loads it.

    The model is the PythonModel subclass ``class_name`` names; failing that, a Triton
    Python-backend ``TritonPythonModel`` class, served through
    :mod:`servinglib.loaders.triton.python_model` (``import triton_python_backend_utils``
    works while ``model.py`` is imported).

    The module is imported under a name unique to the directory and removed
    from ``sys.modules`` on unload.  Thread safety: as :class:`Loader` requires.
    """

    def __init__(
        self, path: str, config: PythonPlatformConfig | None = None, *, instance: int | None = None
    ) -> None:
        config = config if config is not None else PythonPlatformConfig(allow_code_execution=True)
        super().__init__(path, config.warmup)
        self._config = config
        # Which of the model's instances this process loads (a Triton model's name); None: the
        # whole model (a sequence model's instances all here, behind its sequence batcher).
        self._instance = instance
        digest = hashlib.sha1(os.path.abspath(path).encode(), usedforsecurity=False).hexdigest()
        # Unique per loader: two servables may load the same directory.
        self._module_name = f"servinglib_python_model_{digest[:12]}_{next(_loader_numbers)}"

    def _load_servable(self) -> Servable:
        entry = os.path.join(self.path, self._config.entry_point)
        if not os.path.isfile(entry):
            raise NotFoundError(f"No {self._config.entry_point} in model directory {self.path}")
        if not os.access(entry, os.R_OK):
            raise PermissionDeniedError(
                f"Cannot read {entry}: permission denied (the server runs as uid {os.geteuid()})"
            )
        module_spec = importlib.util.spec_from_file_location(self._module_name, entry)
        if module_spec is None or module_spec.loader is None:
            raise InvalidArgumentError(f"Cannot import {entry}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[self._module_name] = module
        try:
            try:
                with backend_utils_importable():
                    module_spec.loader.exec_module(module)
            except SyntaxError as exc:  # cannot heal by retrying
                raise InvalidArgumentError(f"Importing {entry} failed: {exc}") from exc
            except Exception as exc:
                raise ServingError.wrap(exc, f"Importing {entry} failed") from exc
            model_class = getattr(module, self._config.class_name, None)
            if not (isinstance(model_class, type) and issubclass(model_class, PythonModel)):
                triton_class = getattr(module, _TRITON_CLASS_NAME, None)
                if isinstance(triton_class, type):
                    warmup = self._config.warmup.enabled  # (--enable_model_warmup)
                    return _load_triton_python_model(
                        triton_class, self.path, self._instance, warmup
                    )
                raise InvalidArgumentError(
                    f"{entry} defines no PythonModel subclass named {self._config.class_name} "
                    f"(nor a Triton Python-backend {_TRITON_CLASS_NAME})"
                )
            model = model_class()
            model.load(self.path)
            model_name = os.path.basename(os.path.dirname(os.path.abspath(self.path)))
            return PythonServable(model, model_name)
        except BaseException:
            sys.modules.pop(self._module_name, None)
            raise

    def _unload_servable(self, servable: Servable) -> None:
        try:
            if isinstance(servable, PythonServable):
                servable.model.unload()
        finally:
            sys.modules.pop(self._module_name, None)


def _load_triton_python_model(
    model_class: type[Any], path: str, instance: int | None, warmup: bool
) -> Servable:
    # Imported here: only Triton Python models need the config reader and its protos.
    from servinglib.loaders.triton.python_model import load_triton_python_model

    return load_triton_python_model(model_class, path, instance, warmup=warmup)


@final
class PythonServable(Servable):
    """A PythonModel's signature methods as a Servable.  Thread-safe if the model is."""

    def __init__(self, model: PythonModel, name: str = "") -> None:
        """``name``: the model's, for the errors of its stateful signatures."""
        self.model = model
        methods: dict[str, Callable[..., Any]] = {}
        specs: dict[str, SignatureSpec] = {}
        sequences: dict[str, Sequences] = {}
        for _, member in inspect.getmembers(model, callable):
            marked = getattr(member, _SPEC_ATTRIBUTE, None)
            if marked is None:
                continue
            name, spec = marked
            if name in specs:
                raise InvalidArgumentError(f"Two methods declare signature '{name}'")
            is_async = inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
            if is_async != (spec.execution_mode is ExecutionMode.ASYNC):
                raise InvalidArgumentError(
                    f"Signature '{name}': async methods need execution_mode=ASYNC, and ASYNC "
                    "needs an async method"
                )
            methods[name], specs[name] = member, spec
            stateful = getattr(member, _SEQUENCES_ATTRIBUTE, None)
            if stateful is not None:
                sequences[name] = stateful
        if not specs:
            raise InvalidArgumentError(
                f"{type(model).__name__} declares no signatures (decorate methods with @signature)"
            )
        self._methods = methods
        self._signatures = specs
        self._name = name or type(model).__name__
        self._stateful = stateful_signatures(methods, sequences, self._outputs, self._name)

    def placement(self, signature_name: str) -> Placement | None:
        stateful = self._stateful.get(signature_name)
        return stateful.batcher if stateful is not None else None

    def batches_itself(self, signature_name: str) -> bool:
        return signature_name in self._stateful

    def sequence_gauge(self) -> tuple[int, int, int]:
        """(sequences holding a slot, waiting for one, slots) of its stateful signatures."""
        gauges = [s.batcher.statistics() for s in self._stateful.values()]
        active = sum(g.active - g.backlog for g in gauges)
        return active, sum(g.backlog for g in gauges), sum(g.slots for g in gauges)

    def close(self) -> None:
        for stateful in self._stateful.values():
            stateful.close()

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        if self._signatures[signature_name].execution_mode is ExecutionMode.ASYNC:
            raise FailedPreconditionError(f"Signature '{signature_name}' is async: use call_async")
        stateful = self._stateful.get(signature_name)
        if stateful is not None:  # (embedding code: through its sequence batcher)
            spec = self._signatures[signature_name]
            site = CallSite(self._name, 0, signature_name)
            call = ModelCall(
                site, self, spec, inputs, output_filter, request_deadline(), CallStages(), _nothing
            )
            return stateful.batcher.run_blocking(call)
        try:
            outputs = self._methods[signature_name](**inputs)
        except Exception as exc:
            raise ServingError.wrap(exc, f"Signature '{signature_name}' failed") from exc
        return self._outputs(signature_name, outputs, output_filter)

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        method = self._methods[signature_name]
        if self._signatures[signature_name].execution_mode is not ExecutionMode.ASYNC:
            return self.call(signature_name, inputs, output_filter)
        try:
            outputs = await method(**inputs)
        except Exception as exc:
            raise ServingError.wrap(exc, f"Signature '{signature_name}' failed") from exc
        return self._outputs(signature_name, outputs, output_filter)

    def call_stream(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> Iterator[dict[str, npt.NDArray[Any]]]:
        try:
            parts = self._methods[signature_name](**inputs)
        except Exception as exc:
            raise ServingError.wrap(exc, f"Signature '{signature_name}' failed") from exc
        return self._parts(signature_name, parts, output_filter)

    def _parts(
        self, name: str, parts: Iterator[object], output_filter: frozenset[str] | None
    ) -> Iterator[dict[str, npt.NDArray[Any]]]:
        try:
            while True:
                try:
                    part = next(parts)
                except StopIteration:
                    return
                except Exception as exc:
                    raise ServingError.wrap(exc, f"Signature '{name}' failed") from exc
                yield self._outputs(name, part, output_filter)
        finally:
            close = getattr(parts, "close", None)
            if close is not None:
                close()  # the model's generator runs its finally

    async def call_stream_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> AsyncIterator[dict[str, npt.NDArray[Any]]]:
        parts = self._methods[signature_name](**inputs)
        try:
            while True:
                try:
                    part = await anext(parts)
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    raise ServingError.wrap(exc, f"Signature '{signature_name}' failed") from exc
                yield self._outputs(signature_name, part, output_filter)
        finally:
            await parts.aclose()

    def _outputs(
        self, name: str, outputs: object, output_filter: frozenset[str] | None
    ) -> dict[str, npt.NDArray[Any]]:
        if type(outputs) is not dict and not isinstance(outputs, Mapping):
            raise InternalError(
                f"Signature '{name}' returned {type(outputs).__name__}, not a mapping of outputs"
            )
        specs = self._signatures[name].outputs
        wanted = output_filter if output_filter is not None else specs.keys()
        if not outputs.keys() >= wanted:
            missing = sorted(set(wanted) - outputs.keys())
            raise InternalError(f"Signature '{name}' did not return output '{missing[0]}'")
        return {key: _array(name, outputs[key], specs[key]) for key in wanted}


def _nothing() -> None:
    """A stateful call made by :meth:`PythonServable.call` holds its version already."""


def _array(signature_name: str, value: object, spec: TensorSpec) -> npt.NDArray[Any]:
    if type(value) is np.ndarray and value.dtype == spec.dtype:
        return value  # the common case: already what the signature declares
    try:
        array = np.asarray(value, dtype=object if spec.is_string else None)
        return array if spec.is_string else array.astype(spec.dtype, copy=False)
    except (TypeError, ValueError) as exc:
        raise InternalError(
            f"Signature '{signature_name}' returned output '{spec.name}' that is not a "
            f"{spec.dtype} tensor: {exc}"
        ) from exc
