#!/bin/sh
# PostgreSQL 15 (Debian's) for the test stack (image built by deploy/containers/build-images.sh).
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB: the role and database created at first start.
# POSTGRES_HOST_AUTH_METHOD: how clients over TCP log in (scram-sha-256 by default; the test stack
# asks for trust, as the devstack's loopback cluster has, so a test may put any password in a DSN).
set -eu
user="${POSTGRES_USER:-slotflow}"
password="${POSTGRES_PASSWORD:-slotflow}"
db="${POSTGRES_DB:-slotflow}"
host_auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
bin=/usr/lib/postgresql/15/bin
data=/var/lib/postgresql/data
if [ ! -f "$data/PG_VERSION" ]; then
  mkdir -p "$data" /run/postgresql
  chown postgres:postgres "$data" /run/postgresql
  printf '%s\n' "$password" >/tmp/pwfile
  chown postgres /tmp/pwfile
  su postgres -s /bin/sh -c "$bin/initdb -D $data -U $user --pwfile=/tmp/pwfile -A scram-sha-256 -E UTF8 --locale=C.UTF-8" >/dev/null
  rm -f /tmp/pwfile
  echo "host all all 0.0.0.0/0 $host_auth" >>"$data/pg_hba.conf"
  su postgres -s /bin/sh -c "$bin/postgres --single -D $data -c listen_addresses='' postgres" \
    >/dev/null <<SQL
CREATE DATABASE "$db" OWNER "$user";
SQL
fi
echo "slotflow-test-postgres: starting"
exec su postgres -s /bin/sh -c "exec $bin/postgres -D $data -c listen_addresses='*' -c unix_socket_directories=/run/postgresql"
