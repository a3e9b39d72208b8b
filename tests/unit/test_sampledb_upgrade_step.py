"""The upgrade role's minor-upgrade order (roles/upgrade/filter_plugins/sampledb_upgrade.py): the replicas
first, then a switchover to an upgraded replica, then the old primary."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "roles" / "upgrade" / "filter_plugins" / "sampledb_upgrade.py"
_spec = importlib.util.spec_from_file_location("sampledb_upgrade", _PATH)
upgrade = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(upgrade)
step = upgrade.sampledb_minor_step


def test_three_servers_replicas_first_then_a_switchover_then_the_old_primary() -> None:
    # nothing updated yet: the highest ordinal first
    assert step(3, 0, False, 3, "db-0", "db") == {"partition": 2, "switchover_to": "", "hold": False,
                                                  "completed": False, "updating": 2}
    # db-2 done: db-1 next
    assert step(2, 2, True, 3, "db-0", "db")["partition"] == 1
    # every replica done while db-0 is the primary: switch over to db-1, db-0 untouched
    s = step(1, 1, True, 3, "db-0", "db")
    assert (s["partition"], s["switchover_to"], s["hold"], s["completed"]) == (1, "db-1", False, False)
    # switched over: db-0 is updated as a replica, nobody held
    s = step(1, 1, True, 3, "db-1", "db")
    assert (s["partition"], s["switchover_to"], s["hold"], s["updating"]) == (0, "", False, 0)
    assert step(0, 0, True, 3, "db-1", "db")["completed"] is True


def test_one_server_is_restarted_in_place_and_held_as_the_primary() -> None:
    s = step(1, 0, False, 1, "db-0", "db")
    assert (s["partition"], s["switchover_to"], s["hold"]) == (0, "", True)


def test_the_partition_never_goes_back_up() -> None:
    # db-2 updated but not Ready again yet (front back at 3): the partition stays where it was
    assert step(3, 2, True, 3, "db-0", "db")["partition"] == 2
