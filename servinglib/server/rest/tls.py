"""RestTls: the certificate files the REST server speaks TLS with."""

from __future__ import annotations

import ssl
from typing import Any, final

import attrs

from servinglib.errors import InvalidArgumentError


@final
@attrs.frozen
class RestTls:
    """TLS for the REST server: ``--rest_ssl_certfile``, ``_keyfile``, ``_ca_certs``.

    ``certfile``: PEM of the server's certificate chain; ``keyfile``: PEM of
    its private key (empty: in ``certfile``).  ``ca_certs``: PEM of the
    authorities client certificates must chain to; given, every client must
    present one (mutual TLS), else none is asked for.  Immutable, so
    thread-safe.
    """

    certfile: str
    keyfile: str = ""
    ca_certs: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.certfile:
            raise InvalidArgumentError("REST TLS needs a certificate file (--rest_ssl_certfile)")

    @property
    def client_certificates_required(self) -> bool:
        """Whether clients must present a certificate signed by ``ca_certs``."""
        return bool(self.ca_certs)

    def context(self) -> ssl.SSLContext:
        """A server SSLContext from the files; InvalidArgumentError naming what fails to load."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.certfile, self.keyfile or None)
        except (OSError, ssl.SSLError) as error:
            raise InvalidArgumentError(
                f"Cannot load the REST certificate {self.certfile!r} and key "
                f"{self.keyfile or self.certfile!r}: {error}"
            ) from None
        if self.ca_certs:
            try:
                context.load_verify_locations(self.ca_certs)
            except (OSError, ssl.SSLError) as error:
                raise InvalidArgumentError(
                    f"Cannot load the REST client authorities {self.ca_certs!r}: {error}"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def uvicorn_settings(self) -> dict[str, Any]:
        """uvicorn's ``Config`` arguments for these files (checked by :meth:`context` first)."""
        self.context()
        return {
            "ssl_certfile": self.certfile,
            "ssl_keyfile": self.keyfile or None,
            "ssl_ca_certs": self.ca_certs or None,
            "ssl_cert_reqs": ssl.CERT_REQUIRED if self.ca_certs else ssl.CERT_NONE,
        }
