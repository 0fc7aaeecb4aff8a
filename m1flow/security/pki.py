"""A private CA and one certificate per principal, written under a run dir's secrets folder.

One identity per service serves every channel that authenticates it (the Kafka broker maps the
certificate's CN to the principal `User:<name>`), so there is one credential to create, mount and
rotate per service instead of a certificate and a SCRAM password. Private keys are written 0600
and never logged; only their paths travel in configs and environment variables.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 365


@dataclass(frozen=True)
class Identity:
    """Where one principal's credentials lie: the CA to trust, its certificate and its key."""
    name: str
    ca: Path
    cert: Path
    key: Path
    bundle: Path  # key + certificate in one PEM file (the Java broker's PEM keystore)


def private_folder(path: str | Path) -> Path:
    """`path` as a folder only its owner may list or enter (0700), made so or narrowed to it (a
    folder an older run made at the umask's 0755 included): the run's secrets live in it."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write key material 0600 from the start: a new file (an old one is removed first, so a file of a
    looser mode is never reused, and there is no moment at the umask's mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "m1flow"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CertificateAuthority:
    """The run's CA under `folder` (created on first use, reused after: certificates stay valid
    across restarts of the same run)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = private_folder(Path(folder).resolve())
        self.cert_path = self.folder / "ca.pem"
        self.key_path = self.folder / "ca.key"
        if not self.cert_path.exists():
            self._create()
        self.cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        self.key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)

    def _create(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name("m1flow-ca")).issuer_name(_name("m1flow-ca"))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        write_private(self.key_path, _key_pem(key))
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def identity(self, name: str, hosts: tuple[str, ...] = ()) -> Identity:
        """The principal `name`'s credentials, issued on first call. The certificate names
        `hosts` (and localhost, 127.0.0.1) as its addresses, for servers that present it."""
        ident = Identity(name, self.cert_path, self.folder / f"{name}.pem", self.folder / f"{name}.key",
                         self.folder / f"{name}.bundle.pem")
        if ident.cert.exists() and ident.key.exists() and ident.bundle.exists():
            return ident
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(names), critical=False)
                .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH,
                                                      x509.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(self.key, hashes.SHA256()))
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        write_private(ident.key, _key_pem(key))
        write_private(ident.bundle, _key_pem(key) + cert_pem)
        ident.cert.write_bytes(cert_pem)
        return ident


def signing_key(folder: str | Path, name: str) -> tuple[Path, Path]:
    """(private, public) PEM paths of principal `name`'s Ed25519 signing key under `folder`, made
    on first call. The learner signs policy announcements with it; replicas hold only the public half."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    folder = private_folder(Path(folder).resolve())
    private, public = folder / f"{name}.sign.key", folder / f"{name}.sign.pub"
    if not (private.exists() and public.exists()):
        key = ed25519.Ed25519PrivateKey.generate()
        write_private(private, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
        public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public
