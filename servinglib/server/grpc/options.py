"""GrpcServerOptions and the TF Serving option formats it reads (channel arguments, SSL config)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final, final

import attrs

from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits
from servinglib.errors import InvalidArgumentError
from servinglib.protos.text_files import parse_text, read_text_file
from servinglib.server.auth.restricted_apis import UNRESTRICTED, RestrictedApis
from servinglib.server.header_forwarding import HeaderForwarding

if TYPE_CHECKING:
    from servinglib.server.grpc._rpc import RpcObserver

MAX_MESSAGE_BYTES: Final = 2**31 - 1
"""The largest message gRPC can carry, TF Serving's default for both directions (2 GiB - 1)."""

ChannelArgument = tuple[str, int | str]

DEFAULT_CHANNEL_ARGUMENTS: Final[tuple[ChannelArgument, ...]] = (
    # RPCs one connection may run at once (gRPC: unbounded). grpcio's client does not reliably
    # queue past it: a burst that reaches it while finished streams are still being released
    # is refused (REFUSED_STREAM, UNAVAILABLE to the caller). 1000 is gRPC's own bound on
    # calls waiting for a server to take them, past which it cancels them anyway.
    ("grpc.max_concurrent_streams", 1000),
    # With RPCs in flight, ping the client after 2 min of silence and cut it 20 s later if it
    # does not answer (gRPC: 2 h), so a vanished client's calls are cancelled.
    ("grpc.keepalive_time_ms", 120_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    # Keepalive enforcement: a client may ping once a minute while no data flows (gRPC: every
    # 5 min, which cuts clients keeping connections alive through proxies), and not at all on a
    # connection without RPCs; the second ping breaking these rules closes the connection.
    ("grpc.http2.min_ping_interval_without_data_ms", 60_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_ping_strikes", 2),
    # A connection must have sent the HTTP/2 preface and SETTINGS (and finished TLS) within 5 s
    # of being accepted, else it is closed (gRPC: 120 s, during which a client that connects
    # and sends nothing holds a file descriptor).
    ("grpc.server_handshake_timeout_ms", 5_000),
)
"""The server options servinglib sets besides message sizes; ``channel_arguments`` override them."""

SERVERS: Final = ("sync", "aio")
"""The gRPC servers :func:`~servinglib.server.grpc.create_server` runs (the first: default)."""

DEFAULT_MAX_THREADS: Final = 64
"""The synchronous server's worker threads: one per RPC in flight, enough for batches to fill."""


DEFAULT_MAX_CONNECTIONS: Final = 1000
"""Open connections the gRPC server accepts at most (the REST server's default too)."""


def parse_channel_arguments(text: str) -> tuple[ChannelArgument, ...]:
    """Parses TF Serving's ``--grpc_channel_arguments``: ``"key=value,key=value"``.

    A value that parses as a 32-bit integer is passed as an int, anything else
    as a string (TF Serving's rule).  Empty text gives no arguments.  Raises
    InvalidArgumentError naming the item for one without ``=`` or without a key.
    """
    arguments: list[ChannelArgument] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidArgumentError(
                f"gRPC channel argument {item!r} is not key=value (expected "
                "'key=value,key=value', e.g. 'grpc.max_connection_age_ms=60000')"
            )
        arguments.append((key, _int32_or_text(value.strip())))
    return tuple(arguments)


def _int32_or_text(value: str) -> int | str:
    try:
        number = int(value, 10)
    except ValueError:
        return value
    return number if -(2**31) <= number < 2**31 else value


def _channel_arguments(
    value: str | tuple[ChannelArgument, ...] | list[ChannelArgument],
) -> tuple[ChannelArgument, ...]:
    if isinstance(value, str):
        return parse_channel_arguments(value)
    return tuple((str(key), val) for key, val in value)


@final
@attrs.frozen
class SslConfig:
    """TLS for the gRPC server, as TF Serving's ``SSLConfig`` (``--ssl_config_file``).

    ``server_key`` / ``server_cert``: PEM text of the server's private key and
    certificate chain.  ``custom_ca``: PEM of the authorities client
    certificates must chain to.  ``client_verify``: require and verify a
    client certificate (mutual TLS; needs ``custom_ca``).  Raises
    InvalidArgumentError for a missing key or certificate, or
    ``client_verify`` without ``custom_ca``.  Immutable, so thread-safe.
    """

    server_key: str = attrs.field(repr=False)
    server_cert: str
    custom_ca: str = ""
    client_verify: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.server_key or not self.server_cert:
            raise InvalidArgumentError("The SSL config needs both server_key and server_cert")
        if self.client_verify and not self.custom_ca:
            raise InvalidArgumentError(
                "The SSL config sets client_verify but no custom_ca to verify clients against"
            )

    @classmethod
    def parse(cls, text: str, source: str = "") -> SslConfig:
        """Parses TF Serving's text format (``server_key: "..." server_cert: "..."``).

        Raises InvalidArgumentError quoting the parser for a syntax error or
        an unknown field, and as the constructor does.
        """
        from servinglib.protos import ssl_config_pb2

        message = parse_text(text, ssl_config_pb2.SSLConfig(), "SSL config", source)
        return cls(
            message.server_key, message.server_cert, message.custom_ca, message.client_verify
        )

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> SslConfig:
        """Reads an ``--ssl_config_file``; NotFoundError / PermissionDeniedError, else as parse."""
        path = os.fspath(path)
        return cls.parse(read_text_file(path, "SSL config"), source=path)


@final
@attrs.frozen
class GrpcServerOptions:
    """How the gRPC server listens and behaves.

    Each field, its default and unit: docs/guides/grpc.md ("Options").
    Port 0 picks a free port (``create_server`` returns it).
    ``channel_arguments`` (pairs, or ``"key=value,key=value"`` text) override
    the size limits and :data:`DEFAULT_CHANNEL_ARGUMENTS` naming the same
    option.  Past ``max_concurrent_rpcs`` new RPCs fail with
    RESOURCE_EXHAUSTED; past ``max_connections`` a new connection is closed
    once accepted.  ``server``: ``"sync"`` (grpcio's synchronous server, with
    ``max_threads`` worker threads) or ``"aio"`` (grpc.aio).
    ``restricted_apis``: the API groups whose RPCs need a credential in their
    metadata (``--grpc_restricted_protocol``; default: none, every group open).
    ``header_forwarding``: the metadata of V2 inference calls that reaches the model as
    request parameters (``--grpc_header_forward_pattern``; default: none).
    ``rpc_observer``: deprecated; pass ``create_server(..., on_request=...)``.
    Immutable, so thread-safe.
    """

    host: str = "0.0.0.0"
    port: int = attrs.field(
        default=8500, validator=[attrs.validators.ge(0), attrs.validators.le(65535)]
    )
    unix_socket_path: str | None = None
    max_receive_message_bytes: int = attrs.field(
        default=MAX_MESSAGE_BYTES,
        validator=[attrs.validators.ge(1), attrs.validators.le(MAX_MESSAGE_BYTES)],
    )
    max_send_message_bytes: int = attrs.field(
        default=MAX_MESSAGE_BYTES,
        validator=[attrs.validators.ge(1), attrs.validators.le(MAX_MESSAGE_BYTES)],
    )
    channel_arguments: tuple[ChannelArgument, ...] = attrs.field(
        default=(), converter=_channel_arguments
    )
    ssl: SslConfig | None = None
    grace_period_s: float = attrs.field(default=10.0, validator=attrs.validators.ge(0))
    max_concurrent_rpcs: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    tensor_content_responses: bool = False
    health_poll_interval_s: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))
    decode_limits: DecodeLimits = DEFAULT_LIMITS
    server: str = attrs.field(default=SERVERS[0], validator=attrs.validators.in_(SERVERS))
    max_threads: int = attrs.field(default=DEFAULT_MAX_THREADS, validator=attrs.validators.ge(1))
    max_connections: int = attrs.field(
        default=DEFAULT_MAX_CONNECTIONS, validator=attrs.validators.ge(1)
    )
    restricted_apis: RestrictedApis = UNRESTRICTED
    header_forwarding: HeaderForwarding | None = None
    rpc_observer: RpcObserver | None = attrs.field(default=None, eq=False)

    def grpc_options(self) -> list[ChannelArgument]:
        """The options passed to ``grpc.aio.server``, each key once: ours, then the user's.

        gRPC takes the first of duplicate keys, so the user's channel
        arguments replace ours instead of following them.
        """
        options: dict[str, int | str] = {
            "grpc.max_receive_message_length": self.max_receive_message_bytes,
            "grpc.max_send_message_length": self.max_send_message_bytes,
            "grpc.max_allowed_incoming_connections": self.max_connections,
            **dict(DEFAULT_CHANNEL_ARGUMENTS),
        }
        options.update(self.channel_arguments)
        return list(options.items())
