"""Security of the P4Runtime channel, shared by the controller and the embedded switch.

Whoever holds a switch's P4Runtime channel decides where every job's gradients go, so the
channel is TLS unless both ends are on this machine: plain text is accepted only on a loopback
address, and anywhere else only with an explicit `--insecure`. With TLS the controller checks
the switch's certificate against the CA it was given (and the name in it against the address
it dials, or `--tls-server-name`); a switch that does not present a matching one is refused.
The switch may in turn require the controller's certificate (mutual TLS).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
from finsy import GRPCCredentialsTLS

from controller.southbound.p4runtime import SwitchTarget


def secure_targets(targets: dict[str, SwitchTarget], tls: ClientTLS | None,
                   insecure: bool) -> dict[str, SwitchTarget]:
    """The switches with the controller's TLS credentials; without TLS, every switch must be
    on a loopback address unless `insecure`. Raises TLSConfigError naming the problem."""
    if tls is not None:
        credentials = tls.credentials()
        return {name: replace(t, credentials=credentials) for name, t in targets.items()}
    for name, target in targets.items():
        if not insecure and not is_loopback(target.address):
            raise TLSConfigError(plaintext_refusal(f"switch {name}", target.address))
    return targets


def certificate_problem(address: str, credentials: GRPCCredentialsTLS,
                        timeout: float = 2.0) -> str | None:
    """Why the switch at `address` fails the controller's check of its certificate (not
    signed by the CA, or not issued for the name dialled), or None when it passes or the
    switch cannot be asked. gRPC only retries such a switch silently, so the daemon asks
    here, with the same CA and name, to refuse it at once and say why."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cadata=_text(credentials.cacert))
    name = credentials.target_name_override or host.strip("[]")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=name):
            return None
    except ssl.SSLCertVerificationError as exc:
        return (f"its TLS certificate does not match: {exc.verify_message} (expected one "
                f"signed by the --tls-ca CA and issued for {name!r})")
    except (OSError, ValueError):
        return None


def _text(pem: object) -> str | None:
    if isinstance(pem, bytes):
        return pem.decode("ascii", "replace")
    if isinstance(pem, Path):
        return pem.read_text()
    return None


class TLSConfigError(ValueError):
    """Unusable TLS settings: the message names the option or file and what is wrong."""


def is_loopback(address: str) -> bool:
    """True for HOST:PORT on a loopback address (127.0.0.0/8, ::1, localhost)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def plaintext_refusal(who: str, address: str) -> str:
    """Why a plain-text channel at `address` is refused (`who` names the switch or listener)."""
    return (f"{who} at {address}: plain-text P4Runtime is allowed only on a loopback address "
            "(anyone on the path could program the switch); use TLS (--tls-ca, with --tls-cert "
            "and --tls-key for client authentication; on a switch --grpc-server-ssl with "
            "--grpc-server-cert and --grpc-server-key) or pass --insecure to accept it")


def _read(path: Path | None, option: str) -> bytes | None:
    if path is None:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TLSConfigError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from None
    if b"-----BEGIN" not in data:
        raise TLSConfigError(f"{option} {path}: not a PEM file (no -----BEGIN line)")
    return data


@dataclass(frozen=True)
class ClientTLS:
    """The controller's side: the CA that signs the switches' certificates, and optionally its
    own certificate and key for switches that require client authentication."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None
    server_name: str = ""  # the name to expect in the switch's certificate, if not its address

    def credentials(self) -> GRPCCredentialsTLS:
        """finsy's channel credentials; raises TLSConfigError naming a bad option."""
        if (self.cert is None) != (self.key is None):
            raise TLSConfigError("--tls-cert and --tls-key go together (the controller's "
                                 "certificate and its private key)")
        return GRPCCredentialsTLS(cacert=_read(self.ca, "--tls-ca"),
                                  cert=_read(self.cert, "--tls-cert"),
                                  private_key=_read(self.key, "--tls-key"),
                                  target_name_override=self.server_name)


@dataclass(frozen=True)
class ServerTLS:
    """The switch's side, with simple_switch_grpc's option names."""

    cert: Path
    key: Path
    cacert: Path | None = None
    with_client_auth: bool = False

    def credentials(self) -> grpc.ServerCredentials:
        if self.with_client_auth and self.cacert is None:
            raise TLSConfigError("--grpc-server-with-client-auth needs --grpc-server-cacert "
                                 "(the CA that signs the controllers' certificates)")
        return grpc.ssl_server_credentials(
            [(_read(self.key, "--grpc-server-key"), _read(self.cert, "--grpc-server-cert"))],
            root_certificates=_read(self.cacert, "--grpc-server-cacert"),
            require_client_auth=self.with_client_auth)
