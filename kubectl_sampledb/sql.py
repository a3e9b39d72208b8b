"""What each server says about itself: one query run by psql inside its container, over the local socket.

The container has PGHOST/PGPORT/PGUSER for its own server and the superuser's password in POSTGRES_PASSWORD;
the shell inside the pod puts it in PGPASSWORD, so no credential is on a command line built here or in output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .kube import Cluster, ExecError

# The SQL is psql's "$1": passed as an argument, never spliced into the shell text.
PSQL_SCRIPT = ('PGPASSWORD="$POSTGRES_PASSWORD" PGCONNECT_TIMEOUT=5 PGOPTIONS="-c statement_timeout=5000" '
               'exec psql -XAtq -w -v ON_ERROR_STOP=1 -d postgres -c "$1"')

# One statement for either role. pg_current_wal_lsn() fails during recovery, hence the CASEs. A primary's
# timeline is that of the WAL it writes now (its last checkpoint's may predate its promotion); a replica's is
# that of the WAL it receives, or of its last restartpoint when it receives none.
SERVER_QUERY = """
select json_build_object(
  'in_recovery', pg_is_in_recovery(),
  'server_version', current_setting('server_version'),
  'now', now(),
  'current_lsn', case when pg_is_in_recovery() then null else pg_current_wal_lsn() end,
  'receive_lsn', pg_last_wal_receive_lsn(),
  'replay_lsn', pg_last_wal_replay_lsn(),
  'replay_timestamp', pg_last_xact_replay_timestamp(),
  'timeline', case when pg_is_in_recovery()
    then coalesce((select received_tli from pg_stat_wal_receiver), (select timeline_id from pg_control_checkpoint()))
    else ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int end,
  'receiver', (select json_build_object('status', status, 'sender_host', sender_host) from pg_stat_wal_receiver),
  'standbys', case when pg_is_in_recovery() then '[]'::json else (
    select coalesce(json_agg(json_build_object(
      'name', application_name, 'client_addr', client_addr, 'state', state, 'sync_state', sync_state,
      'sent_lsn', sent_lsn, 'write_lsn', write_lsn, 'flush_lsn', flush_lsn, 'replay_lsn', replay_lsn,
      'replay_lag', extract(epoch from replay_lag)) order by application_name), '[]'::json)
    from pg_stat_replication) end)
"""


@dataclass
class Standby:
    """One row of the primary's pg_stat_replication (application_name is the replica's pod name)."""

    name: str
    state: str | None = None
    sync_state: str | None = None
    client_addr: str | None = None
    sent_lsn: str | None = None
    write_lsn: str | None = None
    flush_lsn: str | None = None
    replay_lsn: str | None = None
    replay_lag: float | None = None


@dataclass
class ServerReport:
    in_recovery: bool
    server_version: str = ""
    now: str | None = None
    timeline: int | None = None
    current_lsn: str | None = None
    receive_lsn: str | None = None
    replay_lsn: str | None = None
    replay_timestamp: str | None = None
    receiver_status: str | None = None
    standbys: list[Standby] = field(default_factory=list)


class QueryError(Exception):
    """The server could not be asked: why, in a few words."""


def psql_command(sql: str) -> list[str]:
    return ["sh", "-c", PSQL_SCRIPT, "sh", sql]


def query_server(cluster: Cluster, pod: str, timeout: float = 10.0) -> ServerReport:
    try:
        result = cluster.exec(pod, psql_command(SERVER_QUERY), timeout)
    except ExecError as exc:
        raise QueryError(str(exc)) from None
    if result.rc is None:
        raise QueryError(f"no answer within {timeout:g} s")
    if result.rc != 0:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        raise QueryError(lines[-1] if lines else f"psql exited with status {result.rc}")
    try:
        return parse_report(result.stdout)
    except (ValueError, TypeError, KeyError) as exc:
        raise QueryError(f"unexpected answer from psql: {exc}") from None


def parse_report(text: str) -> ServerReport:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no output")
    doc: dict[str, Any] = json.loads(lines[-1])
    receiver = doc.get("receiver") or {}
    return ServerReport(
        in_recovery=bool(doc["in_recovery"]),
        server_version=str(doc.get("server_version") or ""),
        now=doc.get("now"),
        timeline=int(doc["timeline"]) if doc.get("timeline") is not None else None,
        current_lsn=doc.get("current_lsn"),
        receive_lsn=doc.get("receive_lsn"),
        replay_lsn=doc.get("replay_lsn"),
        replay_timestamp=doc.get("replay_timestamp"),
        receiver_status=receiver.get("status"),
        standbys=[Standby(**{k: s.get(k) for k in Standby.__dataclass_fields__}) for s in doc.get("standbys") or []],
    )


def lsn(text: str | None) -> int | None:
    """'16/B374D848' as a byte position."""
    if not text:
        return None
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def lsn_diff(ahead: str | None, behind: str | None) -> int | None:
    a, b = lsn(ahead), lsn(behind)
    return None if a is None or b is None else max(0, a - b)


def parse_time(text: str | None) -> datetime | None:
    """PostgreSQL's, Kubernetes' and ansible-runner's timestamps; one without an offset is UTC (ansible-runner's)."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
