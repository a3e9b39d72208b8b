"""`kubectl sampledb`: a kubectl plugin that shows and operates SampleDB databases (status, backup, restore,
switchover, psql, logs) through the same objects the operator reads and writes."""

from __future__ import annotations

GROUP = "sampledb.example.com"
VERSION = "v1alpha1"
SAMPLEDBS = "sampledbs"
BACKUPS = "sampledbbackups"
SAMPLEDB_RESOURCE = f"{SAMPLEDBS}.{GROUP}"
BACKUP_RESOURCE = f"{BACKUPS}.{GROUP}"

# What the leader role writes: primary | replica on each server pod, and the annotation that asks for a switchover.
ROLE_LABEL = "sampledb.example.com/role"
SWITCHOVER_ANNOTATION = "sampledb.example.com/switchover-to"
# The server container of the StatefulSet's pods (roles/provision/templates/statefulset.yaml.j2).
SERVER_CONTAINER = "postgres"


def server_selector(name: str) -> str:
    """A database's server pods: the StatefulSet's (its Jobs' pods may carry the instance label too)."""
    return f"app.kubernetes.io/instance={name},statefulset.kubernetes.io/pod-name"


def lease_name(name: str) -> str:
    return f"{name}-primary"
