"""Private CAs and certificates for the TLS tests, made in the test with
the cryptography package (JupyterHub's own dependency, through certipy).

PKI(dir) is a CA of its own; server() and client() issue certificates
from it and write them as PEM files under dir.
"""

import datetime
import ipaddress
import os
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["PKI"]


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key, password=None):
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _cert_pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


class PKI:
    def __init__(self, directory, name="spawnkit test CA"):
        self.dir = directory
        self.label = name.replace(" ", "-")
        now = datetime.datetime.now(datetime.timezone.utc)
        self._from, self._until = now - datetime.timedelta(hours=1), now + datetime.timedelta(hours=1)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            self._builder(_name(name), _name(name), self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = self.write("ca.pem", _cert_pem(self.cert))

    def _builder(self, subject, issuer, public_key):
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._from)
            .not_valid_after(self._until)
        )

    def write(self, name, data):
        path = os.path.join(self.dir, f"{self.label}-{name}")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def _issue(self, cn, sans, usage):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = self._builder(_name(cn), self.cert.subject, key.public_key())
        if sans:
            entries = []
            for san in sans:
                try:
                    entries.append(x509.IPAddress(ipaddress.ip_address(san)))
                except ValueError:
                    entries.append(x509.DNSName(san))
            builder = builder.add_extension(x509.SubjectAlternativeName(entries), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key

    def server(self, *names):
        """(cert file, key file) of a serving certificate for names (DNS
        names or IP addresses)."""
        cert, key = self._issue(names[0], names, ExtendedKeyUsageOID.SERVER_AUTH)
        stem = names[0].replace(":", "_")
        return self.write(f"server-{stem}.pem", _cert_pem(cert)), self.write(f"server-{stem}.key", _key_pem(key))

    def client(self, cn="hub", combined=False, password=None):
        """(cert file, key file) of a client certificate; combined: the key
        in the certificate's file, and key file None."""
        cert, key = self._issue(cn, (), ExtendedKeyUsageOID.CLIENT_AUTH)
        if combined:
            return self.write(f"client-{cn}-combined.pem", _cert_pem(cert) + _key_pem(key, password)), None
        return self.write(f"client-{cn}.pem", _cert_pem(cert)), self.write(f"client-{cn}.key", _key_pem(key, password))

    def server_context(self, *names, client_ca=None):
        """An SSLContext serving a certificate for names; with client_ca
        (a PKI), one that requires a client certificate it issued."""
        cert, key = self.server(*names)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        if client_ca is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(client_ca.ca_file)
        return ctx
