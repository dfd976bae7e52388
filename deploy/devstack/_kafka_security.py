"""The devstack broker's SASL_SSL mode (SLOTFLOW_DEVSTACK_KAFKA_SECURITY=sasl_ssl).

- TLS: a CA of the devstack's own and the broker's key and certificate (for 127.0.0.1 and
  localhost), made once with openssl into .devstack/kafka/tls; the broker reads them as PEM.
- SASL: SCRAM-SHA-512 (and -256) users made when the storage is formatted (`kafka-storage format
  --add-scram`, KRaft keeps the credentials in its metadata): `admin`, the broker's own and a super
  user, and one user per service, with random passwords in .devstack/kafka/users.json (mode 0600).
- Authorisation: `StandardAuthorizer`, nothing allowed without an ACL; after start, each service's
  user gets the ACLs `slotflow.kafka.acls.service_acls` lists (default topic namespace).

With SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS=A,B,C the broker opens three more client listeners
(off by default; for tests on loopback):

- MECHS (port A), SASL_SSL with PLAIN (the users listed in the listener's PlainLoginModule, same
  passwords), SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER. OAUTHBEARER uses Kafka's default
  unsecured validator (no validator class configured): it accepts an unsigned JWS (header
  {"alg":"none"}) whose "sub" claim is the principal and whose "exp" is in the future. Anyone who
  reaches that port can therefore name any principal, admin included: never expose it.
- CLEARSASL (port B), SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
- MTLS (port C), SSL with a client certificate required: signed by the devstack's CA
  (`client_certificate` makes one per user, CN=<user>), and the CN is the principal
  (ssl.principal.mapping.rules), so User:<service> has the same ACLs whichever way it connects.

The controller listener is SASL_SSL with PLAIN: KRaft's controller cannot take SCRAM (its
credentials live in the metadata the controller itself serves), so the listener's login module
holds the admin's password, and the broker, as the controller's client, authenticates as
User:admin (a super user) over TLS with the devstack's CA. A client without credentials is refused
at the TLS or SASL handshake (it used to be let in as User:ANONYMOUS, a super user: CreateAcls
from anyone who reached the port).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from _config import Config, DevstackError, say, show
from _processes import run_command

from slotflow.kafka.acls import SERVICE_GROUPS, create_acls, service_acls
from slotflow.kafka.security import KafkaSecurity
from slotflow.settings import KafkaSettings

ADMIN_USER = "admin"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
#: The mechanisms of the MECHS listener (SASL_SSL) and of the CLEARSASL one (SASL_PLAINTEXT).
MECHS_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
CLEARSASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
#: The certificate's subject "CN=ticker" (or "CN=ticker,O=...") is the principal User:ticker.
MTLS_PRINCIPAL_RULES = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"
#: One user per service, named after it (the principal User:<service>).
SERVICE_USERS = tuple(SERVICE_GROUPS)
CERT_DAYS = "825"


def users(cfg: Config) -> dict[str, str]:
    """The SCRAM users and passwords, made once (a format reads them; a restart keeps them)."""
    path = cfg.kafka_users_file
    if path.exists():
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict) and all(isinstance(v, str) for v in loaded.values()):
            return {str(k): str(v) for k, v in loaded.items()}
        raise DevstackError(f"{show(path)} is not a JSON object of user names and passwords")
    made = {name: secrets.token_urlsafe(18) for name in (ADMIN_USER, *SERVICE_USERS)}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(made, out, indent=1)
    return made


def admin_security(cfg: Config) -> KafkaSecurity:
    """How the devstack itself connects: PLAINTEXT, or as the admin super user over SASL_SSL."""
    if not cfg.secured:
        return KafkaSecurity(security_protocol="PLAINTEXT")
    return client_security(cfg, ADMIN_USER)


def client_security(cfg: Config, user: str, password: str | None = None) -> KafkaSecurity:
    """The settings of a client connecting as ``user`` (with its own password unless given)."""
    return KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=user,
        sasl_password=password if password is not None else users(cfg)[user],  # type: ignore[arg-type]
        ssl_cafile=cfg.kafka_ca_file,
    )


async def ensure_tls(cfg: Config) -> None:
    """The CA and the broker's certificate, made once with openssl."""
    tls = cfg.kafka_tls_dir
    broker_pem = tls / "broker.pem"
    if cfg.kafka_ca_file.exists() and broker_pem.exists():
        return
    tls.mkdir(parents=True, exist_ok=True)
    os.chmod(tls, 0o700)
    say(f"making a CA and the broker's TLS certificate in {show(tls)}")
    ca_key, broker_key, csr, crt, ext = (
        tls / "ca.key",
        tls / "broker.key",
        tls / "broker.csr",
        tls / "broker.crt",
        tls / "broker.ext",
    )
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    openssl = "openssl"
    await run_command(
        [openssl, "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(cfg.kafka_ca_file), "-days", CERT_DAYS, "-subj", "/CN=slotflow devstack CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        what="openssl req (CA)",
    )  # fmt: skip
    await run_command(
        [openssl, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(broker_key),
         "-out", str(csr), "-subj", "/CN=127.0.0.1"],
        what="openssl req (broker)",
    )  # fmt: skip
    await run_command(
        [openssl, "x509", "-req", "-in", str(csr), "-CA", str(cfg.kafka_ca_file), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(crt), "-days", CERT_DAYS, "-extfile", str(ext)],
        what="openssl x509 (sign the broker's certificate)",
    )  # fmt: skip
    # Kafka's PEM keystore: the (PKCS#8, unencrypted) key, then the certificate chain.
    broker_pem.write_text(broker_key.read_text() + crt.read_text() + cfg.kafka_ca_file.read_text())
    os.chmod(broker_pem, 0o600)


async def client_certificate(cfg: Config, user: str) -> tuple[Path, Path]:
    """A client certificate for ``user`` (CN=<user>) signed by the devstack's CA, and its key,
    made once (the MTLS listener's principal is the CN).

    Raises:
        DevstackError: the CA is not made yet (the broker never started in sasl_ssl mode), or
            ``user`` is not a plain name.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", user):
        raise DevstackError(f"client certificate: {user!r} is not a user name (letters, digits, _.-)")
    ca_key = cfg.kafka_tls_dir / "ca.key"
    if not ca_key.exists() or not cfg.kafka_ca_file.exists():
        raise DevstackError(
            f"no devstack CA in {show(cfg.kafka_tls_dir)}: start the broker in sasl_ssl mode first"
        )
    directory = cfg.kafka_client_certs_dir
    cert, key = directory / f"{user}.crt", directory / f"{user}.key"
    if cert.exists() and key.exists():
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    csr, ext = directory / f"{user}.csr", directory / "client.ext"
    ext.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    await run_command(
        ["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(csr), "-subj", f"/CN={user}"],
        what=f"openssl req (client {user})",
    )  # fmt: skip
    await run_command(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(cfg.kafka_ca_file), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(cert), "-days", CERT_DAYS, "-extfile", str(ext)],
        what=f"openssl x509 (sign the client certificate of {user})",
    )  # fmt: skip
    os.chmod(key, 0o600)
    return cert, key


def _mechanism_listener_properties(cfg: Config) -> tuple[str, str, str, str]:
    """The MECHS, CLEARSASL and MTLS listeners: (listeners, advertised, protocol map, settings)."""
    ports = cfg.mechanism_listeners
    if ports is None:
        return "", "", "", ""
    named = (("MECHS", ports.sasl_ssl, "SASL_SSL"), ("CLEARSASL", ports.sasl_plaintext, "SASL_PLAINTEXT"),
             ("MTLS", ports.mtls, "SSL"))  # fmt: skip
    listeners = "".join(f",{name}://127.0.0.1:{port}" for name, port, _ in named)
    protocols = "".join(f",{name}:{protocol}" for name, _, protocol in named)
    accounts = users(cfg)
    # PLAIN checks the password against the user_<name> options of the listener's login module.
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
        f'user_{name}="{password}"' for name, password in accounts.items()
    )
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    # The broker's own login for OAUTHBEARER (an unsigned token of its own); clients' tokens are
    # checked by the default OAuthBearerUnsecuredValidatorCallbackHandler.
    oauth = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'unsecuredLoginStringClaim_sub="{ADMIN_USER}";'
    )
    login = {"PLAIN": plain + ";", "SCRAM-SHA-256": scram, "SCRAM-SHA-512": scram, "OAUTHBEARER": oauth}
    lines: list[str] = []
    for name, mechanisms in (("mechs", MECHS_MECHANISMS), ("clearsasl", CLEARSASL_MECHANISMS)):
        lines.append(f"listener.name.{name}.sasl.enabled.mechanisms={','.join(mechanisms)}")
        lines += [f"listener.name.{name}.{m.lower()}.sasl.jaas.config={login[m]}" for m in mechanisms]
    lines += [
        "listener.name.mtls.ssl.client.auth=required",
        f"listener.name.mtls.ssl.principal.mapping.rules={MTLS_PRINCIPAL_RULES}",
    ]
    settings = "# SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS: the test listeners (see _kafka_security.py).\n"
    return listeners, listeners, protocols, settings + "\n".join(lines) + "\n"


def server_properties(cfg: Config) -> str:
    """The listener and security part of server.properties for the mode."""
    if not cfg.secured:
        # SLOTFLOW_KAFKA_EXTRA_LISTENERS (the system fault suite's forwarders) follow the devstack's
        # own; Config refuses them in the secured mode, where they would bypass authentication.
        extra = cfg.extra_listeners
        listeners = "".join(f",{x.name}://127.0.0.1:{x.port}" for x in extra)
        advertised = "".join(f",{x.name}://127.0.0.1:{x.advertised_port}" for x in extra)
        protocols = "".join(f",{x.name}:PLAINTEXT" for x in extra)
        return f"""\
listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}{listeners}
advertised.listeners=PLAINTEXT://127.0.0.1:{cfg.kafka_port}{advertised}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT{protocols}
"""
    admin = users(cfg)[ADMIN_USER]
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{ADMIN_USER}" password="{admin}";'
    # Every enabled mechanism needs a login entry on the listener, even though only -512 is used
    # by the broker itself (its inter-broker connections).
    jaas_lines = "".join(
        f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config={jaas}\n"
        for mechanism in SCRAM_MECHANISMS
    )
    # The controller's listener: PLAIN over TLS, the admin's password in its login module (the
    # server side) and as the broker's own login to its controller (the client side).
    controller_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN_USER}" password="{admin}" user_{ADMIN_USER}="{admin}";'
    )
    tls = cfg.kafka_tls_dir
    listeners, advertised, protocols, mechanism_settings = _mechanism_listener_properties(cfg)
    return f"""\
# SLOTFLOW_DEVSTACK_KAFKA_SECURITY=sasl_ssl: clients (and the broker to itself) over SASL_SSL with SCRAM.
listeners=SASL_SSL://127.0.0.1:{cfg.kafka_port},CONTROLLER://127.0.0.1:{cfg.controller_port}{listeners}
advertised.listeners=SASL_SSL://127.0.0.1:{cfg.kafka_port}{advertised}
inter.broker.listener.name=SASL_SSL
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL{protocols}
sasl.enabled.mechanisms={",".join(SCRAM_MECHANISMS)}
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
# The controller listener: SASL_SSL with PLAIN, only the admin (KRaft's controller cannot take
# SCRAM); no anonymous client reaches it (see _kafka_security.py).
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config={controller_jaas}
{jaas_lines}{mechanism_settings}ssl.keystore.type=PEM
ssl.keystore.location={tls / "broker.pem"}
ssl.truststore.type=PEM
ssl.truststore.location={cfg.kafka_ca_file}
ssl.client.auth=none
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
# admin: the broker itself (inter-broker and to its controller) and the devstack's tools.
super.users=User:{ADMIN_USER}
"""


def format_arguments(cfg: Config) -> list[str]:
    """`--add-scram` arguments for every user and mechanism (empty in plaintext mode)."""
    if not cfg.secured:
        return []
    args: list[str] = []
    for name, password in users(cfg).items():
        for mechanism in SCRAM_MECHANISMS:
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args


def redact(text: str, cfg: Config) -> str:
    """``text`` without any of the users' passwords (a failed format prints its command line)."""
    if not cfg.secured or not cfg.kafka_users_file.exists():
        return text
    for password in users(cfg).values():
        text = text.replace(password, "***")
    return text


def check_formatted_mode(cfg: Config) -> None:
    """Refuse a storage formatted for the other mode: its SCRAM users would be missing."""
    if not (cfg.kafka_data / "meta.properties").exists():
        return
    try:
        formatted = cfg.kafka_security_file.read_text().strip()
    except OSError:
        formatted = "plaintext"
    if formatted != cfg.kafka_security:
        raise DevstackError(
            f"the Kafka storage in {show(cfg.kafka_data)} was formatted for {formatted}, not "
            f"{cfg.kafka_security} (SLOTFLOW_DEVSTACK_KAFKA_SECURITY); run `down --clean` first"
        )


def record_formatted_mode(cfg: Config) -> None:
    cfg.kafka_security_file.write_text(cfg.kafka_security + "\n")


async def grant_service_acls(cfg: Config) -> None:
    """Each service's user gets its ACLs in the default topic namespace."""
    if not cfg.secured:
        return
    kafka = KafkaSettings(bootstrap=cfg.bootstrap, security=admin_security(cfg))
    bindings = [acl for user in SERVICE_USERS for acl in service_acls(user, f"User:{user}", kafka)]
    await create_acls(cfg.bootstrap, bindings, security=admin_security(cfg))
    say(
        f"{len(bindings)} ACLs for the users {', '.join(SERVICE_USERS)} (passwords in {show(cfg.kafka_users_file)})"
    )
