"""The CLI's access flags: --http_restricted_api, --grpc_restricted_protocol, REST TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc
import httpx
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from servinglib.server.auth import ApiGroup
from servinglib.server.cli import FlagError, parse_flags
from servinglib.server.cli.flags import make_parser
from tests.server.auth.certificates import make_certificates
from tests.server.cli.test_model_server import config_of
from tests.server.cli.test_supervisor import Workers, pid_model, worker_pids


def test_the_flags_repeat_and_parse_as_tritons() -> None:
    """Each restriction flag repeats; their values parse with Triton's syntax at start."""
    flags = parse_flags(
        [
            "--demo",
            "--http_restricted_api=inference:authorization=Bearer t",
            "--http_restricted_api=model-repository,model-config:x-admin=a",
            "--grpc_restricted_protocol=inference:infer-key=t",
        ]
    )
    assert flags.http_restricted_api == (
        "inference:authorization=Bearer t",
        "model-repository,model-config:x-admin=a",
    )
    assert flags.grpc_restricted_protocol == ("inference:infer-key=t",)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http_restricted_api=admin:k=v"], "--http_restricted_api: unknown API group 'admin'"),
        (["--grpc_restricted_protocol=inference:hunter2"], "--grpc_restricted_protocol: a "),
        (
            ["--http_restricted_api=inference:a=1", "--http_restricted_api=inference:b=2"],
            "'inference' is restricted twice",
        ),
        (["--http_restricted_api=inference:k=@/no/such/file"], "/no/such/file"),
        (["--rest_api_port=8501", "--rest_ssl_keyfile=k.pem"], "need --rest_ssl_certfile"),
        (["--rest_ssl_certfile=c.pem"], "needs --rest_api_port"),
    ],
)
def test_unusable_values_are_one_line_naming_the_flag(args: list[str], message: str) -> None:
    """A value that cannot be served is a FlagError naming the flag, never quoting a secret."""
    with pytest.raises(FlagError, match=message) as caught:
        parse_flags(["--demo", *args])
    assert "hunter2" not in str(caught.value)


def test_help_lists_the_flags_and_every_group() -> None:
    """--help lists the five flags and names every API group."""
    text = make_parser().format_help().replace("\n", " ").replace("  ", "")
    for flag in (
        "--http_restricted_api",
        "--grpc_restricted_protocol",
        "--rest_ssl_certfile",
        "--rest_ssl_keyfile",
        "--rest_ssl_ca_certs",
    ):
        assert flag in text
    squeezed = text.replace(" ", "")
    for group in ApiGroup:
        assert group.value in squeezed


def test_workers_serve_tls_and_check_credentials(tmp_path: Path) -> None:
    """--num_workers=2 with REST TLS and both restrictions: every worker speaks HTTPS and
    refuses calls without the credential, on REST and gRPC, reading the token file."""
    certificates = make_certificates(tmp_path)
    token = tmp_path / "token"
    token.write_text("Bearer abc\n")
    pid_model(tmp_path, "m")
    workers = Workers(
        tmp_path,
        f"--model_config_file={config_of(tmp_path, 'm')}",
        f"--rest_ssl_certfile={certificates.server.cert}",
        f"--rest_ssl_keyfile={certificates.server.key}",
        f"--http_restricted_api=inference:authorization=@{token}",
        f"--grpc_restricted_protocol=health:authorization=@{token}",
    )
    try:
        workers.wait_serving()
        assert f"REST on https://127.0.0.1:{workers.rest_port}" in workers.output()
        url = f"https://127.0.0.1:{workers.rest_port}/v1/models/m:predict"
        context = ssl.create_default_context(cafile=str(certificates.ca))
        pids = set()
        for _ in range(200):  # a new connection each time, until both workers answered
            response = httpx.post(
                url, json={"instances": [0.0]}, headers={"authorization": "Bearer abc"},
                verify=context, timeout=60,
            )  # fmt: skip
            assert response.status_code == 200, response.text
            pids.add(int(response.json()["predictions"][0]))
            refused = httpx.post(url, json={"instances": [0.0]}, verify=context, timeout=60)
            assert refused.status_code == 401
            if len(pids) == 2:
                break
        assert pids == worker_pids(workers.process.pid)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "m"
        with grpc.insecure_channel(f"127.0.0.1:{workers.grpc_port}") as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            metadata = [("triton-grpc-protocol-authorization", "Bearer abc")]
            assert stub.GetModelStatus(request, timeout=30, metadata=metadata).model_version_status
            with pytest.raises(grpc.RpcError) as caught:
                stub.GetModelStatus(request, timeout=30)
            assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        assert "Bearer abc" not in workers.output()
    finally:
        workers.stop()
