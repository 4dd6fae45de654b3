"""GrpcServerOptions: channel arguments, message sizes, TLS from TF Serving's SSL config."""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_servers import serving
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.server.grpc import GrpcServerOptions, SslConfig, parse_channel_arguments
from servinglib.server.grpc.options import DEFAULT_CHANNEL_ARGUMENTS
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until


def test_channel_arguments_parse_as_tf_serving_does() -> None:
    """Integers become ints (32-bit), anything else strings; bad items name themselves."""
    assert parse_channel_arguments("a=1,b=x, c = 3000000000 ,") == (
        ("a", 1),
        ("b", "x"),
        ("c", "3000000000"),
    )
    assert GrpcServerOptions(channel_arguments="k=2").channel_arguments == (("k", 2),)
    with pytest.raises(InvalidArgumentError, match="'oops'"):
        parse_channel_arguments("a=1,oops")


def test_options_validate_sizes_and_ports() -> None:
    """Message sizes stay within gRPC's 2 GiB - 1, ports within 0..65535."""
    assert GrpcServerOptions().max_receive_message_bytes == 2**31 - 1
    with pytest.raises(ValueError, match="max_send_message_bytes"):
        GrpcServerOptions(max_send_message_bytes=2**31)
    with pytest.raises(ValueError, match="port"):
        GrpcServerOptions(port=70000)


def predict(channel: grpc.Channel, size: int) -> None:
    """Predict with ``size`` floats on the module's python model."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "py"
    request.inputs["x"].dtype = 1
    request.inputs["x"].tensor_shape.dim.add(size=size)
    request.inputs["x"].tensor_content = np.zeros(size, "<f4").tobytes()
    prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)


def test_max_receive_message_size_is_enforced(core: ServerCore, server_kind: str) -> None:
    """A request above max_receive_message_bytes fails RESOURCE_EXHAUSTED; smaller ones pass."""
    with (
        serving(core, server=server_kind, max_receive_message_bytes=1000) as served,
        served.channel() as channel,
    ):
        predict(channel, 10)
        with pytest.raises(grpc.RpcError) as caught:
            predict(channel, 1000)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_channel_arguments_replace_ours() -> None:
    """Each option is passed once: the user's value where they name it, ours elsewhere."""
    options = GrpcServerOptions(
        max_receive_message_bytes=1000,
        channel_arguments="grpc.max_receive_message_length=5,grpc.max_concurrent_streams=7",
    ).grpc_options()
    keys = [key for key, _ in options]
    assert len(keys) == len(set(keys))
    values = dict(options)
    assert values["grpc.max_receive_message_length"] == 5
    assert values["grpc.max_concurrent_streams"] == 7
    assert values["grpc.max_send_message_length"] == 2**31 - 1
    for key, value in DEFAULT_CHANNEL_ARGUMENTS:
        if key != "grpc.max_concurrent_streams":
            assert values[key] == value


def test_channel_argument_caps_the_message_size(core: ServerCore, server_kind: str) -> None:
    """max_receive_message_length=4 MiB as a channel argument refuses a 5 MiB request."""
    limit = "grpc.max_receive_message_length=4194304"
    unlimited = [("grpc.max_receive_message_length", -1)]  # the client takes any answer
    with (
        serving(core, server=server_kind, channel_arguments=limit) as served,
        grpc.insecure_channel(served.address, options=unlimited) as channel,
    ):
        predict(channel, 1 << 18)  # 1 MiB
        with pytest.raises(grpc.RpcError) as caught:
            predict(channel, 5 << 18)  # 5 MiB
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_channel_argument_caps_streams_per_connection(core: ServerCore, server_kind: str) -> None:
    """With max_concurrent_streams=1 an open Watch stream holds back a second RPC on its channel."""
    request = health_pb2.HealthCheckRequest()
    streams = "grpc.max_concurrent_streams=1"
    with (
        serving(core, server=server_kind, channel_arguments=streams) as served,
        served.channel() as channel,
    ):
        watch = health_pb2_grpc.HealthStub(channel).Watch(request, timeout=60)
        next(watch)  # the stream is open on the server
        with pytest.raises(grpc.RpcError) as caught:
            health_pb2_grpc.HealthStub(channel).Check(request, timeout=2)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # A local subchannel pool gives the second channel a connection of its own.
        own = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(served.address, options=own) as other:
            health_pb2_grpc.HealthStub(other).Check(request, timeout=30)
        watch.cancel()
        health_pb2_grpc.HealthStub(channel).Check(request, timeout=30)


def test_ssl_config_text_format(tmp_path: Path) -> None:
    """SslConfig reads TF Serving's text format and rejects incomplete configs."""
    path = tmp_path / "ssl.config"
    path.write_text('server_key: "K" server_cert: "C" custom_ca: "A" client_verify: true')
    assert SslConfig.read(path) == SslConfig("K", "C", "A", client_verify=True)
    with pytest.raises(InvalidArgumentError, match="server_cert"):
        SslConfig.parse('server_key: "K"')
    with pytest.raises(InvalidArgumentError, match="custom_ca"):
        SslConfig.parse('server_key: "K" server_cert: "C" client_verify: true')
    path.write_text("no_such_field: 1")
    with pytest.raises(InvalidArgumentError, match=r"ssl\.config"):
        SslConfig.read(path)
    with pytest.raises(NotFoundError):
        SslConfig.read(tmp_path / "missing")


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[str, str]:
    """A self-signed key and certificate for 127.0.0.1 (PEM), made by openssl."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return key.read_text(), cert.read_text()


def test_tls_server_answers_tls_clients(
    core: ServerCore, server_kind: str, certificate: tuple[str, str]
) -> None:
    """With an SslConfig the server speaks TLS: a client trusting its certificate predicts."""
    key, cert = certificate
    with serving(core, server=server_kind, ssl=SslConfig(key, cert)) as served:
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.encode())
        with grpc.secure_channel(served.address, credentials) as channel:
            predict(channel, 2)


def _closed_within(client: socket.socket, timeout_s: float) -> float:
    """Seconds until the server closes ``client`` (reading and dropping what it sends)."""
    started = time.monotonic()
    client.settimeout(timeout_s)
    while True:
        try:
            if not client.recv(65536):
                return time.monotonic() - started
        except ConnectionResetError:
            return time.monotonic() - started


def _still_open(client: socket.socket) -> bool:
    """Whether ``client`` is open: what the server sent is read, then nothing for 0.2 s."""
    client.settimeout(0.2)
    while True:
        try:
            if not client.recv(65536):
                return False
        except TimeoutError:
            return True


def test_a_connection_that_never_sends_the_preface_is_closed(
    core: ServerCore, server_kind: str
) -> None:
    """TCP connections sending nothing are closed after our 5 s handshake timeout (gRPC: 120 s)."""
    assert dict(GrpcServerOptions().grpc_options())["grpc.server_handshake_timeout_ms"] == 5000
    with serving(core, server=server_kind) as served:
        host, port = served.address.rsplit(":", 1)
        with ExitStack() as stack:
            silent = [
                stack.enter_context(socket.create_connection((host, int(port)))) for _ in range(20)
            ]
            for client in silent:
                assert _closed_within(client, 60) < 30
        with served.channel() as channel:  # a real client meanwhile is served
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)


def test_connections_past_max_connections_are_closed(core: ServerCore, server_kind: str) -> None:
    """With max_connections=3, a fourth connection is closed at once while three are open."""
    timeout = "grpc.server_handshake_timeout_ms=600000"  # the three stay open
    with serving(core, server=server_kind, max_connections=3, channel_arguments=timeout) as served:
        host, port = served.address.rsplit(":", 1)
        with ExitStack() as stack:
            held = [
                stack.enter_context(socket.create_connection((host, int(port)))) for _ in range(3)
            ]
            for client in held:  # accepted: the server sent its SETTINGS
                client.settimeout(30)
                assert client.recv(9)
            with socket.create_connection((host, int(port))) as extra:
                assert _closed_within(extra, 30) < 30
            assert all(_still_open(client) for client in held)
        own = [("grpc.use_local_subchannel_pool", 1)]

        def check() -> bool:
            with grpc.insecure_channel(served.address, options=own) as channel:
                try:
                    health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=5
                    )
                except grpc.RpcError:
                    return False
                return True

        wait_until(check, 30)  # once they are closed, a client gets in again


def test_max_connections_must_be_positive() -> None:
    """max_connections=0 is refused when the options are made; it is gRPC's incoming bound."""
    with pytest.raises(ValueError, match="max_connections"):
        GrpcServerOptions(max_connections=0)
    options = dict(GrpcServerOptions(max_connections=7).grpc_options())
    assert options["grpc.max_allowed_incoming_connections"] == 7
