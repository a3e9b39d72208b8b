"""`status` for people (aligned tables, colour on a terminal) and for scripts (-o json)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TextIO

from . import lease_name
from .sql import parse_time
from .status import Backup, Condition, DatabaseStatus, Event, Server

# A replica this far behind is worth a look: one WAL segment, or ten seconds of replay.
LAG_WARN_BYTES = 16 * 1024 * 1024
LAG_WARN_SECONDS = 10.0

# The status each condition has when all is well; the others are shown as trouble (Progressing as work).
HEALTHY = {"Ready": "True", "Degraded": "False", "Progressing": "False", "LastBackupSucceeded": "True",
           "DeletionBlocked": "False"}

ANSI = {"red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1", "dim": "2"}

Cell = tuple[str, str | None]  # text, colour


def use_colour(stream: TextIO, choice: str = "auto", env: Mapping[str, str] | None = None) -> bool:
    """auto: only on a terminal that can show it, and not when NO_COLOR is set (https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    env = os.environ if env is None else env
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


@dataclass(frozen=True)
class Paint:
    enabled: bool

    def __call__(self, text: str, colour: str | None) -> str:
        if not self.enabled or not colour or not text:
            return text
        return f"\x1b[{ANSI[colour]}m{text}\x1b[0m"


def render_json(status: DatabaseStatus) -> str:
    return json.dumps(asdict(status), indent=2) + "\n"


def render_text(s: DatabaseStatus, colour: bool = False) -> str:
    paint = Paint(colour)
    conditions = _table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
                        [_condition_row(c, s) for c in s.conditions], paint) if s.conditions else ["(none yet)"]
    backups = _table(["NAME", "REASON", "PHASE", "SIZE", "AGE"],
                     [_backup_row(b) for b in s.backups], paint) if s.backups else ["(none)"]
    shown = f"last {len(s.backups)} of {s.backups_total}" if s.backups_total > len(s.backups) else f"{s.backups_total}"
    out = [paint(f"SampleDB {s.name}", "bold") + f" in namespace {s.namespace}", *_summary(s, paint),
           *_section("Conditions", conditions, paint),
           *_section("Servers", _servers(s, paint), paint),
           *_section(f"Backups ({shown})", backups, paint),
           *_section("Operator", _operator(s, paint), paint)]
    if s.events:
        out += _section(f"Events (last {len(s.events)})", _table(
            ["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"], [_event_row(e) for e in s.events], paint), paint)
    if s.notes:
        out += _section("Could not read", [paint(n, "yellow") for n in s.notes], paint)
    return "\n".join(out) + "\n"


def _section(title: str, lines: list[str], paint: Paint) -> list[str]:
    return ["", paint(title, "bold"), *("  " + line for line in lines)]


def _summary(s: DatabaseStatus, paint: Paint) -> list[str]:
    phase_colour = {"Ready": "green", "Failed": "red"}.get(s.phase or "", "yellow")
    version = s.version or "-"
    if s.spec_version and s.spec_version != s.version:
        version += f" (spec {s.spec_version})"
    primary = s.current_primary or paint("none", "red")
    if s.target_primary:
        primary += f", promoting {s.target_primary}"
    if s.lease_holder is not None and s.lease_holder != s.current_primary:
        primary += f" (Lease {lease_name(s.name)}: {s.lease_holder or 'nobody, a change of primary is in progress'})"
    rows = [("Phase", paint(s.phase or "unknown", phase_colour)), ("Version", version),
            ("Servers", f"{s.ready or '-'} ready"), ("Primary", primary),
            ("Services", _services(s, paint))]
    if s.archive:
        rows.append(("Archive", _archive(s, paint)))
    if s.recoverable:
        first, last = s.recoverable
        rows.append(("Recoverable", f"from {first}" + (f" to {last}" if last else "") + (
            f" in {s.recoverable_elsewhere} (the primary archives elsewhere now, which has no base backup yet)"
            if s.recoverable_elsewhere else "")))
    width = max(len(k) for k, _ in rows) + 2
    return [f"  {(k + ':').ljust(width)}{v}" for k, v in rows]


def _archive(s: DatabaseStatus, paint: Paint) -> str:
    a = s.archive or {}
    last = (f"{a['lastArchivedWal']} archived {_age_since(a.get('lastArchivedAt'), s)} ago"
            if a.get("lastArchivedWal") else "nothing archived yet")
    lag = int(a.get("lagSeconds") or 0)
    waiting = f"{int(a.get('waitingSegments') or 0)} waiting" + (f" (oldest {human_seconds(lag)})" if lag else "")
    error = f"; last error: {_one_line(str(a['lastError']))}" if a.get("lastError") else ""
    return f"{a.get('destination') or '?'}: {last}, " + paint(waiting, "yellow" if lag > 300 else None) + \
        paint(error, "red")


def _services(s: DatabaseStatus, paint: Paint) -> str:
    def targets(pods: list[str] | None, expect: list[str] | None) -> str:
        if pods is None:
            return paint("?", "yellow")
        text = ", ".join(pods) or "no ready server"
        return paint(text, "red" if not pods or (expect is not None and pods != expect) else None)

    primary_expect = [s.current_primary] if s.current_primary else None
    return (f"{s.name}-primary → {targets(s.services.primary, primary_expect)};  "
            f"{s.name}-replicas → {targets(s.services.replicas, None)}")


def _condition_row(c: Condition, s: DatabaseStatus) -> list[Cell]:
    good = HEALTHY.get(c.type)
    colour = None if good is None else "green" if c.status == good else "yellow" if c.type == "Progressing" else "red"
    return [(c.type, None), (c.status, colour), (c.reason, None), (_age_since(c.last_transition_time, s), None),
            (_one_line(c.message), None)]


def _servers(s: DatabaseStatus, paint: Paint) -> list[str]:
    if not s.servers:
        return ["(no server pods)"]
    rows = [_server_row(v) for v in s.servers]
    lines = _table(["NAME", "ROLE", "READY", "TIMELINE", "LSN", "REPLICATION", "LAG", "REPLAY LAG"], rows, paint)
    for v in s.servers:
        if v.error:
            lines.append(paint(f"{v.name}: cannot query: {v.error}", "red"))
        lines += [paint(f"{v.name}: {w}", "yellow") for w in v.warnings]
    return lines


def _server_row(v: Server) -> list[Cell]:
    head: list[Cell] = [(v.name, None), (v.role or "-", "cyan" if v.role == "primary" else None),
                        ("yes", "green") if v.ready else ("no", "red")]
    if not v.reachable:
        return [*head, ("-", None), ("-", None), ("unreachable", "red"), ("-", None), ("-", None)]
    position: list[Cell] = [(_text(v.timeline), None), (v.lsn or "-", None)]
    rep = v.replication
    if rep is None:  # the primary, or a server out of recovery
        state: Cell = ("-", None) if v.role == "primary" else ("read-write", "red")
        return [*head, *position, state, ("-", None), ("-", None)]
    text = rep.state or "-"
    if rep.sync_state and rep.sync_state != "async":
        text += f" ({rep.sync_state})"
    lagging = (rep.lag_bytes or 0) > LAG_WARN_BYTES or (rep.lag_seconds or 0) > LAG_WARN_SECONDS
    lag_colour = "yellow" if lagging else None
    return [*head, *position, (text, "green" if rep.state == "streaming" else "yellow"),
            (human_bytes(rep.lag_bytes), lag_colour), (human_seconds(rep.lag_seconds), lag_colour)]


def _backup_row(b: Backup) -> list[Cell]:
    colour = {"Completed": "green", "Failed": "red"}.get(b.phase, "yellow")
    return [(b.name, None), (b.reason, None), (b.phase, colour), (b.size or "-", None),
            (human_duration(b.age_seconds), None)]


def _event_row(e: Event) -> list[Cell]:
    return [(e.type, "yellow" if e.type == "Warning" else None), (e.reason, None), (human_duration(e.age_seconds), None),
            (str(e.count), None), (_one_line(e.message), None)]


def _operator(s: DatabaseStatus, paint: Paint) -> list[str]:
    op = s.operator
    now = {"reconciling": ("reconciling: a run is in progress", "yellow"),
           "failed": ("waiting to retry: the last run failed", "red"),
           "idle": ("idle: the last run succeeded", "green"),
           "unknown": ("no run reported yet", "yellow")}[op.state]
    rows: list[tuple[str, list[str]]] = [("Now", [paint(*now)])]
    if op.last_run is not None:
        r = op.last_run
        counts = " ".join(f"{k}={v}" for k, v in (("ok", r.ok), ("changed", r.changed), ("skipped", r.skipped),
                                                  ("failures", r.failures)) if v is not None)
        when = f" {human_duration(r.age_seconds)} ago" if r.age_seconds is not None else ""
        rows.append(("Last run", [paint(r.result, "green" if r.result == "Successful" else "red")
                                  + when + (f" ({counts})" if counts else "")]))
    if op.failure:
        rows.append(("Failed task", [paint(line, "red") for line in op.failure.splitlines() if line.strip()]))
    if op.activity:
        rows.append(("Doing", [op.activity]))
    if op.primary_unready_since:
        ago = _age_since(op.primary_unready_since, s)
        ago = f" ({ago} ago)" if ago != "-" else ""
        rows.append(("Watching", [paint(f"the primary has not been Ready since {op.primary_unready_since}{ago}; "
                                        "it fails over after the grace period", "yellow")]))
    if op.switchover_requested:
        rows.append(("Switchover", [f"asked for: {op.switchover_requested}"]))
    if op.generation is not None and op.observed_generation is not None and op.observed_generation < op.generation:
        rows.append(("Spec", [paint(f"generation {op.generation} not yet reconciled "
                                    f"(last reconciled: {op.observed_generation})", "yellow")]))
    width = max(len(k) for k, _ in rows) + 2
    lines = []
    for key, values in rows:
        lines.append(f"{(key + ':').ljust(width)}{values[0]}")
        lines += [" " * width + v for v in values[1:]]
    return lines


def _table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], paint: Paint) -> list[str]:
    """Aligned on the plain text: colour codes are added after padding, so they never shift a column."""
    widths = [max([len(h)] + [len(r[i][0]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        cells = [paint(text, colour) + (" " * (w - len(text)) if i < len(row) - 1 else "")
                 for i, ((text, colour), w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return lines


def _one_line(message: str) -> str:
    """A message of several lines (the operator's failed tasks) in one table cell."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _age_since(when: str | None, s: DatabaseStatus) -> str:
    t, now = parse_time(when), parse_time(s.observed_at)
    return human_duration((now - t).total_seconds()) if t and now else "-"


def human_duration(seconds: float | None) -> str:
    """As kubectl prints ages: 45s, 5m12s, 45m, 5h3m, 30h, 3d5h, 12d."""
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return "0s"
    if seconds < 10:
        return f"{seconds:.3g}s"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return human_duration(seconds)
