"""TLS material for the devstack's PostgreSQL (SLOTFLOW_PG_TLS=1): a CA of its own and a server
certificate it signs for 127.0.0.1 and localhost, made with the `openssl` command line.

Made once per state directory and kept (a client's sslrootcert stays valid across restarts);
`down --clean` deletes them with everything else. EC P-256 keys: quick to make, and what
PostgreSQL and Python's ssl accept everywhere.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from _config import DevstackError, say, show

#: What the server certificate names: the DSN's host must be one of these for verify-full.
SERVER_NAMES = ("DNS:localhost", "IP:127.0.0.1")
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_CA_EXTENSIONS = [
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
]
# The extensions a strict verifier (Python 3.13's VERIFY_X509_STRICT among them) expects of a leaf.
_SERVER_EXTENSIONS = f"""\
subjectAltName = {",".join(SERVER_NAMES)}
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid,issuer
"""


def _openssl(*args: str, what: str) -> None:
    """Run openssl; it takes well under a second, so a blocking call does no harm."""
    found = shutil.which("openssl")
    if found is None:
        raise DevstackError(
            "SLOTFLOW_PG_TLS=1 needs the openssl command line: `sudo apt-get install -y openssl`"
        )
    argv: Sequence[str] = [found, *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DevstackError(
            f"{what} failed (exit {done.returncode}): {shlex.join(argv)}\n{done.stderr.rstrip()}"
        )


def make_ca(directory: Path, common_name: str = "slotflow devstack CA") -> tuple[Path, Path]:
    """A self-signed CA certificate and its key in ``directory`` (ca.crt, ca.key); returns both."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "ca.crt", directory / "ca.key"
    _openssl(
        *("req", "-x509", "-new", *_KEY, "-keyout", str(key), "-out", str(cert)),
        *("-days", "3650", "-subj", f"/CN={common_name}", *_CA_EXTENSIONS),
        what="openssl req (CA)",
    )
    key.chmod(0o600)
    return cert, key


def make_server_cert(ca_cert: Path, ca_key: Path, directory: Path) -> tuple[Path, Path]:
    """server.crt and server.key in ``directory``, signed by the CA, naming `SERVER_NAMES`."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key, csr = directory / "server.crt", directory / "server.key", directory / "server.csr"
    extensions = directory / "server.ext"
    extensions.write_text(_SERVER_EXTENSIONS)
    _openssl(
        *("req", "-new", *_KEY, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost"),
        what="openssl req (server)",
    )
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial"),
        *("-out", str(cert), "-days", "825", "-extfile", str(extensions)),
        what="openssl x509 (server)",
    )
    csr.unlink(missing_ok=True)
    # PostgreSQL refuses a key file others can read.
    key.chmod(0o600)
    return cert, key


def ensure_pg_tls(tls_dir: Path, server_dir: Path) -> tuple[Path, Path, Path]:
    """The CA certificate, server certificate and server key, made if missing; returns their paths."""
    ca_cert, ca_key = tls_dir / "ca.crt", tls_dir / "ca.key"
    cert, key = server_dir / "server.crt", server_dir / "server.key"
    if not (ca_cert.is_file() and ca_key.is_file()):
        make_ca(tls_dir)
        say(f"made a CA for PostgreSQL's TLS: {show(ca_cert)}")
        cert.unlink(missing_ok=True)  # a server certificate of an older CA is of no use
    if not (cert.is_file() and key.is_file()):
        make_server_cert(ca_cert, ca_key, server_dir)
        say(f"made PostgreSQL's server certificate for {', '.join(SERVER_NAMES)}")
    if os.geteuid() == 0:
        for path in (cert, key):
            shutil.chown(path, "postgres", "postgres")
    return ca_cert, cert, key
