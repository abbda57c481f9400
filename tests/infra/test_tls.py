"""The stack's CA and broker certificate: made once, private where they must be, renewed before they expire."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from infra import tls


def test_the_broker_certificate_is_signed_by_the_ca_for_the_loopback_address(tmp_path: Path) -> None:
    tls.ensure(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.pem").read_bytes())
    broker = x509.load_pem_x509_certificate((tmp_path / "broker.pem").read_bytes())
    broker.verify_directly_issued_by(ca)
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.IPv4Address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    # Kafka's PEM key store: one unencrypted PKCS#8 key, then the chain up to the CA.
    text = (tmp_path / "broker.pem").read_text()
    assert text.startswith("-----BEGIN PRIVATE KEY-----")
    assert text.count("-----BEGIN CERTIFICATE-----") == 2
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)


def test_keys_are_private_and_the_ca_certificate_is_not(tmp_path: Path) -> None:
    tls.ensure(tmp_path)
    modes = {name: (tmp_path / name).stat().st_mode & 0o777 for name in ("ca.key", "broker.pem", "ca.pem")}
    assert modes["ca.key"] == 0o600
    assert modes["broker.pem"] == 0o600
    assert modes["ca.pem"] & 0o044, "clients of any user read the CA certificate"


def test_a_second_start_keeps_them_and_one_near_expiry_renews_the_broker_only(tmp_path: Path) -> None:
    tls.ensure(tmp_path)
    ca, broker = (tmp_path / "ca.pem").read_text(), (tmp_path / "broker.pem").read_text()
    tls.ensure(tmp_path)
    assert ((tmp_path / "ca.pem").read_text(), (tmp_path / "broker.pem").read_text()) == (ca, broker)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=tls.BROKER_DAYS) - tls.RENEW_BEFORE + dt.timedelta(days=1)
    tls.ensure(tmp_path, now=later)
    assert (tmp_path / "ca.pem").read_text() == ca
    assert (tmp_path / "broker.pem").read_text() != broker
    assert tls.expires(tmp_path / "broker.pem") > later + tls.RENEW_BEFORE
