"""What the roles render for the pods a real node runs (the servers and every Job), with the roles' own defaults:
who they run as, what they reach, and what the servers are configured with. test_sampledb_scripts.py runs them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.scripts.manifests import render, sampledb_vars

POD_TEMPLATES = ["statefulset.yaml.j2", "init-job.yaml.j2", "job.yaml.j2", "cronjob.yaml.j2", "restore-job.yaml.j2",
                 "migration-job.yaml.j2", "prune-job.yaml.j2"]
JOB_FACTS = {"db_version": "15.18", "backup_name": "db-nightly", "backup_job_name": "sdbb-1234", "backup_uid": "1234", "backup_pruned": [{"metadata": {"name": "old"}}],
             "restore_claim": "src-backups", "restore_path": "src/b.sql.gz",
             "upgrade_image": "docker.io/library/postgres:18.6", "job_name": "db-migrate-18-6",
             "job_command": ["/bin/bash", "/etc/sampledb/migrate.sh", "dump", "/backups/db/m.sql.gz"]}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    [out] = render((["configmap.yaml.j2", "server-rbac.yaml.j2", *POD_TEMPLATES],
                    {**sampledb_vars("db", replicas=3, parameters={"max_connections": "200", "hot_standby": "off",
                                                                   "log_line_prefix": "%m it's \\n"}), **JOB_FACTS}))
    return out


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]


@pytest.mark.parametrize("template", POD_TEMPLATES)
def test_every_pod_runs_as_the_images_postgres_user(rendered, template: str) -> None:
    [obj] = rendered[template]
    spec = pod_spec(obj)
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                                       "fsGroupChangePolicy": "OnRootMismatch",
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["automountServiceAccountToken"] is False
    for container in spec["containers"]:
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        # the API takes only strings as env values
        assert all(isinstance(e.get("value", ""), str) for e in container.get("env", [])), container["env"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if "PGHOST" in env and template != "statefulset.yaml.j2":
            assert (env["PGHOST"], env["PGPORT"]) == ("db-primary", "5432")  # the primary's Service


def test_the_jobs_use_the_image_of_the_version_they_serve(rendered) -> None:
    image = {t: pod_spec(rendered[t][0])["containers"][0]["image"] for t in POD_TEMPLATES}
    assert image.pop("migration-job.yaml.j2") == "docker.io/library/postgres:18.6"  # the new major's pg_dumpall
    assert set(image.values()) == {"docker.io/library/postgres:15.18"}


def test_the_bootstrap_and_the_restore_set_the_replication_password(rendered) -> None:
    for template in ("init-job.yaml.j2", "restore-job.yaml.j2"):
        env = {e["name"]: e for e in pod_spec(rendered[template][0])["containers"][0]["env"]}
        assert env["REPLICATION_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "db-credentials",
                                                                             "key": "replication-password"}


def test_the_servers_configuration(rendered) -> None:
    data = rendered["configmap.yaml.j2"][0]["data"]
    conf = dict(line.split(" = ", 1) for line in data["postgresql.conf"].splitlines())
    assert conf["max_connections"] == "'200'"  # spec.parameters
    # what the probes, the Services and the replicas depend on wins over spec.parameters
    assert conf["hot_standby"] == "'on'" and conf["listen_addresses"] == "'*'" and conf["port"] == "'5432'"
    assert conf["unix_socket_directories"] == "'/var/run/postgresql'"
    assert conf["log_line_prefix"] == "'%m it''s \\\\n'"  # quote doubled, backslash escaped
    hba = [line.split() for line in data["pg_hba.conf"].splitlines() if line and not line.startswith("#")]
    assert hba == [["local", "all", "all", "scram-sha-256"], ["host", "all", "all", "all", "scram-sha-256"],
                   ["host", "replication", "replicator", "all", "scram-sha-256"]]
    assert {"entrypoint.sh", "common.sh", "init.sh", "backup.sh", "restore.sh", "migrate.sh"} <= set(data)


def test_the_servers_lease_agent_reads_only_their_lease_with_a_token_of_its_own(rendered) -> None:
    """The Lease agent: a native sidecar (it starts before the server and lives as long as the pod) on the
    operator's image, with the pod's ServiceAccount token mounted in it alone; that ServiceAccount may get the
    database's Lease and nothing else. The server enforces the term (15 s by default)."""
    spec = pod_spec(rendered["statefulset.yaml.j2"][0])
    [agent] = spec["initContainers"]
    assert (agent["name"], agent["restartPolicy"], agent["image"]) == ("lease-agent", "Always", "sampledb-operator:latest")
    assert agent["command"] == ["python3", "/etc/sampledb/lease-agent.py"]
    assert "cpu" in agent["resources"]["limits"] and agent["securityContext"]["allowPrivilegeEscalation"] is False
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert {m["mountPath"] for m in agent["volumeMounts"]} >= {token, "/etc/sampledb", "/var/run/postgresql"}
    assert all(m["mountPath"] != token for c in spec["containers"] for m in c["volumeMounts"])
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "db-sampledb-server"
    server = next(c for c in spec["containers"] if c["name"] == "postgres")
    assert {e["name"]: e.get("value") for e in server["env"]}["LEASE_TERM_SECONDS"] == "15"
    account, role, binding = rendered["server-rbac.yaml.j2"]
    assert account["metadata"]["name"] == role["metadata"]["name"] == binding["metadata"]["name"] == "db-sampledb-server"
    assert account["automountServiceAccountToken"] is False
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "resourceNames": ["db-primary"], "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == "db-sampledb-server" and binding["subjects"][0]["name"] == "db-sampledb-server"


def test_the_server_pod(rendered) -> None:
    spec = pod_spec(rendered["statefulset.yaml.j2"][0])
    [container] = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PGDATA"] == "/var/lib/postgresql/data/pgdata"  # a directory in the volume, not its root
    assert (env["PRIMARY_HOST"], env["PGHOST"]) == ("db-primary", "/var/run/postgresql")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["data"] == "/var/lib/postgresql/data" and mounts["run"] == "/var/run/postgresql"
    assert volumes["run"]["emptyDir"]["medium"] == "Memory" and volumes["shm"]["emptyDir"]["medium"] == "Memory"
    # a slow initdb or clone is not killed; only a server that does not answer at all is restarted
    startup, ready, alive = container["startupProbe"], container["readinessProbe"], container["livenessProbe"]
    assert "-h 127.0.0.1" in ready["exec"]["command"][-1]
    # (startup: as readiness, except while a recovery from an object store runs, on no TCP port)
    assert startup["exec"]["command"][-1] == (
        '[ -e "$PGHOST/sampledb-recovering" ] || ' + ready["exec"]["command"][-1].replace("'select 1'", '"select 1"'))
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600
    assert "pg_isready" in alive["exec"]["command"][-1]
    assert all(p["timeoutSeconds"] >= 3 for p in (startup, ready, alive))
    assert spec["terminationGracePeriodSeconds"] >= 30
    # spread over nodes by default: a preferred anti-affinity on the hostname and an even spread, on the servers only
    servers = {"app.kubernetes.io/name": "sampledb", "app.kubernetes.io/instance": "db",
               "sampledb.example.com/cluster": "db"}
    [preferred] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"] == {"labelSelector": {"matchLabels": servers},
                                            "topologyKey": "kubernetes.io/hostname"}
    assert spec["topologySpreadConstraints"] == [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                  "whenUnsatisfiable": "ScheduleAnyway",
                                                  "labelSelector": {"matchLabels": servers}}]
    assert rendered["statefulset.yaml.j2"][0]["spec"]["template"]["metadata"]["labels"] == servers


def test_every_job_pod_carries_the_databases_label_and_finished_jobs_do_not_pile_up(rendered) -> None:
    """Every Job's pod says which database it serves (`kubectl get pods -l sampledb.example.com/cluster=db`, or
    backup-of for the backups), never with the servers' selector; a bootstrap or restore Job goes a day after it
    ended."""
    for template in ("init-job.yaml.j2", "restore-job.yaml.j2", "migration-job.yaml.j2", "job.yaml.j2",
                     "cronjob.yaml.j2", "prune-job.yaml.j2"):
        [obj] = rendered[template]
        spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
        labels = spec["template"]["metadata"].get("labels") or {}
        assert "db" in (labels.get("sampledb.example.com/cluster"), labels.get("sampledb.example.com/backup-of")), \
            (template, labels)
        assert "app.kubernetes.io/instance" not in labels, (template, labels)  # not one of the servers
        assert spec["activeDeadlineSeconds"] > 0, template
    for template in ("init-job.yaml.j2", "restore-job.yaml.j2"):
        assert rendered[template][0]["spec"]["ttlSecondsAfterFinished"] == 86400


def test_only_the_operator_replaces_a_server_and_only_the_finalizer_deletes_a_volume(rendered) -> None:
    """OnDelete: the rollout role picks which server goes next (the primary last, after a switchover). Parallel: a
    lost server never holds the others back (OrderedReady waits for -0 before -1 starts). The claims outlive the
    StatefulSet and a scale-down: spec.deletionPolicy decides, in the finalizer."""
    spec = rendered["statefulset.yaml.j2"][0]["spec"]
    assert spec["updateStrategy"] == {"type": "OnDelete"} and spec["podManagementPolicy"] == "Parallel"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}


def test_an_object_store_adds_archiving_and_its_keys_to_the_server_alone(rendered) -> None:
    """Without spec.backup.objectStore nothing of archiving is rendered (a database without one renders as before);
    with it: archive_mode and archive.sh, the settings without the keys, the Secret's two keys as files in the server
    container only (optional: a server starts without them)."""
    plain = rendered["configmap.yaml.j2"][0]["data"]
    assert "archive_" not in plain["postgresql.conf"] and not {"archive.sh", "objectstore.env"} & set(plain)
    assert "objectstore-keys" not in json.dumps(rendered["statefulset.yaml.j2"][0])
    store = {"endpointURL": "http://versitygw.objectstore.svc:7070", "bucket": "sampledb",
             "credentials": {"secretName": "keys", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"}}
    [out] = render((["configmap.yaml.j2", "statefulset.yaml.j2"], sampledb_vars(
        "db", replicas=3, backup={"schedule": "30 0 * * *", "retention": 7, "suspend": False, "storageSize": "2Gi",
                                  "archiveTimeout": "30s", "objectStore": store})))
    data = out["configmap.yaml.j2"][0]["data"]
    conf = dict(line.split(" = ", 1) for line in data["postgresql.conf"].splitlines())
    assert (conf["archive_mode"], conf["archive_timeout"]) == ("'always'", "'30s'")
    assert conf["archive_command"] == "'test -r /etc/sampledb/archive.sh && /bin/bash /etc/sampledb/archive.sh %p'"
    assert "archive.sh" in data and "SAMPLEDB_S3_URL=s3://sampledb/ns/db\n" in data["objectstore.env"]
    spec = pod_spec(out["statefulset.yaml.j2"][0])
    volume = next(v for v in spec["volumes"] if v["name"] == "objectstore-keys")["secret"]
    assert volume == {"secretName": "keys", "optional": True, "defaultMode": 0o440,
                      "items": [{"key": "id", "path": "ACCESS_KEY_ID"}, {"key": "secret", "path": "ACCESS_SECRET_KEY"}]}
    mounted = {c["name"]: [m["name"] for m in c.get("volumeMounts", [])]
               for c in spec["containers"] + spec.get("initContainers", [])}
    assert [c for c, mounts in mounted.items() if "objectstore-keys" in mounts] == ["postgres"]


def test_a_physical_backup_copies_its_servers_volume_read_only_with_the_keys_and_nothing_else() -> None:
    """spec.method physical: the Job (on demand, and the CronJob's with an object store) runs base-backup.sh beside
    the server it copies, its data volume mounted read-only where that server has it, the keys as files, the
    superuser's password from the credentials Secret; it touches no backups volume."""
    store = {"endpointURL": "http://versitygw.objectstore.svc:7070", "bucket": "sampledb",
             "credentials": {"secretName": "keys"}}
    variables = {**sampledb_vars("db", replicas=3, backup={"schedule": "30 0 * * *", "retention": 7, "suspend": False,
                                                          "storageSize": "2Gi", "objectStore": store}),
                 **JOB_FACTS, "backup_method": "physical", "backup_source": "db-2",
                 "backup_objectstore": "{{ sdb_objectstore }}"}
    [out] = render((["configmap.yaml.j2", "job.yaml.j2", "cronjob.yaml.j2"], variables))
    assert {"base-backup.sh", "objectstore.sh", "archive.sh"} <= set(out["configmap.yaml.j2"][0]["data"])
    for template in ("job.yaml.j2", "cronjob.yaml.j2"):
        job = out[template][0]
        labels = (job["spec"]["jobTemplate"]["metadata"] if template == "cronjob.yaml.j2" else job["metadata"])["labels"]
        assert labels["sampledb.example.com/backup-method"] == "physical"
        spec = pod_spec(job)
        [container] = spec["containers"]
        assert container["command"] == ["/bin/bash", "/etc/sampledb/base-backup.sh"]
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
        assert env["PGHOST"] == "db-2.db-headless" and env["SOURCE_SERVER"] == "db-2"
        assert env["PGDATA"] == "/var/lib/postgresql/data/pgdata"
        assert env["PGPASSWORD"] == {"secretKeyRef": {"name": "db-credentials", "key": "superuser-password"}}
        assert env["BACKUP_NAME"] == "db-nightly"  # (JOB_FACTS names it; a scheduled one takes its Job's name)
        assert "REQUIRE_FENCE" not in env  # (only a final backup waits for the primary's fence)
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "data-db-2", "readOnly": True}
        assert volumes["objectstore-keys"]["secret"]["secretName"] == "keys"
        assert "backups" not in volumes
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["data"] == {"name": "data", "mountPath": "/var/lib/postgresql/data", "readOnly": True}
        assert mounts["objectstore-keys"]["readOnly"] is True
        assert spec["securityContext"]["runAsUser"] == 999
        # (beside the server it copies: a ReadWriteOnce volume attaches to that node only)
        [term] = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"labelSelector": {"matchLabels": {"statefulset.kubernetes.io/pod-name": "db-2"}},
                        "topologyKey": "kubernetes.io/hostname"}
    # the final backup (deletionPolicy Snapshot): from the primary, once it has fenced its clients
    [out] = render((["job.yaml.j2"], {**variables, "backup_fence": "final-backup", "backup_source": "db-0"}))
    [container] = pod_spec(out["job.yaml.j2"][0])["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["REQUIRE_FENCE"] == "final-backup" and env["PGHOST"] == "db-0.db-headless"


def test_a_restore_drill_recovers_the_archive_into_scratch_with_the_keys_and_no_password() -> None:
    """spec.backup.verify: a CronJob whose Jobs run verify.sh (with replay.sh, as a recovery does) on the postgres
    image, once each (a failure is reported, not retried), the store's keys read-only, an emptyDir of the data
    volume's size to restore into, and no password of the database (its server is reachable on its socket only)."""
    store = {"endpointURL": "http://versitygw.objectstore.svc:7070", "bucket": "sampledb",
             "credentials": {"secretName": "keys"}}
    verify = {"schedule": "0 4 * * 0", "suspend": False}
    variables = {**sampledb_vars("db", replicas=3, storage={"size": "5Gi"}, backup={
        "schedule": "30 0 * * *", "retention": 7, "suspend": False, "storageSize": "2Gi", "objectStore": store,
        "verify": verify}), **JOB_FACTS, "backup_objectstore": "{{ sdb_objectstore }}"}
    [out] = render((["configmap.yaml.j2", "verify-cronjob.yaml.j2"], variables))
    assert {"verify.sh", "replay.sh", "choose-base-backup.py", "objectstore.sh"} <= set(out["configmap.yaml.j2"][0]["data"])
    [cron] = out["verify-cronjob.yaml.j2"]
    assert cron["metadata"]["name"] == "db-verify" and cron["spec"]["schedule"] == "0 4 * * 0"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid" and cron["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    spec = pod_spec(cron)
    [container] = spec["containers"]
    assert container["image"] == "docker.io/library/postgres:15.18"
    assert container["command"] == ["/bin/bash", "/etc/sampledb/verify.sh"]
    assert "PASSWORD" not in json.dumps(container["env"]) and "secretKeyRef" not in json.dumps(container["env"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {"sizeLimit": "5Gi"}}
    assert volumes["objectstore-keys"]["secret"]["secretName"] == "keys"
    assert set(volumes) == {"scratch", "objectstore-keys", "config"}
    assert {m["name"]: m.get("readOnly", False) for m in container["volumeMounts"]} == {
        "scratch": False, "objectstore-keys": True, "config": False}
    assert spec["automountServiceAccountToken"] is False and spec["securityContext"]["runAsUser"] == 999
    assert container["resources"]["requests"]["ephemeral-storage"] == "5Gi"


def test_a_recovery_mounts_the_sources_keys_apart_and_says_where_and_to_when() -> None:
    """spec.restoreFrom.objectStore: recovery.env (the source's archive, its target) and objectstore.sh in the
    ConfigMap, the source's Secret mounted in the server container alone, apart from the database's own keys."""
    own = {"endpointURL": "http://versitygw.objectstore.svc:7070", "bucket": "sampledb",
           "credentials": {"secretName": "keys"}}
    restore = {"objectStore": {**own, "sourceName": "old", "credentials": {"secretName": "old-keys"}},
               "targetTime": "2026-11-28T10:00:00Z"}
    variables = sampledb_vars("db", replicas=3, restoreFrom=restore, backup={
        "schedule": "30 0 * * *", "retention": 7, "suspend": False, "storageSize": "2Gi", "objectStore": own})
    [out] = render((["configmap.yaml.j2", "statefulset.yaml.j2"], variables))
    data = out["configmap.yaml.j2"][0]["data"]
    assert "SAMPLEDB_S3_URL=s3://sampledb/ns/old\n" in data["recovery.env"]
    assert "SAMPLEDB_RECOVERY_TARGET_TIME='2026-11-28 10:00:00+00:00'\n" in data["recovery.env"]
    assert "SAMPLEDB_S3_URL=s3://sampledb/ns/db\n" in data["objectstore.env"]
    spec = pod_spec(out["statefulset.yaml.j2"][0])
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["recovery-keys"]["secret"]["secretName"] == "old-keys"
    assert volumes["objectstore-keys"]["secret"]["secretName"] == "keys"
    mounted = {c["name"]: {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
               for c in spec["containers"] + spec.get("initContainers", [])}
    assert [c for c, mounts in mounted.items() if "recovery-keys" in mounts] == ["postgres"]
    assert mounted["postgres"]["recovery-keys"] != mounted["postgres"]["objectstore-keys"]
    assert "choose-base-backup.py" in data
    # once recovered and every server has served, the source's keys and settings go (no superuser of the new database
    # may read them); not while a replica still clones (taking them out replaces the servers), and not back when that
    # replacement makes a server unready
    variables["_sampledb_example_com_sampledb"]["status"] = {"initialized": True, "readyReplicas": 2,
                                                              "phase": "Provisioning"}
    [out] = render((["statefulset.yaml.j2"], variables))
    assert "recovery-keys" in json.dumps(out["statefulset.yaml.j2"][0])
    for phase in ("Ready", "Degraded"):
        variables["_sampledb_example_com_sampledb"]["status"] = {"initialized": True, "readyReplicas": 2, "phase": phase}
        [out] = render((["configmap.yaml.j2", "statefulset.yaml.j2"], variables))
        assert "recovery.env" not in out["configmap.yaml.j2"][0]["data"]
        assert "recovery-keys" not in json.dumps(out["statefulset.yaml.j2"][0])
