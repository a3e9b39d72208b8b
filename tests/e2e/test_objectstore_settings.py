"""What a user gets wrong in spec.backup.objectStore and spec.restoreFrom.objectStore, on the real node with the local
object store (versitygw beside it) and the operator as deployed: each mistake is named in status, the field first,
while the server runs and loses nothing; a second database aimed at an archive in use is refused and writes nothing
there. (One small server each: they share the node with the other lane.)"""

from __future__ import annotations

import json
from functools import partial

from localcluster.cluster import LocalCluster
from localcluster.node import OBJECTSTORE_SECRET_KEY
from tests.kube import Kube, wait_for
from tests.objectstore import (
    ENDPOINT,
    STORE,
    archived_files,
    condition,
    keys_secret,
    one_server,
    poke,
    segments,
    switch_and_archive,
    wait_condition,
)
from tests.realnode import DATABASE_LANE, psql_in_server
from tests.sampledb import GROUP, PLURAL, VERSION, backup_named, backup_status, get, wait_phase

pytestmark = DATABASE_LANE


def test_a_second_database_on_an_archive_in_use_is_refused_naming_the_path_and_writes_nothing_there(
        real: Kube, real_namespace: str, local: LocalCluster, real_sampledb_operator) -> None:
    real_sampledb_operator()
    ns = real_namespace
    keys_secret(real, ns)

    def create(name: str, **extra: object) -> None:
        one_server(real, ns, name, backup={"schedule": "0 0 1 1 *", "objectStore": {**STORE, **extra}})

    create("first")
    first = wait_phase(real, ns, "first", timeout=300)["status"]["currentPrimary"]
    switch_and_archive(real, ns, first)
    before = archived_files(local, ns, "first")

    create("second", path=f"{ns}/first")
    second = wait_phase(real, ns, "second", timeout=300)["status"]["currentPrimary"]
    psql_in_server(real, ns, second, "create table t (id int); insert into t values (1); select pg_switch_wal()")
    refused = wait_condition(real, ns, "second", "ContinuousArchiving", "False")
    assert refused["reason"] == "ArchiveNotEmpty", refused
    assert refused["message"].startswith(f"spec.backup.objectStore.path: s3://sampledb/{ns}/first/pg15 already holds "
                                         "WAL of another database")
    # The first database's archive is as it was: nothing of the second's overwrote or joined it.
    after = archived_files(local, ns, "first")
    assert {k: v for k, v in after.items() if k in before} == before
    assert psql_in_server(real, ns, second, "select archived_count from pg_stat_archiver") == "0"


def test_each_bad_object_store_setting_is_named_in_status_and_loses_nothing(
        real: Kube, real_namespace: str, local: LocalCluster, real_sampledb_operator) -> None:
    """spec.backup.objectStore and spec.restoreFrom.objectStore wrong in each way a user gets them wrong: a Secret
    missing, a key missing, keys the store refuses, a bucket that is not there (never created for them), an endpoint
    that does not resolve, an archive with no base backup. Each is a condition naming the field to fix; the server runs
    throughout and loses no row, and once fixed it archives again, with no restart. Deleted with its keys, its final
    backup is a dump."""
    real_sampledb_operator()
    ns = real_namespace
    keys_secret(real, ns)
    store, create = STORE, partial(one_server, real, ns)

    # Restores that cannot be, side by side with the rest (their servers wait, each saying why in Degraded).
    create("from-nothing", restoreFrom={"objectStore": {**store, "sourceName": "never-archived"}})
    create("from-no-bucket", restoreFrom={"objectStore": {**store, "bucket": "no-such-bucket", "sourceName": "x"}})
    create("nokeys", backup={"objectStore": {**store, "credentials": {"secretName": "not-there"}}})
    wait_phase(real, ns, "nokeys", timeout=300)  # (the Secret's volume is optional: the server runs)
    primary = get(real, ns, "nokeys")["status"]["currentPrimary"]
    psql_in_server(real, ns, primary, "create table k (id int); insert into k select generate_series(1, 100)")

    def named(reason: str, start: str, timeout: float = 240) -> str:
        def check() -> str | None:
            # (a segment completed for the archiver to try again at once, not at its next minute)
            psql_in_server(real, ns, primary, "insert into k values (0); select pg_switch_wal()")
            found = condition(real, ns, "nokeys", "ContinuousArchiving")
            if (found.get("status"), found.get("reason")) == ("False", reason) and found["message"].startswith(start):
                return found["message"]
            poke(real, ns, "nokeys")
            return None

        said = wait_for(f"ContinuousArchiving {reason}: {start}", check, timeout=timeout, interval=5)
        print(f"{reason}: {said}")
        return said

    named("CredentialsMissing", "spec.backup.objectStore.credentials: no such Secret (Secret not-there")
    # A Secret with only one of the keys names the other (the kubelet refreshes a Secret's files within a minute
    # or so, a ConfigMap's too: nothing restarts).
    def secret(**keys: str) -> None:
        real.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "not-there"}, "stringData": keys}))

    secret(ACCESS_KEY_ID="sampledb-local")
    wait_for("ContinuousArchiving to name the missing key", lambda: poke(real, ns, "nokeys") or "no key ACCESS_SECRET_KEY"
             in (condition(real, ns, "nokeys", "ContinuousArchiving").get("message") or ""), timeout=120, interval=5)
    secret(ACCESS_KEY_ID="sampledb-local", ACCESS_SECRET_KEY="not-the-key")
    named("CredentialsRefused", "spec.backup.objectStore.credentials: the object store at "
                                f"{ENDPOINT} refused the keys (SignatureDoesNotMatch")
    secret(ACCESS_KEY_ID="sampledb-local", ACCESS_SECRET_KEY=OBJECTSTORE_SECRET_KEY)
    assert wait_condition(real, ns, "nokeys", "ContinuousArchiving", "True", timeout=300)["reason"] == "ArchivingWorks"

    def edit(**changes: object) -> None:
        real.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "nokeys", {
            "spec": {"backup": {"objectStore": changes}}})

    edit(bucket="no-such-bucket")
    named("BucketMissing", f"spec.backup.objectStore.bucket: there is no bucket no-such-bucket at {ENDPOINT}: create it")
    edit(bucket="sampledb", endpointURL="http://no-store.objectstore.svc:7070")
    named("StoreUnreachable", "spec.backup.objectStore.endpointURL: the object store at "
                              "http://no-store.objectstore.svc:7070 does not answer")
    edit(endpointURL=ENDPOINT)
    wait_condition(real, ns, "nokeys", "ContinuousArchiving", "True", timeout=300)
    last = switch_and_archive(real, ns, primary)
    files = archived_files(local, ns, "nokeys")
    assert f"{last}.gz" in files
    # (what waited while the settings were wrong is there too: the archive runs on without a hole)
    nums = segments(files)[1]
    assert nums == list(range(nums[0], nums[-1] + 1)), nums

    def degraded(name: str, start: str) -> str:
        said = wait_for(f"{name}'s status to say why it does not start", lambda: (
            m := condition(real, ns, name, "Degraded").get("message", "")) and "recovery from" in m and m,
                        timeout=120, interval=5)
        assert start in said, said
        assert condition(real, ns, name, "Ready").get("status") != "True"
        print(f"{name}: {said}")
        return said

    degraded("from-nothing", f"spec.restoreFrom.objectStore: s3://sampledb/{ns}/never-archived/pg15 holds no "
                             "completed base backup: check its bucket, path and sourceName")
    degraded("from-no-bucket", "spec.restoreFrom.objectStore.bucket: there is no bucket no-such-bucket")

    # Nothing was lost or made: the server never restarted, every row is there, no bucket was created, and no base
    # backup was taken for the archives it moved between (it never had one: its first is its schedule's).
    assert backup_named(real, ns, "nokeys", "NewArchive") == ""
    assert psql_in_server(real, ns, primary, "select count(*) filter (where id > 0) from k") == "100"
    server = real.core.read_namespaced_pod(primary, ns).status.container_statuses
    assert next(c for c in server if c.name == "postgres").restart_count == 0
    assert not (local.node.layout.objectstore / "no-such-bucket").exists()

    # Deleted together with its keys (as `kubectl delete -f` of a file holding both does), deletionPolicy Snapshot: the
    # final backup is a dump, which needs no keys, and the deletion completes.
    real.kubectl("-n", ns, "patch", "sdb", "nokeys", "--type=merge", "-p", '{"spec":{"deletionPolicy":"Snapshot"}}')
    real.kubectl("-n", ns, "delete", "secret", "not-there")
    real.kubectl("-n", ns, "delete", "sdb", "nokeys", "--wait=false")
    wait_for("nokeys to be deleted after its final backup", lambda: real.kubectl(
        "-n", ns, "get", "sdb", "nokeys", check=False).returncode != 0, timeout=300, interval=3)
    final = backup_status(real, ns, backup_named(real, ns, "nokeys", "Final"))
    assert (final.get("phase"), final.get("method")) == ("Completed", "dump"), final
