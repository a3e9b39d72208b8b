"""wal-beyond.py SEGMENT: when the archive lacks SEGMENT but holds later ones on its timeline, the newest of them,
printed; nothing otherwise. SAMPLEDB_S3_URL, SAMPLEDB_S3_ENDPOINT and SAMPLEDB_S3_SERVER (pg<major>) say where, the
keys are in the environment (objectstore.sh). A recovery with no target ends at the first WAL file the archive did
not have: when this prints one, that end is a gap, not the end of the archive (which a live primary, archiving in
order, may have moved past since: SEGMENT there too is no gap).
"""

import os
import re
import sys

import boto3
from botocore.config import Config


def newest_after(segment: str) -> str:
    bucket, _, path = os.environ["SAMPLEDB_S3_URL"].removeprefix("s3://").partition("/")
    # (barman-cloud keeps <path>/<server>/wals/<timeline and log>/<segment>[.gz|.bz2|...])
    prefix = "/".join(p for p in (path.strip("/"), os.environ["SAMPLEDB_S3_SERVER"], "wals", segment[:8]) if p)
    s3 = boto3.client("s3", endpoint_url=os.environ.get("SAMPLEDB_S3_ENDPOINT") or None,
                      config=Config(s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=30,
                                    retries={"max_attempts": 2}))
    names = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            name = item["Key"].rsplit("/", 1)[-1]
            if re.match("[0-9A-F]{24}([.]|$)", name) and not name.endswith(".backup"):
                names.add(name[:24])
    later = [name for name in names if name[:8] == segment[:8] and name > segment]
    return "" if segment in names or not later else max(later)


if __name__ == "__main__":
    print(newest_after(sys.argv[1]))
