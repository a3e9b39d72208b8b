"""Ansible-side files the runtime puts on Ansible's search paths (plugins, the operator_sdk.util collection)."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
CALLBACK_DIR = HERE / "callback"
COLLECTIONS_DIR = HERE / "collections"
