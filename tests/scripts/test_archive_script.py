"""archive.sh's decisions, with barman-cloud and psql replaced by recording fakes on PATH (the real ones run in
tests/e2e/test_continuous_backup.py): what a primary uploads and where, what a standby marks done, what it lets go,
what is kept for --report, and that the keys go to barman's environment only, never its command line or a message."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.scripts.manifests import ROLES

SCRIPT = ROLES / "provision" / "files" / "archive.sh"
SECRET = "s3cr3t-value-never-shown"
SEGMENT = "000000020000000000000010"


@dataclass
class Box:
    root: Path
    pgdata: Path
    run: Path
    calls: Path

    def archive(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        base = {"PATH": f"{self.root / 'bin'}:{os.environ['PATH']}", "PGDATA": str(self.pgdata),
                "PGHOST": str(self.run), "POSTGRES_PASSWORD": "pw", "PRIMARY_HOST": "db-primary",
                "PRIMARY_PORT": "5432", "FAKE_CALLS": str(self.calls)}
        return subprocess.run(["bash", str(self.root / "etc" / "archive.sh"), *args], env={**base, **env},
                              capture_output=True, text=True, cwd=self.pgdata, timeout=30)

    def ready(self, *names: str) -> None:
        for n in names:
            (self.pgdata / "pg_wal" / "archive_status" / f"{n}.ready").touch()

    def recorded(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def report(self) -> dict[str, str]:
        out = self.archive("--report").stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


@pytest.fixture
def box(tmp_path: Path) -> Box:
    root = tmp_path
    for d in ("bin", "etc", "keys", "run", "data/pg_wal/archive_status"):
        (root / d).mkdir(parents=True)
    (root / "data" / "PG_VERSION").write_text("15\n")  # (the data's major names the archive: pg15)
    shutil.copy(SCRIPT, root / "etc" / "archive.sh")
    shutil.copy(SCRIPT.with_name("objectstore.sh"), root / "etc" / "objectstore.sh")
    (root / "etc" / "objectstore.env").write_text(
        "SAMPLEDB_S3_ENDPOINT=http://store:7070\nSAMPLEDB_S3_URL=s3://b/ns/db\nSAMPLEDB_S3_REGION=us-east-1\n"
        f"SAMPLEDB_S3_COMPRESSION=gzip\nSAMPLEDB_S3_KEYS={root / 'keys'}\nSAMPLEDB_S3_CALL_SECONDS=10\n"
        "SAMPLEDB_STANDBY_HOLD_MB=64\n")
    (root / "keys" / "ACCESS_KEY_ID").write_text("key-id-1")
    (root / "keys" / "ACCESS_SECRET_KEY").write_text(SECRET)
    # Fakes: each records its argv and whether the keys were in its environment; FAKE_<NAME>_EXIT and _OUT decide.
    for name in ("barman-cloud-wal-archive", "barman-cloud-check-wal-archive", "psql"):
        var = name.upper().replace("-", "_")
        (root / "bin" / name).write_text(
            "#!/bin/bash\n"
            f'echo "{name} $* env=${{AWS_ACCESS_KEY_ID:-}}/${{AWS_SECRET_ACCESS_KEY:+set}}" >>"$FAKE_CALLS"\n'
            f'sleep "${{FAKE_{var}_SLEEP:-0}}"\n'
            f'[ -n "${{FAKE_{var}_OUT:-}}" ] && printf "%s\\n" "$FAKE_{var}_OUT"\n'
            f'exit "${{FAKE_{var}_EXIT:-0}}"\n')
        (root / "bin" / name).chmod(0o755)
    return Box(root, root / "data", root / "run", root / "calls")


def test_a_primary_checks_the_destination_once_then_uploads_with_the_keys_in_its_environment(box: Box) -> None:
    done = box.archive(f"pg_wal/{SEGMENT}")
    assert done.returncode == 0, done.stderr
    calls = box.recorded()
    assert calls == [
        "barman-cloud-check-wal-archive --endpoint-url http://store:7070 --addressing-style path s3://b/ns/db pg15 "
        "env=key-id-1/set",
        f"barman-cloud-wal-archive --endpoint-url http://store:7070 --addressing-style path --gzip s3://b/ns/db pg15 "
        f"pg_wal/{SEGMENT} env=key-id-1/set"]
    assert SECRET not in "".join(calls)  # (never an argument)
    assert (box.pgdata / "sampledb-archive-checked").read_text() == "s3://b/ns/db/pg15\n"
    assert box.report()["last_wal"] == SEGMENT and box.report()["destination"] == "s3://b/ns/db/pg15"
    box.archive(f"pg_wal/{SEGMENT[:-1]}1")
    barman = [c.split()[0] for c in box.recorded() if c.startswith("barman")]
    assert barman == ["barman-cloud-check-wal-archive", "barman-cloud-wal-archive", "barman-cloud-wal-archive"]


def test_an_archive_in_use_is_refused_and_the_message_kept_without_the_keys(box: Box) -> None:
    refused = box.archive(f"pg_wal/{SEGMENT}", FAKE_BARMAN_CLOUD_CHECK_WAL_ARCHIVE_EXIT="1",
                          FAKE_BARMAN_CLOUD_CHECK_WAL_ARCHIVE_OUT=(
                              f"2026-11-28 01:37:04,292 [318] ERROR: WAL archive check failed for server pg15: "
                              f"Expected empty archive (key {SECRET})"))
    assert refused.returncode == 1
    assert [c.split()[0] for c in box.recorded()] == ["barman-cloud-check-wal-archive"]  # nothing uploaded
    assert not (box.pgdata / "sampledb-archive-checked").exists()
    report = box.report()
    message = base64.b64decode(report["error"]).decode()
    assert message == "WAL archive check failed for server pg15: Expected empty archive (key <secret access key>)"
    assert SECRET not in refused.stderr and report["last_ok"] == ""


def test_a_failure_without_a_message_and_unreadable_keys_are_recorded(box: Box) -> None:
    silent = box.archive(f"pg_wal/{SEGMENT}", FAKE_BARMAN_CLOUD_CHECK_WAL_ARCHIVE_EXIT="3")
    assert silent.returncode == 1
    assert base64.b64decode(box.report()["error"]).decode() == "exit status 3, no message"
    (box.root / "keys" / "ACCESS_SECRET_KEY").unlink()
    box.archive(f"pg_wal/{SEGMENT}")
    said = base64.b64decode(box.report()["error"]).decode()
    assert said.startswith("spec.backup.objectStore.credentials: the keys in ") and said.endswith("missing or empty")
    # a key that is only a line end (a Secret made from an empty file) is no key
    (box.root / "keys" / "ACCESS_SECRET_KEY").write_text("\r\n")
    box.archive(f"pg_wal/{SEGMENT}")
    assert base64.b64decode(box.report()["error"]).decode().endswith("missing or empty")


def test_a_standby_never_uploads_and_is_done_once_the_primary_archived_as_far_timeline_first(box: Box) -> None:
    (box.pgdata / "standby.signal").touch()
    # the primary archived timeline 2 up to 0F: 10 of timeline 2 waits
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT="00000002000000000000000F s3://b/ns/db/pg15").returncode == 1
    # a later segment of an earlier timeline (a .partial the new primary archives first) is not enough either
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT="000000010000000000000011").returncode == 1
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT="000000010000000000000011.partial").returncode == 1
    assert not (box.pgdata / "sampledb-archive-checked").exists()
    # archived as far (or on a later timeline): done, and the primary's destination is this server's own now
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT=f"{SEGMENT} s3://b/ns/db/pg15").returncode == 0
    assert (box.pgdata / "sampledb-archive-checked").read_text() == "s3://b/ns/db/pg15\n"
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT="00000003000000000000000E").returncode == 0
    assert not any(c.startswith("barman") for c in box.recorded())
    # history and backup-label files are the primary's
    assert box.archive("pg_wal/00000002.history").returncode == 0


def test_a_standby_whose_primary_archives_elsewhere_does_not_take_its_destination(box: Box) -> None:
    (box.pgdata / "standby.signal").touch()
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT=f"{SEGMENT} s3://b/old/path/pg15").returncode == 0
    assert not (box.pgdata / "sampledb-archive-checked").exists()


def test_a_standby_lets_wal_go_past_its_budget_and_keeps_where_until_the_primary_archived_past_it(box: Box) -> None:
    (box.pgdata / "standby.signal").touch()
    box.ready(*(f"0000000200000000000000{n:02X}" for n in range(16, 20)))  # 4 x 16 MB = its 64 MB budget
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_EXIT="2").returncode == 1
    box.ready("000000020000000000000014", "00000002.history")  # (a history file is no segment: not counted)
    let_go = box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_EXIT="2")
    assert let_go.returncode == 0 and "let 000000020000000000000010 go" in let_go.stderr
    assert box.archive("pg_wal/000000020000000000000011", FAKE_PSQL_EXIT="2").returncode == 0
    assert box.report()["gap"] == SEGMENT  # the first it let go: promoted now, it would report it
    # the primary archives past it: no gap after all
    assert box.archive("pg_wal/000000020000000000000012", FAKE_PSQL_OUT="000000020000000000000012").returncode == 0
    assert box.report()["gap"] == "" and not (box.pgdata / "sampledb-archive-gap").exists()


def test_a_backup_label_the_primary_archived_last_stands_for_its_segment(box: Box) -> None:
    (box.pgdata / "standby.signal").touch()
    assert box.archive(f"pg_wal/{SEGMENT}", FAKE_PSQL_OUT=f"{SEGMENT}.00000028.backup").returncode == 0
    assert box.archive("pg_wal/000000020000000000000011",
                       FAKE_PSQL_OUT=f"{SEGMENT}.00000028.backup").returncode == 1


def test_a_stopping_server_uploads_nothing_more_and_a_store_that_does_not_answer_is_given_up_on(box: Box) -> None:
    (box.run / "sampledb-stopping").touch()
    assert box.archive(f"pg_wal/{SEGMENT}").returncode == 1 and box.recorded() == []
    (box.run / "sampledb-stopping").unlink()
    env = (box.root / "etc" / "objectstore.env")
    env.write_text(env.read_text().replace("SAMPLEDB_S3_CALL_SECONDS=10", "SAMPLEDB_S3_CALL_SECONDS=1"))
    hung = box.archive(f"pg_wal/{SEGMENT}", FAKE_BARMAN_CLOUD_CHECK_WAL_ARCHIVE_SLEEP="30")
    assert hung.returncode == 1  # (never above 125: PostgreSQL would take its archiver for failed)
    assert base64.b64decode(box.report()["error"]).decode() == "no answer from the object store within 1s (or killed)"


def test_the_report_says_why_when_the_settings_are_not_there_yet(box: Box) -> None:
    (box.root / "etc" / "objectstore.env").unlink()
    out = box.archive("--report")
    assert out.returncode == 0
    fields = dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)
    assert "spec.backup.objectStore is not rolled out" in base64.b64decode(fields["error"]).decode()
