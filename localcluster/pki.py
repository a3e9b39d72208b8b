"""The certificates and keys a single-host control plane needs, made with ``cryptography``."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=3650)
SERVING_SANS: tuple[x509.GeneralName, ...] = (
    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    x509.IPAddress(ipaddress.ip_address("10.0.0.1")),  # first address of --service-cluster-ip-range
    x509.IPAddress(ipaddress.ip_address("10.0.1.1")),  # the same, for a cluster of several real nodes
    # the real node's host address (on lo): the API server listens there when pods must reach it
    x509.IPAddress(ipaddress.ip_address("10.96.255.1")),
    # the host on several nodes' link (po0): the API server listens there for them
    x509.IPAddress(ipaddress.ip_address("10.97.0.1")),
    x509.DNSName("localhost"),
    x509.DNSName("kubernetes"),
    x509.DNSName("kubernetes.default"),
    x509.DNSName("kubernetes.default.svc"),
    x509.DNSName("kubernetes.default.svc.cluster.local"),
)


@dataclass(frozen=True)
class NodeCerts:
    """One kubelet's client and serving certificates."""

    dir: Path

    client_crt = property(lambda self: self.dir / "kubelet-client.crt")
    client_key = property(lambda self: self.dir / "kubelet-client.key")
    serving_crt = property(lambda self: self.dir / "kubelet-serving.crt")
    serving_key = property(lambda self: self.dir / "kubelet-serving.key")


@dataclass(frozen=True)
class Pki:
    dir: Path

    ca_crt = property(lambda self: self.dir / "ca.crt")
    ca_key = property(lambda self: self.dir / "ca.key")
    apiserver_crt = property(lambda self: self.dir / "apiserver.crt")
    apiserver_key = property(lambda self: self.dir / "apiserver.key")
    admin_crt = property(lambda self: self.dir / "admin.crt")
    admin_key = property(lambda self: self.dir / "admin.key")
    sa_key = property(lambda self: self.dir / "sa.key")
    sa_pub = property(lambda self: self.dir / "sa.pub")

    def serves(self, address: str) -> bool:
        """Whether the API server's certificate names this address (older clusters lack the node's)."""
        cert = x509.load_pem_x509_certificate(self.apiserver_crt.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return ipaddress.ip_address(address) in sans.get_values_for_type(x509.IPAddress)

    def generate_node(self, node_name: str, node_ip: str, certs: NodeCerts) -> None:
        """The kubelet's identity towards the API server (Node authorizer) and its serving certificate."""
        ca = x509.load_pem_x509_certificate(self.ca_crt.read_bytes())
        ca_key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        certs.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._leaf(certs.client_crt, certs.client_key, ca, ca_key, f"system:node:{node_name}",
                   "system:nodes", server=False)
        self._leaf(certs.serving_crt, certs.serving_key, ca, ca_key, node_name, None, server=True,
                   sans=(x509.IPAddress(ipaddress.ip_address(node_ip)), x509.DNSName(node_name)))

    def exists(self) -> bool:
        files = (self.ca_crt, self.ca_key, self.apiserver_crt, self.apiserver_key, self.admin_crt, self.admin_key,
                 self.sa_key, self.sa_pub)
        return all(f.exists() for f in files)

    def generate(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "playbook-operator-local-ca")])
        ca = (
            _builder(ca_name, ca_name, ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write_key(self.ca_key, ca_key)
        _write_cert(self.ca_crt, ca)

        self._leaf(self.apiserver_crt, self.apiserver_key, ca, ca_key, "kube-apiserver", None, server=True)
        # system:masters bypasses RBAC: this identity is the cluster admin of a throwaway dev cluster.
        self._leaf(self.admin_crt, self.admin_key, ca, ca_key, "admin", "system:masters", server=False)

        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(self.sa_key, sa_key)
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _leaf(
        self,
        crt: Path,
        key_path: Path,
        ca: x509.Certificate,
        ca_key: ec.EllipticCurvePrivateKey,
        cn: str,
        org: str | None,
        server: bool,
        sans: tuple[x509.GeneralName, ...] = SERVING_SANS,
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        builder = _builder(x509.Name(attrs), ca.subject, key.public_key()).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        _write_key(key_path, key)
        _write_cert(crt, builder.sign(ca_key, hashes.SHA256()))


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _write_key(path: Path, key) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
