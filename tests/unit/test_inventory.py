"""The inventory a run gets, as the Go ansible-operator writes it: the operator's ANSIBLE_INVENTORY (a
directory with its group_vars, or a file), read again for every run; localhost alone without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.execution.base import INVENTORY, RunRequest


def request(tmp_path: Path) -> RunRequest:
    return RunRequest(ident="1", private_data_dir=tmp_path / "private", playbook=tmp_path / "p.yml", extravars={})


def test_without_ansible_inventory_a_run_has_localhost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_INVENTORY", raising=False)
    req = request(tmp_path)
    req.prepare_dir()
    assert [p.name for p in req.inventory.iterdir()] == ["hosts"] and (req.inventory / "hosts").read_text() == INVENTORY


def test_an_inventory_directory_is_copied_whole_for_every_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "inventory"
    (given / "group_vars").mkdir(parents=True)
    (given / "hosts").write_text("[test]\n127.0.0.1 ansible_connection=local\n")
    (given / "group_vars" / "test.yml").write_text("sentinel: test\n")
    monkeypatch.setenv("ANSIBLE_INVENTORY", str(given))
    req = request(tmp_path)
    req.prepare_dir()
    assert (req.inventory / "group_vars" / "test.yml").read_text() == "sentinel: test\n"
    (given / "group_vars" / "test.yml").write_text("sentinel: edited\n")  # an ops engineer edits it in place
    (given / "hosts").write_text("[test]\n127.0.0.2\n")
    req.prepare_dir()
    assert (req.inventory / "group_vars" / "test.yml").read_text() == "sentinel: edited\n"
    assert (req.inventory / "hosts").read_text() == "[test]\n127.0.0.2\n"


def test_an_inventory_file_becomes_the_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "hosts.ini"
    given.write_text("[db]\n127.0.0.1\n")
    monkeypatch.setenv("ANSIBLE_INVENTORY", str(given))
    req = request(tmp_path)
    req.prepare_dir()
    assert [p.name for p in req.inventory.iterdir()] == ["hosts"] and (req.inventory / "hosts").read_text() == given.read_text()
