"""Security of the P4Runtime channel, shared by the controller and the embedded switch.

Whoever holds a switch's P4Runtime channel decides where every job's gradients go, so the
channel is TLS unless both ends are on this machine: plain text is accepted only on a loopback
address, and anywhere else only with an explicit `--insecure`. With TLS the controller checks
the switch's certificate against the CA it was given (and the name in it against the address
it dials, or `--tls-server-name`); a switch that does not present a matching one is refused.
The switch may in turn require the controller's certificate (mutual TLS).
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, replace
from pathlib import Path

from finsy import GRPCCredentialsTLS

from controller.southbound.p4runtime import SwitchTarget
from dataplane.tls import TLSConfigError, is_loopback, plaintext_refusal, read_pem


def secure_targets(
    targets: dict[str, SwitchTarget], tls: ClientTLS | None, insecure: bool
) -> dict[str, SwitchTarget]:
    """The switches with the controller's TLS credentials; without TLS, every switch must be
    on a loopback address unless `insecure`. Raises TLSConfigError naming the problem."""
    if tls is not None:
        credentials = tls.credentials()
        return {name: replace(t, credentials=credentials) for name, t in targets.items()}
    for name, target in targets.items():
        if not insecure and not is_loopback(target.address):
            raise TLSConfigError(plaintext_refusal(f"switch {name}", target.address))
    return targets


def certificate_problem(
    address: str, credentials: GRPCCredentialsTLS, timeout: float = 2.0
) -> str | None:
    """Why the switch at `address` fails the controller's check of its certificate (not
    signed by the CA, or not issued for the name dialled), or None when it passes or the
    switch cannot be asked. gRPC only retries such a switch silently, so the daemon asks
    here, with the same CA and name, to refuse it at once and say why."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cadata=_text(credentials.cacert))
    name = credentials.target_name_override or host.strip("[]")
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=name),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return (
            f"its TLS certificate does not match: {exc.verify_message} (expected one "
            f"signed by the --tls-ca CA and issued for {name!r})"
        )
    except (OSError, ValueError):
        return None


def _text(pem: object) -> str | None:
    if isinstance(pem, bytes):
        return pem.decode("ascii", "replace")
    if isinstance(pem, Path):
        return pem.read_text()
    return None


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
            raise TLSConfigError(
                "--tls-cert and --tls-key go together (the controller's "
                "certificate and its private key)"
            )
        return GRPCCredentialsTLS(
            cacert=read_pem(self.ca, "--tls-ca"),
            cert=read_pem(self.cert, "--tls-cert"),
            private_key=read_pem(self.key, "--tls-key"),
            target_name_override=self.server_name,
        )
