"""The two-primaries check of the data-safety tests (tests/writes.py) on made-up observations."""

from __future__ import annotations

from tests.writes import Writes, history_overlaps, history_spells, primaries_overlap, primary_spells


def test_a_clean_failover_has_no_overlap() -> None:
    obs = [(1.0, "db-0", "f"), (1.1, "db-1", "t"), (2.0, "db-0", "down"), (2.1, "db-1", "t"),
           (3.0, "db-0", "down"), (3.1, "db-1", "f"), (4.0, "db-0", "t"), (4.1, "db-1", "f")]
    assert primary_spells(obs) == [("db-0", 1.0, 1.0), ("db-1", 3.1, 4.1)]
    assert primaries_overlap(obs) == []


def test_two_servers_read_write_at_once_are_found() -> None:
    obs = [(1.0, "db-0", "f"), (1.1, "db-1", "t"), (2.0, "db-0", "f"), (2.1, "db-1", "f"),
           (3.0, "db-0", "f"), (3.1, "db-1", "f"), (4.0, "db-0", "t")]
    assert primaries_overlap(obs) == [(("db-0", 1.0, 3.0), ("db-1", 2.1, 3.1))]


def test_a_server_that_comes_back_read_write_later_is_a_new_spell() -> None:
    obs = [(1.0, "db-0", "f"), (2.0, "db-0", "down"), (3.0, "db-1", "f"), (4.0, "db-1", "down"),
           (5.0, "db-0", "f")]
    assert primary_spells(obs) == [("db-0", 1.0, 1.0), ("db-1", 3.0, 3.0), ("db-0", 5.0, 5.0)]
    assert primaries_overlap(obs) == []


def test_the_write_downtime_of_a_window_starts_at_the_last_ack_before_it() -> None:
    writes = Writes(acked={1: 0.0, 2: 1.0, 3: 9.0, 4: 10.0, 5: 30.0}, failed={}, reasons={})
    assert writes.longest_gap() == 20.0
    assert writes.longest_gap(start=2.0, end=12.0) == 8.0  # from ack 2 (1.0) to ack 3 (9.0); ack 5 is after
    assert writes.longest_gap(start=20.0) == 20.0


def test_the_servers_own_records_show_any_overlap_of_two_writable_spells() -> None:
    """From each server's history (entrypoint.sh's record): a switchover stops one before the other starts; a spell not
    stopped yet lasts until now; the least overlap counts."""
    clean = {"db-0": [(1.0, "writable"), (5.0, "stopped"), (9.0, "rewound")], "db-1": [(5.5, "writable")]}
    assert history_spells(clean, now=20.0) == [("db-0", 1.0, 5.0), ("db-1", 5.5, 20.0)]
    assert history_overlaps(clean, now=20.0) == []
    two = {"db-0": [(1.0, "writable"), (5.0, "stopped")], "db-1": [(4.999, "writable")]}
    assert history_overlaps(two, now=20.0) == [(("db-0", 1.0, 5.0), ("db-1", 4.999, 20.0))]
    never_stopped = {"db-0": [(1.0, "writable")], "db-1": [(8.0, "writable"), (9.0, "stopped")]}
    assert len(history_overlaps(never_stopped, now=20.0)) == 1
    # killed without a record: its next start closes the spell at its last write, which may sort before its start
    killed = {"db-0": [(1.0, "writable"), (7.5, "ended"), (12.0, "rewound")], "db-1": [(8.0, "writable")]}
    assert history_spells(killed, now=20.0) == [("db-0", 1.0, 7.5), ("db-1", 8.0, 20.0)]
    assert history_overlaps(killed, now=20.0) == []
