"""The switch's side of the P4Runtime channel's security, and the rules both ends share.

Plain text is accepted only on a loopback address, anywhere else only with an explicit
`--insecure`; the switch serves TLS with simple_switch_grpc's option names and may require the
controller's certificate (mutual TLS). The controller's side is `controller.southbound.tls`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import grpc


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
    return (
        f"{who} at {address}: plain-text P4Runtime is allowed only on a loopback address "
        "(anyone on the path could program the switch); use TLS (--tls-ca, with --tls-cert "
        "and --tls-key for client authentication; on a switch --grpc-server-ssl with "
        "--grpc-server-cert and --grpc-server-key) or pass --insecure to accept it"
    )


def read_pem(path: Path | None, option: str) -> bytes | None:
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
class ServerTLS:
    """The switch's side, with simple_switch_grpc's option names."""

    cert: Path
    key: Path
    cacert: Path | None = None
    with_client_auth: bool = False

    def credentials(self) -> grpc.ServerCredentials:
        if self.with_client_auth and self.cacert is None:
            raise TLSConfigError(
                "--grpc-server-with-client-auth needs --grpc-server-cacert "
                "(the CA that signs the controllers' certificates)"
            )
        return grpc.ssl_server_credentials(
            [(read_pem(self.key, "--grpc-server-key"), read_pem(self.cert, "--grpc-server-cert"))],
            root_certificates=read_pem(self.cacert, "--grpc-server-cacert"),
            require_client_auth=self.with_client_auth,
        )
