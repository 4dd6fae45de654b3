"""The flags of ``servinglib-server``: ``tensorflow_model_server``'s names, syntax and defaults."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, final

import attrs

from servinglib.errors import ServingError
from servinglib.server.auth.api_groups import ApiGroup
from servinglib.server.auth.restricted_apis import RestrictedApis
from servinglib.server.cli.byte_size import parse_byte_size
from servinglib.server.header_forwarding import HeaderForwarding
from servinglib.server.plane.response_cache_config import ResponseCacheConfig

_log = logging.getLogger(__name__)

PROGRAM = "servinglib-server"

CONTROL_MODES = ("none", "poll", "explicit")
"""Triton's model control modes (``--model_control_mode``)."""

# TF Serving's knobs of its C++ runtime: accepted, so manifests keep working, and ignored.
TUNING_KNOBS = (
    "rest_api_num_threads",
    "enable_profiler",
    "flush_filesystem_caches",
    "per_process_gpu_memory_fraction",
    "remove_unused_fields_from_bundle_metagraph",
    "num_tflite_pools",
    "num_tflite_interpreters_per_pool",
    "xla_cpu_compilation_enabled",
    "xla_gpu_compilation_enabled",
    "skip_initialize_tpu",
    "enable_signature_method_name_check",
    "thread_pool_factory_config_file",
    "tensorflow_session_config_file",
)

# Flags whose behaviour we do not have: serving on would silently change what clients get.
REJECTED = {
    "use_alts_credentials": "ALTS (Google's transport security) is not supported; use "
    "--ssl_config_file for TLS",
    "prefer_tflite_model": "TensorFlow Lite models are not supported; servinglib serves the "
    "SavedModel",
    "mixed_precision": "mixed-precision rewriting is not supported; export the model in the "
    "precision to serve",
    "use_tflite_model": "TensorFlow Lite models are not supported; servinglib serves the "
    "SavedModel",
}


class FlagError(Exception):
    """A flag value that cannot be served; its message is the one line the CLI prints."""


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"true", "1", "yes", "t", "y"}:
        return True
    if lowered in {"false", "0", "no", "f", "n"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _byte_size(text: str) -> int:
    try:
        return parse_byte_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _positive(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _grpc_server(text: str) -> str:
    if text not in ("sync", "aio"):
        raise argparse.ArgumentTypeError(f"expected sync or aio, got {text!r}")
    return text


def _num_workers(text: str) -> int:
    if text.strip().lower() == "auto":
        return usable_cores()
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a number of processes >= 1 or auto, got {value}"
        )
    return value


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity), as ``--num_workers=auto`` counts them."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# What each value type of _flag parses with: messages name the flag, never a function.
_PARSERS: dict[Any, Any] = {int: _int, float: _float}


@final
@attrs.frozen
class ServerFlags:
    """The parsed command line, with TF Serving's defaults.  Immutable."""

    port: int = 8500
    grpc_socket_path: str = ""
    rest_api_port: int = 0
    rest_api_timeout_in_ms: int = 30_000
    rest_api_enable_cors_support: bool = False
    grpc_channel_arguments: str = ""
    ssl_config_file: str = ""
    enable_grpc_healthcheck_service: bool = False
    grpc_max_threads: int = 64  # the synchronous gRPC server's worker threads
    grpc_max_connections: int = 1000
    model_name: str = "default"
    model_base_path: str = ""
    model_config_file: str = ""
    model_config_file_poll_wait_seconds: float = 0.0
    file_system_poll_wait_seconds: float = 1.0
    file_system_settle_window_seconds: float = 0.5
    version_done_marker: str = ""
    model_cache_dir: str = ""
    model_download_concurrency: int = 8
    allow_version_labels_for_unavailable_models: bool = False
    saved_model_tags: str = "serve"
    platform_config_file: str = ""
    num_load_threads: int = 0
    num_unload_threads: int = 0
    max_num_load_retries: int = 5
    load_retry_interval_micros: int = 60_000_000
    enable_batching: bool = False
    batching_parameters_file: str = ""
    enable_per_model_batching_parameters: bool = False
    enable_model_warmup: bool = True
    num_request_iterations_for_warmup: int = 0
    monitoring_config_file: str = ""
    tensorflow_session_parallelism: int = 0
    tensorflow_intra_op_parallelism: int = 0
    tensorflow_inter_op_parallelism: int = 0
    enable_serialization_as_tensor_content: bool = False
    # Triton's (its --model-repository, --model-control-mode, ... with underscores)
    model_repository: str = ""
    model_control_mode: str = "none"
    load_model: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    http_restricted_api: tuple[str, ...] = ()
    grpc_restricted_protocol: tuple[str, ...] = ()
    http_header_forward_pattern: str = ""
    grpc_header_forward_pattern: str = ""
    cache_config: str = ""  # "local,size=BYTES": the response cache; "": none
    # servinglib's own
    rest_api_host: str = "0.0.0.0"  # every interface, as TF Serving
    grpc_host: str = "0.0.0.0"
    grpc_server: str = "sync"  # grpcio's synchronous server, or "aio"
    rest_api_max_header_bytes: int = 64 << 10
    rest_api_idle_timeout_seconds: float = 5.0
    rest_api_request_read_timeout_seconds: float = 60.0
    rest_api_max_connections: int = 1000
    rest_ssl_certfile: str = ""
    rest_ssl_keyfile: str = ""
    rest_ssl_ca_certs: str = ""
    max_tensor_fill_bytes: int = 64 << 20
    demo: bool = False
    allow_python_code_execution: bool = False
    model_platform: str = ""  # "": inferred from the versions under model_base_path
    allow_remote_model_management: bool = False
    model_management_roots: str = ""
    allow_remote_python_models: bool = False
    aspired_version_policy: str = "availability"
    total_model_memory_limit_bytes: int | None = None
    model_memory_budget: int | None = None
    load_models_on_demand: bool = False
    start_degraded: bool = False
    max_requests_in_flight_per_model: int | None = None
    max_pool_calls_per_model: int = 0  # 0: half the worker pool
    max_streams_per_model: int = 64
    stream_max_buffered_bytes: int = 64 << 20
    stream_idle_timeout_seconds: float = 60.0
    enable_metrics: bool = False
    enable_tracing: bool = False
    drain_delay_seconds: float = 0.0
    shutdown_grace_seconds: float = 10.0
    num_workers: int = 1
    freeze_heap: bool = True
    malloc_trim: bool = True
    log_level: str = "INFO"
    log_requests: bool = False
    log_format: str = "text"
    show_paths_in_errors: bool = False
    request_log_max_queued_bytes: int = 256 << 20
    request_log_max_files: int = 100
    request_log_max_total_bytes: int = 1 << 30
    ignored: tuple[str, ...] = ()


class _Parser(argparse.ArgumentParser):
    """argparse raising FlagError (one line, no usage dump) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise FlagError(message.removeprefix("argument "))

    def unknown(self, argument: str) -> str:
        """The message for an argument no flag takes, naming the closest flag."""
        if not argument.startswith("-"):
            return f"unexpected argument {argument!r}: flags are --name=value"
        typed = argument.split("=", 1)[0]
        known = [flag for flag in self._option_string_actions if flag.startswith("--")]
        closest = difflib.get_close_matches("--" + typed.lstrip("-"), known, n=1, cutoff=0.6)
        hint = f" (did you mean {closest[0]}?)" if closest else ""
        return f"unknown flag {typed}{hint}"


class _HelpFormatter(argparse.HelpFormatter):
    """Each flag with its default as TF Serving's help shows it: ``--port=8500``, ``--x=""``."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=44, width=100)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        used = _USED_WHEN_EMPTY.get(action.dest)
        shown = _shown(used() if used is not None and not action.default else action.default)
        return f"{action.option_strings[-1]}={shown}"


def _default_cache_dir() -> str:
    from servinglib.sources.remote_mirror import default_cache_dir  # imported for --help alone

    return default_cache_dir()


# Flags whose empty default stands for a value only known at run time: --help shows that value.
_USED_WHEN_EMPTY: dict[str, Callable[[], object]] = {"model_cache_dir": _default_cache_dir}


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, str):
        return f'"{default}"'
    if isinstance(default, float):
        return f"{default:g}"
    if default is None:  # a repeated flag given no time
        return '""'
    return str(default)


def make_parser() -> _Parser:
    """The argument parser (``--help`` text included); errors raise FlagError."""
    parser = _Parser(
        prog=PROGRAM,
        usage=f"{PROGRAM} [--flag=value ...]",
        description="Serve TensorFlow SavedModels and Python models over TF Serving's REST and "
        "gRPC APIs and KServe V2, with tensorflow_model_server's flags.",
        allow_abbrev=False,
        formatter_class=_HelpFormatter,
    )
    _network_flags(parser.add_argument_group("network (TF Serving)"))
    _model_flags(parser.add_argument_group("models (TF Serving)"))
    _batching_flags(parser.add_argument_group("batching and monitoring (TF Serving)"))
    _repository_flags(parser.add_argument_group("Triton model repository (Triton's flags)"))
    _access_flags(parser.add_argument_group("who may call (Triton's restricted APIs; REST TLS)"))
    _own_flags(parser.add_argument_group("servinglib's own"))
    hidden = parser.add_argument_group("accepted and ignored (TF Serving's C++ tuning knobs)")
    # Booleans among them may stand alone (--enable_profiler), so a value is optional.
    for name in TUNING_KNOBS:
        hidden.add_argument(
            f"--{name}", dest=f"knob_{name}", nargs="?", const="true", help=argparse.SUPPRESS
        )
    for name in REJECTED:
        hidden.add_argument(
            f"--{name}", dest=f"rejected_{name}", nargs="?", const="true", help=argparse.SUPPRESS
        )
    return parser


_DEFAULTS = ServerFlags()
# Flags whose ServerFlags default None ("no limit") is written 0 on the command line.
_ZERO_IS_NONE = (
    "total_model_memory_limit_bytes",
    "model_memory_budget",
    "max_requests_in_flight_per_model",
)


def _flag(group: argparse._ArgumentGroup, name: str, kind: Any, text: str) -> None:  # noqa: ANN401 - a type or a parse function
    """``--name`` with ServerFlags' default; booleans take ``--name``, ``--name=true|false``."""
    default = getattr(_DEFAULTS, name)
    if kind is bool:
        group.add_argument(
            f"--{name}", type=_bool, nargs="?", const=True, default=default, help=text
        )
    else:
        default = 0 if default is None and name in _ZERO_IS_NONE else default
        group.add_argument(f"--{name}", type=_PARSERS.get(kind, kind), default=default, help=text)


def _network_flags(group: argparse._ArgumentGroup) -> None:
    _flag(group, "port", _port, "gRPC port; 0: no gRPC TCP port")
    _flag(group, "grpc_socket_path", str, "also serve gRPC on this UNIX socket")
    _flag(group, "rest_api_port", _port, "REST port; 0: no REST")
    _flag(group, "rest_api_timeout_in_ms", int, "REST request timeout, ms; past it: 504")
    _flag(group, "rest_api_enable_cors_support", bool, "answer CORS preflights, any origin")
    _flag(group, "grpc_channel_arguments", str, "gRPC server options: key=value,key=value")
    _flag(group, "ssl_config_file", str, "TLS for gRPC: a text SSLConfig file")
    _flag(group, "enable_grpc_healthcheck_service", bool, "grpc.health.v1 (always served here)")
    _flag(group, "grpc_max_threads", _positive, "gRPC RPCs run at once (--grpc_server=sync)")
    _flag(group, "grpc_max_connections", int, "open gRPC connections; past it: closed")


def _model_flags(group: argparse._ArgumentGroup) -> None:
    _flag(group, "model_name", str, "the model's name (without --model_config_file)")
    _flag(group, "model_base_path", str, "the model's directory of versions")
    _flag(group, "model_config_file", str, "a models.config (text ModelServerConfig)")
    _flag(group, "model_config_file_poll_wait_seconds", float, "re-read it every N s; 0: never")
    _flag(group, "file_system_poll_wait_seconds", float, "poll model directories every N s")
    _flag(
        group,
        "file_system_settle_window_seconds",
        _non_negative,
        "a new version loads once no file in it changed for N s",
    )
    _flag(group, "version_done_marker", str, "a version loads once this file is in it")
    _flag(group, "model_cache_dir", str, "where versions in s3://, gs://, az:// are downloaded")
    _flag(group, "model_download_concurrency", _positive, "files downloaded at once per version")
    _flag(group, "allow_version_labels_for_unavailable_models", bool, "labels on loading versions")
    _flag(group, "saved_model_tags", str, "comma-separated MetaGraph tags to load")
    _flag(group, "platform_config_file", str, "per-platform options: a text PlatformConfigMap")
    _flag(group, "num_load_threads", int, "threads loading versions; 0: one at a time")
    _flag(group, "num_unload_threads", int, "threads unloading versions")
    _flag(group, "max_num_load_retries", int, "retries of a failed load")
    _flag(group, "load_retry_interval_micros", int, "wait between load retries, µs")
    _flag(group, "enable_model_warmup", bool, "replay assets.extra/tf_serving_warmup_requests")
    _flag(group, "num_request_iterations_for_warmup", int, "runs of each warmup record; 0: one")
    _flag(group, "tensorflow_session_parallelism", int, "TF intra- and inter-op threads; 0: auto")
    _flag(group, "tensorflow_intra_op_parallelism", int, "TF intra-op threads; 0: auto")
    _flag(group, "tensorflow_inter_op_parallelism", int, "TF inter-op threads; 0: auto")
    _flag(group, "enable_serialization_as_tensor_content", bool, "gRPC Predict: tensor_content")


def _batching_flags(group: argparse._ArgumentGroup) -> None:
    _flag(group, "enable_batching", bool, "batch concurrent requests")
    _flag(group, "batching_parameters_file", str, "text BatchingParameters")
    _flag(group, "enable_per_model_batching_parameters", bool, "batching_params.pbtxt per version")
    _flag(group, "monitoring_config_file", str, "text MonitoringConfig (Prometheus)")


def _repository_flags(group: argparse._ArgumentGroup) -> None:
    _flag(group, "model_repository", str, "serve a Triton model repository: <dir>/<model>/")
    _flag(group, "cache_config", str, "response cache: local,size=BYTES (Triton's --cache-config)")
    group.add_argument(
        "--model_control_mode",
        choices=CONTROL_MODES,
        default=_DEFAULTS.model_control_mode,
        help="none: load the repository at start; poll: and follow its changes; explicit: "
        "load what --load_model and the repository API name",
    )
    group.add_argument(
        "--load_model",
        action="append",
        default=None,
        help="explicit mode: a model of the repository to load at start (repeat; * for all); "
        "with --load_models_on_demand: a model loaded at start and never unloaded",
    )
    _flag(group, "repository_poll_secs", _positive_seconds, "poll mode: look every N s")


def _access_flags(group: argparse._ArgumentGroup) -> None:
    groups = ",".join(group.value for group in ApiGroup)
    group.add_argument(
        "--http_restricted_api",
        action="append",
        default=None,
        metavar="GROUP[,GROUP...]:HEADER=VALUE",
        help="REST requests of these API groups need header HEADER=VALUE (VALUE @PATH: the "
        f"file's text, re-read when it changes); repeatable; groups: {groups}",
    )
    group.add_argument(
        "--grpc_restricted_protocol",
        action="append",
        default=None,
        metavar="GROUP[,GROUP...]:KEY=VALUE",
        help="gRPC calls of these API groups need metadata triton-grpc-protocol-KEY=VALUE "
        "(VALUE @PATH as above); repeatable",
    )
    _flag(
        group,
        "http_header_forward_pattern",
        str,
        "REST V2 inference headers whose name this regex matches reach the model as parameters",
    )
    _flag(
        group,
        "grpc_header_forward_pattern",
        str,
        "gRPC V2 inference metadata whose key this regex matches reach the model as parameters",
    )
    _flag(group, "rest_ssl_certfile", str, "serve REST over TLS with this PEM certificate chain")
    _flag(group, "rest_ssl_keyfile", str, "its PEM private key (empty: in the certificate file)")
    _flag(group, "rest_ssl_ca_certs", str, "require REST clients' certificates signed by these")


def _own_flags(group: argparse._ArgumentGroup) -> None:
    _flag(group, "rest_api_host", str, "REST bind address")
    _flag(group, "grpc_host", str, "gRPC bind address")
    _flag(group, "grpc_server", _grpc_server, "sync (thread pool) or aio (event loop)")
    _flag(group, "rest_api_max_header_bytes", int, "REST request line + headers; past it: 431")
    _flag(group, "rest_api_idle_timeout_seconds", float, "close REST connections idle this long")
    _flag(group, "rest_api_request_read_timeout_seconds", float, "a request must arrive in; 408")
    _flag(group, "rest_api_max_connections", int, "open REST connections; past it: 503")
    _flag(group, "max_tensor_fill_bytes", int, "bytes one request's few values may fill")
    _flag(group, "demo", bool, "serve the bundled example models")
    _flag(group, "allow_python_code_execution", bool, "serve python models (runs their model.py)")
    _flag(group, "model_platform", str, "--model_base_path's platform; empty: what it holds")
    _flag(
        group,
        "allow_remote_model_management",
        bool,
        "let REST and gRPC clients load, unload and reload models (Triton's repository API "
        "over both, HandleReloadConfigRequest); off: 403 / PERMISSION_DENIED",
    )
    _flag(
        group,
        "model_management_roots",
        str,
        "comma-separated directories remote loads may name; default: those holding the "
        "configured models",
    )
    _flag(
        group,
        "allow_remote_python_models",
        bool,
        "let remote loads name new paths of python models (runs their code)",
    )
    group.add_argument(
        "--aspired_version_policy",
        choices=("availability", "resource"),
        default="availability",
        help="load a new version before unloading the old (availability) or after (resource)",
    )
    _flag(group, "total_model_memory_limit_bytes", int, "RAM budget of all models; 0: none")
    _flag(
        group,
        "load_models_on_demand",
        bool,
        "register the configured models and load each on its first request (--load_model pins)",
    )
    _flag(
        group,
        "model_memory_budget",
        _byte_size,
        "RAM budget of all models (512MiB, 2GB, ...); on demand, the LRU idle ones unload to "
        "make room; 0: none",
    )
    _flag(group, "start_degraded", bool, "serve the models that loaded when others fail at start")
    _flag(
        group,
        "max_requests_in_flight_per_model",
        int,
        "beyond it: 503 / UNAVAILABLE at once; 0: no bound",
    )
    _flag(
        group,
        "max_pool_calls_per_model",
        int,
        "worker-pool calls of one model at once, the rest wait; 0: half the pool",
    )
    _flag(
        group,
        "max_streams_per_model",
        _positive,
        "streams (ModelStreamInfer requests, generate, generate_stream) of one model open at "
        "once; beyond it: 503 / UNAVAILABLE at once",
    )
    _flag(
        group,
        "stream_max_buffered_bytes",
        _positive,
        "bytes of parts all streams hold ahead of their clients; past it: the models wait",
    )
    _flag(
        group,
        "stream_idle_timeout_seconds",
        _positive_seconds,
        "a stream whose client takes no part for this long while more wait is ended",
    )
    _flag(group, "enable_metrics", bool, "Prometheus at /monitoring/prometheus/metrics, /metrics")
    _flag(group, "enable_tracing", bool, "OpenTelemetry spans by OTLP, set up by OTEL_* variables")
    _flag(group, "drain_delay_seconds", float, "after SIGTERM: not ready, still serving, this long")
    _flag(group, "shutdown_grace_seconds", float, "then: requests in flight finish within this")
    _flag(
        group, "num_workers", _num_workers, "server processes sharing the ports; auto: one per core"
    )
    _flag(group, "freeze_heap", bool, "keep loaded models out of full GC passes (gc.freeze)")
    _flag(group, "malloc_trim", bool, "give freed heap back to the OS once RSS grew 64 MiB")
    _flag(group, "log_level", str, "DEBUG, INFO, WARNING or ERROR")
    _flag(group, "log_requests", bool, "log one line per request")
    _flag(group, "log_format", str, "text, or json: one JSON object per line")
    _flag(
        group,
        "show_paths_in_errors",
        bool,
        "answer clients with the server's paths in error messages (else <model>, <model cache>)",
    )
    _flag(
        group,
        "request_log_max_queued_bytes",
        _positive,
        "logging_config: sampled requests waiting to be written, bytes; past it: dropped",
    )
    _flag(group, "request_log_max_files", _positive, "logging_config: files kept per prefix")
    _flag(
        group,
        "request_log_max_total_bytes",
        _positive,
        "logging_config: bytes of the files kept per prefix; the oldest are deleted",
    )
    group.add_argument("--version", action="store_true", help="print versions and exit")


def parse_flags(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> ServerFlags:
    """The flags of ``argv`` (without the program name), with Docker-style env defaults.

    ``MODEL_NAME`` and ``MODEL_BASE_PATH`` (TF Serving's Docker image):
    without ``--model_base_path`` and ``--model_config_file``, the model
    ``$MODEL_NAME`` (default ``model``) is served from
    ``$MODEL_BASE_PATH/$MODEL_NAME``.  Raises FlagError, one line naming
    the flag as typed, for an unknown flag (with the closest known one), a
    malformed value, and values that cannot be served.
    """
    environ = os.environ if environ is None else environ
    parser = make_parser()
    namespace, unknown = parser.parse_known_args(list(argv))
    if unknown:
        raise FlagError(parser.unknown(unknown[0]))
    values = vars(namespace)
    for name in _ZERO_IS_NONE:
        values[name] = values[name] or None
    for name, reason in REJECTED.items():
        value = values.pop(f"rejected_{name}")
        if value is not None and value.strip().lower() not in {"false", "0", "no", ""}:
            raise FlagError(f"--{name} is not supported: {reason}")
    ignored = tuple(name for name in TUNING_KNOBS if values.pop(f"knob_{name}") is not None)
    values.pop("version", None)
    for name in ("load_model", "http_restricted_api", "grpc_restricted_protocol"):
        values[name] = tuple(values[name] or ())
    given = {a for a in argv if a.startswith("--")}
    if not values["model_base_path"] and not values["model_config_file"]:
        base = environ.get("MODEL_BASE_PATH")
        if base:
            if not any(a.split("=")[0] == "--model_name" for a in given):
                values["model_name"] = environ.get("MODEL_NAME", "model")
            values["model_base_path"] = os.path.join(base, values["model_name"])
    flags = ServerFlags(**values, ignored=ignored)
    if flags.log_format not in ("text", "json"):
        raise FlagError(f"--log_format must be text or json, not {flags.log_format}")
    _check(flags)
    return flags


def _check(flags: ServerFlags) -> None:
    if not (flags.demo or flags.model_base_path or flags.model_config_file) and not (
        flags.model_repository
    ):
        raise FlagError(
            "No models to serve: give --model_base_path (and --model_name), "
            "--model_config_file, --model_repository, or --demo for the bundled example models"
        )
    _check_repository(flags)
    if flags.model_platform and not flags.model_base_path:
        raise FlagError(
            "--model_platform is the platform of --model_base_path; a --model_config_file "
            "names each model's model_platform"
        )
    if flags.batching_parameters_file and not flags.enable_batching:
        raise FlagError("--batching_parameters_file needs --enable_batching")
    if flags.enable_per_model_batching_parameters and not flags.enable_batching:
        raise FlagError("--enable_per_model_batching_parameters needs --enable_batching")
    if (flags.model_management_roots or flags.allow_remote_python_models) and not (
        flags.allow_remote_model_management
    ):
        raise FlagError(
            "--model_management_roots and --allow_remote_python_models need "
            "--allow_remote_model_management"
        )
    if flags.port and flags.port == flags.rest_api_port:
        raise FlagError(f"--port and --rest_api_port must differ (both are {flags.port})")
    if flags.rest_api_timeout_in_ms <= 0:
        raise FlagError("--rest_api_timeout_in_ms must be positive")
    parallelism = (
        flags.tensorflow_session_parallelism,
        flags.tensorflow_intra_op_parallelism,
        flags.tensorflow_inter_op_parallelism,
    )
    if all(p > 0 for p in parallelism):
        raise FlagError(
            "Give --tensorflow_session_parallelism or the intra/inter-op flags, not all three"
        )
    _check_limits(flags)
    _check_access(flags)
    if flags.max_pool_calls_per_model < 0:
        raise FlagError("--max_pool_calls_per_model must not be negative (0: half the pool)")
    if flags.drain_delay_seconds < 0 or flags.shutdown_grace_seconds < 0:
        raise FlagError("--drain_delay_seconds and --shutdown_grace_seconds must not be negative")
    if flags.num_workers > 1 and flags.grpc_socket_path:
        raise FlagError(
            "--grpc_socket_path serves one process: it cannot be used with --num_workers"
        )
    if flags.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise FlagError(f"--log_level must be DEBUG, INFO, WARNING or ERROR, not {flags.log_level}")


def _check_repository(flags: ServerFlags) -> None:
    if flags.cache_config:
        try:
            ResponseCacheConfig.parse(flags.cache_config)
        except ServingError as error:
            raise FlagError(f"--cache_config: {error.message}") from None
    if not flags.model_repository and flags.model_control_mode != "none":
        raise FlagError("--model_control_mode and --load_model need --model_repository")
    pins = flags.load_models_on_demand
    if flags.load_model and not pins and not flags.model_repository:
        raise FlagError(
            "--model_control_mode and --load_model need --model_repository (--load_model also "
            "pins a model with --load_models_on_demand)"
        )
    if flags.load_model and not pins and flags.model_control_mode != "explicit":
        raise FlagError("--load_model needs --model_control_mode=explicit")
    if (
        flags.model_memory_budget is not None
        and flags.total_model_memory_limit_bytes is not None
        and flags.model_memory_budget != flags.total_model_memory_limit_bytes
    ):
        raise FlagError(
            "--model_memory_budget and --total_model_memory_limit_bytes are one budget: give one"
        )
    if "*" in flags.load_model and len(flags.load_model) > 1:
        raise FlagError("--load_model=* loads every model: give it alone, as Triton requires")
    if flags.model_control_mode == "explicit" and flags.num_workers > 1:
        raise FlagError(
            "--model_control_mode=explicit changes what one process serves: it cannot be used "
            "with --num_workers"
        )


def _check_access(flags: ServerFlags) -> None:
    """The restrictions parse and their files can be read; REST TLS has what it needs."""
    for name, parse in (
        ("http_restricted_api", RestrictedApis.http),
        ("grpc_restricted_protocol", RestrictedApis.grpc),
    ):
        try:
            parse(getattr(flags, name))
        except (ValueError, OSError) as error:
            raise FlagError(f"--{name}: {error}") from None
    for name in ("http_header_forward_pattern", "grpc_header_forward_pattern"):
        try:
            HeaderForwarding(getattr(flags, name))
        except ValueError as error:
            raise FlagError(f"--{name}: {error}") from None
    if (flags.rest_ssl_keyfile or flags.rest_ssl_ca_certs) and not flags.rest_ssl_certfile:
        raise FlagError("--rest_ssl_keyfile and --rest_ssl_ca_certs need --rest_ssl_certfile")
    if flags.rest_ssl_certfile and not flags.rest_api_port:
        raise FlagError("--rest_ssl_certfile needs --rest_api_port (REST is off)")


def _check_limits(flags: ServerFlags) -> None:
    for name in (
        "rest_api_max_header_bytes",
        "rest_api_idle_timeout_seconds",
        "rest_api_request_read_timeout_seconds",
        "rest_api_max_connections",
        "grpc_max_connections",
    ):
        if not getattr(flags, name) > 0:
            raise FlagError(f"--{name} must be positive")
    if flags.max_tensor_fill_bytes < 0:
        raise FlagError("--max_tensor_fill_bytes must not be negative")
