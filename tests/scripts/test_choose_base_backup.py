"""choose-base-backup.py, as a recovery runs it with barman's Python: which base backup a point-in-time recovery
starts from, given what barman-cloud-backup-list says of the archive."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.scripts.manifests import ROLES

SCRIPT = ROLES / "provision" / "files" / "choose-base-backup.py"
LISTING = {"backups_list": [
    {"backup_id": "20261126T003000", "status": "DONE", "end_time_iso": "2026-11-26T00:30:09+00:00",
     "end_xlog": "0/5000138"},
    {"backup_id": "20261127T003000", "status": "FAILED"},
    {"backup_id": "20261128T003000", "status": "DONE", "end_time_iso": "2026-11-28T00:30:09",
     "end_xlog": "1/A000138"},
    {"backup_id": "20261128T060000", "status": "STARTED"}]}


def choose(backup_id: str = "", when: str = "", lsn: str = "", listing: dict = LISTING, noise: str = "") -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), backup_id, when, lsn], input=noise + json.dumps(listing),
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_the_newest_completed_backup_ending_before_the_time_or_position() -> None:
    assert choose(when="2026-11-27 12:00:00+00:00") == "20261126T003000"
    # (an end barman wrote without a zone is UTC, as the servers' clocks are)
    assert choose(when="2026-11-28 02:00:00+01:00") == "20261128T003000"
    assert choose(when="2026-11-28 01:00:00+01:00") == "20261126T003000"
    assert choose(lsn="1/A000137") == "20261126T003000"
    assert choose(lsn="1/A000138") == "20261128T003000"


def test_without_a_target_the_newest_completed_and_never_a_failed_or_unfinished_one() -> None:
    assert choose() == "20261128T003000"
    failed_last = {"backups_list": LISTING["backups_list"][:2]}
    assert choose(listing=failed_last) == "20261126T003000"


def test_a_backup_named_is_taken_only_when_completed() -> None:
    assert choose("20261126T003000", when="2026-11-28 12:00:00+00:00") == "20261126T003000"
    said = choose("20261127T003000")
    assert said.startswith("error: backupID 20261127T003000 is not a completed base backup here")
    assert said.endswith("these are: 20261126T003000 20261128T003000")


def test_a_target_before_every_backup_names_the_first_recoverability_point() -> None:
    assert choose(when="2026-11-25 00:00:00+00:00") == (
        "error: no completed base backup ends before the target; the first recoverability point is "
        "2026-11-26T00:30:09+00:00")
    assert choose(listing={"backups_list": []}) == "error: there is no completed base backup in this archive"


def test_barmans_warnings_beside_the_listing_are_left_out() -> None:
    noise = "2026-11-28 06:00:00,000 [42] WARNING: Unable to open backup.info file for 20261127T003000\n"
    assert choose(listing=LISTING, noise=noise) == "20261128T003000"
    done = subprocess.run([sys.executable, str(SCRIPT), "", "", ""], input=noise, capture_output=True, text=True,
                          timeout=30, check=True)
    assert done.stdout.strip() == "error: barman-cloud-backup-list printed no listing"
