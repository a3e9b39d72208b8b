"""verify.sh (a restore drill's Job) and replay.sh (the recovery it shares with entrypoint.sh), on Debian's PostgreSQL
15: barman-cloud replaced by fakes on PATH that serve a real base backup (pg_basebackup, its WAL left to the archive)
and a real WAL archive from a directory; the real ones run in tests/e2e/test_continuous_backup.py."""

from __future__ import annotations

import base64
import json
import shutil
import time
from pathlib import Path

from tests.scripts.manifests import ROLES
from tests.scripts.test_sampledb_scripts import PG15, USER, Server, _tree, make_server, pg_user, tmp_path  # noqa: F401

FILES = ROLES / "provision" / "files"
SECRET = "s3cr3t-value-never-shown"
LISTED = {"backups_list": [{"backup_id": "20261128T040000", "status": "DONE",
                            "end_time_iso": "2026-11-28T04:00:09+00:00"},
                           {"backup_id": "20261128T050000", "status": "FAILED"}]}


# the archive directory listed as barman-cloud lays WAL out in bucket b (gzip: each name with .gz)
BOTO3 = """import os


from botocore.exceptions import ClientError


class _Client:
    def list_objects_v2(self, Bucket, Prefix, StartAfter="", MaxKeys=1000):
        assert Bucket == "b"
        if os.environ.get("FAKE_S3_ERROR"):  # (S3's answer to keys it does not take, as botocore raises it)
            raise ClientError({{"Error": {{"Code": os.environ["FAKE_S3_ERROR"], "Message": "not these keys"}}}})
        keys = sorted(f"ns/db/pg15/wals/{{n[:16]}}/{{n}}.gz" for n in os.listdir("{archive}"))
        return {{"Contents": [{{"Key": k}} for k in keys if k.startswith(Prefix) and k > StartAfter][:MaxKeys]}}


def client(*_, **__):
    return _Client()
"""


def drill_box(tmp: Path, base: Path, archive: Path) -> tuple[Path, dict[str, str]]:
    """/etc/sampledb as the ConfigMap lays it out, the keys, fakes of barman-cloud on PATH, the scratch directory."""
    box = _tree(tmp / "drill", USER)
    etc, keys, bin_dir, scratch = (_tree(box / d, USER) for d in ("etc", "keys", "bin", "scratch"))
    for name in ("verify.sh", "replay.sh", "objectstore.sh", "choose-base-backup.py", "store.py"):
        shutil.copy(FILES / name, etc / name)
    # (boto3, as store.py uses it: the archive directory listed as barman-cloud lays WAL out in the store)
    fake = _tree(box / "pylib", USER)
    for package, body in {"botocore": "", "boto3": BOTO3.format(archive=archive)}.items():
        _tree(fake / package, USER)
        (fake / package / "__init__.py").write_text(body)
    (fake / "botocore" / "config.py").write_text("class Config:\n    def __init__(self, **_):\n        pass\n")
    (fake / "botocore" / "exceptions.py").write_text(
        "class BotoCoreError(Exception):\n    pass\n\n\nclass NoCredentialsError(BotoCoreError):\n    pass\n\n\n"
        "class ClientError(Exception):\n"
        "    def __init__(self, response):\n        super().__init__(str(response))\n        self.response = response\n")
    (etc / "postgresql.conf").write_text("max_connections = 20\narchive_mode = always\n"
                                         "archive_command = '/bin/false'\n")
    (etc / "objectstore.env").write_text(
        "SAMPLEDB_S3_ENDPOINT=http://store:7070\nSAMPLEDB_S3_URL=s3://b/ns/db\nSAMPLEDB_S3_REGION=us-east-1\n"
        f"SAMPLEDB_S3_COMPRESSION=gzip\nSAMPLEDB_S3_KEYS={keys}\nSAMPLEDB_S3_CALL_SECONDS=10\n")
    (keys / "ACCESS_KEY_ID").write_text("key-id-1")
    (keys / "ACCESS_SECRET_KEY").write_text(SECRET)
    fakes = {
        "barman-cloud-backup-list": 'printf "%s\\n" "$FAKE_LISTING"',
        # (the last two arguments: the backup's id and where to put it)
        "barman-cloud-restore": f'[ "${{@: -2:1}}" = 20261128T040000 ] && cp -a {base} "${{@: -1}}"',
        # (the last two: the WAL file asked for and where; 1: the archive has no such file)
        "barman-cloud-wal-restore": f'[ -f "{archive}/${{@: -2:1}}" ] || exit 1; cp "{archive}/${{@: -2:1}}" "${{@: -1}}"',
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f'#!/bin/bash\necho "{name} $*" >>{box}/calls\n{body}\n')
        (bin_dir / name).chmod(0o755)
    for path in box.rglob("*"):
        shutil.chown(path, USER)
    env = {"SCRATCH": str(scratch), "CONF_DIR": str(etc), "TERMINATION_LOG": str(box / "termination-log"),
           "BARMAN_PYTHON": shutil.which("python3", path="/usr/bin") or "/usr/bin/python3", "FAKE_LISTING": json.dumps(LISTED), "JOB_NAME": "db-verify-1",
           "PATH": f"{bin_dir}:{PG15}:/usr/bin:/bin", "PYTHONPATH": str(fake)}
    return box, env


def archived_source(make_server, tmp_path: Path) -> tuple[Server, Path, Path, str, list[str]]:  # noqa: F811
    """A server archiving to a directory, its base backup (WAL left to the archive), then rows in two more segments:
    (the server, stopped; the base backup; the archive; the last insert's time; the two segments' names)."""
    source: Server = make_server(PG15, "source", init=False)
    source.run("initdb", "-U", "postgres", "--auth=trust", "-D", str(source.data))
    archive = _tree(tmp_path / "archive", USER)
    with (source.data / "postgresql.conf").open("a") as conf:
        conf.write(f"archive_mode = on\narchive_command = 'cp %p {archive}/%f'\n")
    source.start()
    segments = []
    try:
        source.sql("CREATE DATABASE app")
        source.sql("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 100)", db="app")
        base = _tree(tmp_path / "base", USER)
        source.run("pg_basebackup", "-D", str(base), "-X", "none", "--checkpoint=fast")
        time.sleep(1.1)  # (the rows after the base backup commit at a later second than it ended)
        for first in (101, 151):
            # (now() of the insert's own transaction: its commit is no earlier)
            last = source.sql(f"INSERT INTO t SELECT generate_series({first}, {first + 49}); "
                              "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')", db="app")
            segments.append(source.sql("SELECT pg_walfile_name(pg_switch_wal())"))
        for _ in range(100):
            if (archive / segments[-1]).exists():
                break
            time.sleep(0.1)
    finally:
        source.stop()
    return source, base, archive, last, segments


def test_a_drill_replays_the_newest_completed_base_backup_and_every_archived_wal_file(make_server, tmp_path) -> None:  # noqa: F811
    source, base, archive, last, _ = archived_source(make_server, tmp_path)
    box, env = drill_box(tmp_path, base, archive)
    done = source.run("bash", f"{box}/etc/verify.sh", extra=env, check=False)
    assert done.returncode == 0, done.stderr
    fields = dict(kv.split("=", 1) for kv in (box / "termination-log").read_text().split())
    assert fields["backup_id"] == "20261128T040000" and fields["databases"] == "3"  # (postgres, template1, app)
    assert fields["recovered_to"] >= last[:19] and int(fields["timeline"]) == 2, (fields, last)
    calls = (box / "calls").read_text()
    assert SECRET not in calls + done.stdout + done.stderr
    # nothing of the drill is left running; what it restored stays in the scratch volume, which goes with the pod
    assert not (box / "scratch" / "data" / "postmaster.pid").exists()


def test_a_drill_fails_on_a_gap_in_the_archive_naming_it(make_server, tmp_path) -> None:  # noqa: F811
    """A WAL file lost from the archive with later ones there: the replay stops at the gap, which is no end of the
    archive: the drill fails, naming the file missing and the newest one beyond it (a recovery fails the same way)."""
    source, base, archive, _, segments = archived_source(make_server, tmp_path)
    (archive / segments[0]).unlink()
    # (a backup label of that segment is not the segment)
    (archive / f"{segments[0]}.00000028.backup").write_text("START WAL LOCATION: ...\n")
    box, env = drill_box(tmp_path, base, archive)
    done = source.run("bash", f"{box}/etc/verify.sh", extra=env, check=False)
    assert done.returncode == 1, done.stderr
    said = base64.b64decode((box / "termination-log").read_text().strip().removeprefix("error=")).decode()
    assert said.startswith(f"the archive has a gap: it lacks {segments[0]} but holds WAL up to {segments[1]};"), said
    assert not (box / "scratch" / "data" / "postmaster.pid").exists()


def test_a_drill_without_a_completed_base_backup_fails_saying_so(make_server, tmp_path) -> None:  # noqa: F811
    server: Server = make_server(PG15, "tools", init=False)
    box, env = drill_box(tmp_path, tmp_path / "none", _tree(tmp_path / "archive", USER))
    done = server.run("bash", f"{box}/etc/verify.sh", extra={**env, "FAKE_LISTING": json.dumps(
        {"backups_list": [{"backup_id": "20261128T050000", "status": "FAILED"}]})}, check=False)
    assert done.returncode == 1
    said = base64.b64decode((box / "termination-log").read_text().strip().removeprefix("error=")).decode()
    assert said == ("spec.backup.objectStore: s3://b/ns/db/pg15 holds no completed base backup: check its bucket, path "
                    "and sourceName, and that the source took a physical backup there"), said


def test_a_drill_with_keys_the_store_refuses_names_the_credentials_and_restores_nothing(make_server, tmp_path) -> None:  # noqa: F811
    server: Server = make_server(PG15, "tools", init=False)
    box, env = drill_box(tmp_path, tmp_path / "none", _tree(tmp_path / "archive", USER))
    done = server.run("bash", f"{box}/etc/verify.sh", extra={**env, "FAKE_S3_ERROR": "SignatureDoesNotMatch"},
                      check=False)
    assert done.returncode == 1
    said = base64.b64decode((box / "termination-log").read_text().strip().removeprefix("error=")).decode()
    assert said.startswith("spec.backup.objectStore.credentials: the object store at http://store:7070 refused the "
                           "keys (SignatureDoesNotMatch: not these keys)"), said
    assert not (box / "calls").exists()  # (barman-cloud never called)
