"""base-backup.sh (a physical backup's Job), with barman-cloud replaced by recording fakes on PATH (the real ones run
in tests/e2e/test_continuous_backup.py): what it asks barman for, what it reports to the operator through the
termination log, and that the keys go to barman's environment only, never its command line or a message."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts.manifests import ROLES

FILES = ROLES / "provision" / "files"
SECRET = "s3cr3t-value-never-shown"
BACKUP = {"pg15": {"backup_id": "20261128T060000", "backup_name": "nightly.6a1f-uid", "status": "DONE",
                 "begin_xlog": "0/5000028", "end_xlog": "0/5000138", "begin_wal": "000000010000000000000005",
                 "end_wal": "000000010000000000000005", "timeline": 1, "size": 31616512,
                 "begin_time_iso": "2026-11-28T06:00:00+00:00", "end_time_iso": "2026-11-28T06:00:09+00:00"}}

# barman-cloud-backup-list's answer: the store holds this backup alone
LISTED = {"backups_list": [BACKUP["pg15"]]}

@pytest.fixture
def box(tmp_path: Path) -> Path:
    for d in ("bin", "etc", "keys", "data"):
        (tmp_path / d).mkdir()
    (tmp_path / "data" / "PG_VERSION").write_text("15\n")
    for name in ("base-backup.sh", "objectstore.sh", "common.sh"):
        shutil.copy(FILES / name, tmp_path / "etc" / name)
    (tmp_path / "etc" / "objectstore.env").write_text(
        "SAMPLEDB_S3_ENDPOINT=http://store:7070\nSAMPLEDB_S3_URL=s3://b/ns/db\nSAMPLEDB_S3_REGION=us-east-1\n"
        f"SAMPLEDB_S3_COMPRESSION=gzip\nSAMPLEDB_S3_KEYS={tmp_path / 'keys'}\nSAMPLEDB_S3_CALL_SECONDS=10\n")
    (tmp_path / "keys" / "ACCESS_KEY_ID").write_text("key-id-1")
    (tmp_path / "keys" / "ACCESS_SECRET_KEY").write_text(SECRET)
    for name in ("barman-cloud-backup", "barman-cloud-backup-delete", "barman-cloud-backup-list"):
        var = name.upper().replace("-", "_")
        (tmp_path / "bin" / name).write_text(
            "#!/bin/bash\n"
            f'echo "{name} $* env=${{AWS_ACCESS_KEY_ID:-}}/${{AWS_SECRET_ACCESS_KEY:+set}}" >>"$FAKE_CALLS"\n'
            f'[ -n "${{FAKE_{var}_OUT:-}}" ] && printf "%s\\n" "$FAKE_{var}_OUT"\n'
            f'exit "${{FAKE_{var}_EXIT:-0}}"\n')
        (tmp_path / "bin" / name).chmod(0o755)
    return tmp_path


def run(box: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], str, list[str]]:
    base = {"PATH": f"{box / 'bin'}:{os.environ['PATH']}", "PGDATA": str(box / "data"), "BACKUP_NAME": "nightly",
            "POD_UID": "6a1f-uid",
            "PGHOST": "db-1.db-headless", "PGPORT": "5432", "PGUSER": "postgres", "SOURCE_SERVER": "db-1",
            "TERMINATION_LOG": str(box / "termination-log"), "FAKE_CALLS": str(box / "calls"),
            "BARMAN_PYTHON": sys.executable, "FAKE_BARMAN_CLOUD_BACKUP_LIST_OUT": json.dumps(LISTED)}
    done = subprocess.run(["bash", str(box / "etc" / "base-backup.sh")], env={**base, **env}, capture_output=True,
                          text=True, timeout=30)
    log = box / "termination-log"
    calls = box / "calls"
    return done, log.read_text() if log.exists() else "", calls.read_text().splitlines() if calls.exists() else []


def test_it_backs_up_the_mounted_servers_data_under_a_name_of_its_own_and_reports_it(box: Path) -> None:
    (box / "data" / "pg_wal").mkdir()
    (box / "data" / "pg_wal" / "000000010000000000000005").write_bytes(bytes(1 << 20))
    done, report, calls = run(box)
    assert done.returncode == 0, done.stderr
    assert calls == [
        "barman-cloud-backup --endpoint-url http://store:7070 --addressing-style path --gzip --immediate-checkpoint "
        "--name nightly.6a1f-uid --host db-1.db-headless --port 5432 --user postgres --dbname postgres s3://b/ns/db pg15 "
        "env=key-id-1/set",
        # (no retention policy: nothing deleted; what the store holds is read once, this backup's fields with it)
        "barman-cloud-backup-list --endpoint-url http://store:7070 --addressing-style path --format json "
        "s3://b/ns/db pg15 env=key-id-1/set"]
    fields = dict(kv.split("=", 1) for kv in report.split())
    assert 0 < int(fields.pop("size")) < 1 << 20  # the data directory's, pg_wal's segments left out as barman does
    assert (fields.pop("oldest_kept"), fields.pop("first_recoverability")) == (
        "20261128T060000", "2026-11-28T06:00:09+00:00")
    assert fields == {"id": "20261128T060000", "name": "nightly.6a1f-uid", "begin_lsn": "0/5000028", "end_lsn": "0/5000138",
                      "begin_wal": "000000010000000000000005", "end_wal": "000000010000000000000005",
                      "timeline": "1", "begin_time": "2026-11-28T06:00:00+00:00",
                      "end_time": "2026-11-28T06:00:09+00:00", "status": "DONE",
                      "server": "db-1", "archive": "s3://b/ns/db/pg15"}
    assert SECRET not in done.stdout + done.stderr + report


def test_a_failure_is_reported_with_the_keys_replaced(box: Path) -> None:
    done, report, _ = run(box, FAKE_BARMAN_CLOUD_BACKUP_EXIT="1",
                          FAKE_BARMAN_CLOUD_BACKUP_OUT=f"2026-11-28 06:00:00,000 [42] ERROR: refused key-id-1 {SECRET}")
    assert done.returncode == 1
    said = base64.b64decode(report.strip().removeprefix("error=")).decode()
    assert said == "refused <access key id> <secret access key>"
    assert SECRET not in done.stdout + done.stderr + report


def test_a_backup_barman_does_not_call_done_fails(box: Path) -> None:
    failed = {"backups_list": [{**BACKUP["pg15"], "status": "FAILED"}]}
    done, report, _ = run(box, FAKE_BARMAN_CLOUD_BACKUP_LIST_OUT=json.dumps(failed))
    assert done.returncode == 1 and report.startswith("error=")
    assert "not done" in base64.b64decode(report.strip().removeprefix("error=")).decode()


def test_without_the_keys_it_names_the_field(box: Path) -> None:
    (box / "keys" / "ACCESS_SECRET_KEY").unlink()
    done, report, calls = run(box)
    assert done.returncode == 1 and calls == []
    assert "spec.backup.objectStore.credentials" in base64.b64decode(report.strip().removeprefix("error=")).decode()


def test_the_configuration_files_the_server_names_are_laid_out_where_it_has_them(box: Path) -> None:
    """barman copies the server's config_file and hba_file (outside PGDATA): the same files from the ConfigMap, at
    the server's paths, before barman runs."""
    (box / "etc" / "postgresql.conf").write_text("max_connections = 100\n")
    (box / "etc" / "pg_hba.conf").write_text("host all all all scram-sha-256\n")
    (box / "run").mkdir()
    done, _, _ = run(box, RUN_DIR=str(box / "run"))
    assert done.returncode == 0, done.stderr
    assert (box / "run" / "runtime.conf").read_text() == f"include '{box / 'etc' / 'postgresql.conf'}'\n"
    assert (box / "run" / "pg_hba.conf").read_text() == "host all all all scram-sha-256\n"


def test_a_retention_policy_is_applied_after_the_backup_and_what_the_store_kept_reported(box: Path) -> None:
    """spec.backup.retentionPolicy: barman-cloud-backup-delete with the recovery window, once the backup is done; then
    the oldest DONE backup the store lists (a FAILED one is not a recovery's start) and when it ended."""
    (box / "etc" / "objectstore.env").write_text(
        (box / "etc" / "objectstore.env").read_text() + "SAMPLEDB_RETENTION_POLICY='RECOVERY WINDOW OF 7 DAYS'\n")
    listing = {"backups_list": [
        {"backup_id": "20261120T003000", "status": "FAILED"},
        {"backup_id": "20261121T003000", "status": "DONE", "end_time_iso": "2026-11-21T00:30:09+00:00"},
        BACKUP["pg15"]]}
    done, report, calls = run(box, FAKE_BARMAN_CLOUD_BACKUP_LIST_OUT=json.dumps(listing))
    assert done.returncode == 0, done.stderr
    assert calls[1] == ("barman-cloud-backup-delete --endpoint-url http://store:7070 --addressing-style path "
                        "--retention-policy RECOVERY WINDOW OF 7 DAYS s3://b/ns/db pg15 env=key-id-1/set")
    fields = dict(kv.split("=", 1) for kv in report.split())
    assert (fields["oldest_kept"], fields["first_recoverability"]) == ("20261121T003000", "2026-11-21T00:30:09+00:00")
    assert "retention_error" not in fields

    failing, report, _ = run(box, FAKE_BARMAN_CLOUD_BACKUP_DELETE_EXIT="1",
                             FAKE_BARMAN_CLOUD_BACKUP_DELETE_OUT=f"ERROR: denied {SECRET}",
                             FAKE_BARMAN_CLOUD_BACKUP_LIST_OUT=json.dumps(listing))
    assert failing.returncode == 0, failing.stderr  # (the backup itself is done)
    said = base64.b64decode(dict(kv.split("=", 1) for kv in report.split())["retention_error"]).decode()
    assert said == "ERROR: denied <secret access key>"


def test_a_final_backup_begins_only_once_the_primary_has_fenced_its_clients(box: Path) -> None:
    """REQUIRE_FENCE (deletionPolicy Snapshot's final backup): barman is called only after the server says it is
    fenced (its sampledb.fence setting); a server that never says so within PG_WAIT_SECONDS fails the backup, naming
    it, and nothing was copied."""
    (box / "bin" / "psql").write_text('#!/bin/bash\necho "psql $*" >>"$FAKE_CALLS"\nprintf "%s\\n" "${FAKE_FENCE:-}"\n')
    (box / "bin" / "psql").chmod(0o755)
    done, _, calls = run(box, REQUIRE_FENCE="final-backup", FAKE_FENCE="final-backup")
    assert done.returncode == 0, done.stderr
    assert calls[0].startswith("psql ") and "sampledb.fence" in calls[0] and calls[1].startswith("barman-cloud-backup ")
    (box / "calls").unlink()
    done, report, calls = run(box, REQUIRE_FENCE="final-backup", PG_WAIT_SECONDS="1")
    assert done.returncode == 1 and not any(c.startswith("barman-cloud-backup ") for c in calls)
    said = base64.b64decode(report.strip().removeprefix("error=")).decode()
    assert said == "the server db-1.db-headless did not fence its clients (final-backup) within 1s"
