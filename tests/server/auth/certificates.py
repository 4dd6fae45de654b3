"""Certificates for TLS tests, made with ``cryptography``: an authority, a server, a client."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@attrs.frozen
class Pem:
    """A certificate and its key, written as PEM files."""

    cert: Path
    key: Path


@attrs.frozen
class Certificates:
    """An authority (``ca``), a server certificate for 127.0.0.1 and a client one it signed,
    and a client certificate signed by another authority (``stranger``)."""

    ca: Path
    server: Pem
    client: Pem
    stranger: Pem


def make_certificates(directory: Path) -> Certificates:
    """Writes the certificates of :class:`Certificates` under ``directory``."""
    ca_key, ca_cert = _authority("test CA")
    other_key, other_cert = _authority("another CA")
    server = _issued(ca_key, ca_cert, "127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH)
    client = _issued(ca_key, ca_cert, "client", ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _issued(other_key, other_cert, "stranger", ExtendedKeyUsageOID.CLIENT_AUTH)
    ca = directory / "ca.pem"
    ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return Certificates(
        ca,
        _write(directory, "server", *server),
        _write(directory, "client", *client),
        _write(directory, "stranger", *stranger),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _authority(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _builder(name, _name(name), key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _issued(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    name: str,
    usage: x509.ObjectIdentifier,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(name, ca_cert.subject, key).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(name))]),
            critical=False,
        )
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
    )
    return key, builder.sign(ca_key, hashes.SHA256())


def _write(
    directory: Path, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate
) -> Pem:
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Pem(cert_path, key_path)
