"""choose-base-backup.py BACKUP_ID TARGET_TIME TARGET_LSN < barman-cloud-backup-list --format json 2>&1

The base backup a recovery (entrypoint.sh's recover) starts from, printed: a completed one only (barman's own choice
also takes failed ones), BACKUP_ID when given and completed, else the newest that ends at or before TARGET_TIME or
TARGET_LSN, else the newest. When there is none it prints "error: ..." naming the first recoverability point.
"""

import json
import sys
from datetime import UTC, datetime


def at(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def position(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def choose(listing: dict, backup_id: str, when: str, lsn: str) -> str:
    done = sorted((b for b in listing.get("backups_list", []) if b.get("status") == "DONE"),
                  key=lambda b: b["backup_id"])
    if not done:
        return "error: there is no completed base backup in this archive"
    if backup_id:
        if backup_id in [b["backup_id"] for b in done]:
            return backup_id
        return (f"error: backupID {backup_id} is not a completed base backup here; these are: "
                + " ".join(b["backup_id"] for b in done))
    first = done[0].get("end_time_iso") or done[0]["backup_id"]
    if when:
        done = [b for b in done if b.get("end_time_iso") and at(b["end_time_iso"]) <= at(when)]
    elif lsn:
        done = [b for b in done if b.get("end_xlog") and position(b["end_xlog"]) <= position(lsn)]
    if not done:
        return f"error: no completed base backup ends before the target; the first recoverability point is {first}"
    return done[-1]["backup_id"]


if __name__ == "__main__":
    args = [*sys.argv[1:], "", "", ""][:3]
    # (barman's warnings come on the same stream: the listing is its one JSON line)
    lines = [line for line in sys.stdin.read().splitlines() if line.startswith("{")]
    print(choose(json.loads(lines[-1]), *args) if lines else "error: barman-cloud-backup-list printed no listing")
