"""The local stack's certificate authority and the broker's certificate, made at first start.

`state/tls/ca.pem` is what clients trust (public); `ca.key` and `broker.pem` (the broker's private key and
its certificate chain, one PEM file as Kafka's PEM key store reads it) are 0600. A broker certificate that
expires within `RENEW_BEFORE` is made again at the next start; the CA lasts ten years.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ground.private_files import write_private

CA_DAYS = 3650
BROKER_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)


def ensure(folder: Path, *, now: dt.datetime | None = None) -> None:
    """Make the CA and the broker's certificate if they are missing or the broker's expires soon."""
    now = now or dt.datetime.now(dt.UTC)
    folder.mkdir(parents=True, exist_ok=True)
    # Others may reach a file here by name but not list the folder: the broker, run as its own user, reads its
    # key (broker.pem, which it owns); the CA's key stays its maker's alone (0600).
    folder.chmod(0o711)
    ca_pem, ca_key_pem = folder / "ca.pem", folder / "ca.key"
    if not (ca_pem.exists() and ca_key_pem.exists()):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cdcpipe local stack CA")])
        cert = (
            _builder(name, name, key.public_key(), now, CA_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        write_private(ca_key_pem, _key_pem(key))
        ca_pem.write_text(cert.public_bytes(serialization.Encoding.PEM).decode())
    broker = folder / "broker.pem"
    if broker.exists() and expires(broker) - now > RENEW_BEFORE:
        return
    ca_key = serialization.load_pem_private_key(ca_key_pem.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca_key_pem}: not the EC key this module makes; remove {folder} to make a new CA")
    ca_cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    cert = (
        _builder(subject, ca_cert.subject, key.public_key(), now, BROKER_DAYS)
        # Clients check the name they dialled: the stack's clients dial 127.0.0.1.
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    chain = cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
    write_private(broker, _key_pem(key) + chain.decode())


def expires(pem: Path) -> dt.datetime:
    """When the first certificate in a PEM file stops being valid."""
    return x509.load_pem_x509_certificate(pem.read_bytes()).not_valid_after_utc


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, now: dt.datetime, days: int
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    """PKCS#8, unencrypted (the file is 0600): the form Kafka's PEM key store reads without a key password."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
