"""REST over TLS: server certificates, and client certificates required with ca_certs."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.server.rest import RestApp, RestOptions, RestServer, RestTls, create_app
from servinglib.server.server_core import ServerCore
from tests.server.auth.certificates import Certificates, Pem, make_certificates

PREDICT = {"instances": [1.0, 2.0]}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """An authority, a server certificate for 127.0.0.1 and client certificates."""
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def client_context(certificates: Certificates, pem: Pem | None = None) -> ssl.SSLContext:
    """A client context trusting the test authority, presenting ``pem`` if given."""
    context = ssl.create_default_context(cafile=str(certificates.ca))
    if pem is not None:
        context.load_cert_chain(pem.cert, pem.key)
    return context


@pytest.fixture
def served(core: ServerCore) -> Iterator[Callable[[RestTls], RestServer]]:
    """A function starting the REST app over TLS on 127.0.0.1; the servers stop after."""
    started: list[tuple[RestServer, RestApp]] = []

    def serve(tls: RestTls) -> RestServer:
        app = create_app(core, RestOptions())
        server = RestServer(app, "127.0.0.1", 0, tls=tls)
        server.start()
        started.append((server, app))
        return server

    yield serve
    for server, app in started:
        server.stop()
        app.close()


def predict(server: RestServer, context: ssl.SSLContext) -> httpx.Response:
    with httpx.Client(base_url=server.url, verify=context) as client:
        return client.post("/v1/models/half_plus_two:predict", json=PREDICT)


def test_tls_serves_clients_trusting_the_certificate(
    served: Callable[[RestTls], RestServer], certificates: Certificates
) -> None:
    """With a certificate and key the server speaks HTTPS only; no client certificate is asked."""
    server = served(RestTls(str(certificates.server.cert), str(certificates.server.key)))
    assert server.url.startswith("https://127.0.0.1:")
    response = predict(server, client_context(certificates))
    assert response.status_code == 200
    assert response.json() == {"predictions": [3.5, 4.0]}  # version 2: x / 2 + 3
    with pytest.raises(httpx.TransportError):
        httpx.get(server.url.replace("https", "http") + "/v2/health/live")


def test_ca_certs_require_a_client_certificate_it_signed(
    served: Callable[[RestTls], RestServer], certificates: Certificates
) -> None:
    """With ca_certs a client without a certificate, or with a stranger's, cannot connect;
    one signed by the authority predicts (mutual TLS)."""
    tls = RestTls(str(certificates.server.cert), str(certificates.server.key), str(certificates.ca))
    assert tls.client_certificates_required
    server = served(tls)
    assert predict(server, client_context(certificates, certificates.client)).status_code == 200
    for pem in (None, certificates.stranger):
        with pytest.raises(httpx.TransportError):
            predict(server, client_context(certificates, pem))


def test_unusable_files_fail_at_construction(
    core: ServerCore, certificates: Certificates, tmp_path: Path
) -> None:
    """A missing certificate, a key that is not one, or missing authorities raise at once."""
    app = create_app(core, RestOptions())
    missing = str(tmp_path / "missing.pem")
    server, key, ca = (
        str(p) for p in (certificates.server.cert, certificates.server.key, certificates.ca)
    )
    for tls in (
        RestTls(missing, key),
        RestTls(server, server),  # a certificate where the key should be
        RestTls(server, key, missing),
    ):
        with pytest.raises(InvalidArgumentError, match="REST"):
            RestServer(app, "127.0.0.1", 0, tls=tls)
    with pytest.raises(InvalidArgumentError, match="--rest_ssl_certfile"):
        RestTls("")
    assert ca
    app.close()
