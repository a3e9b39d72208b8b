"""wal-beyond.py SEGMENT...: for the first SEGMENT the archive lacks while it holds later ones on that segment's
timeline, "SEGMENT NEWER" (one of those) printed; nothing when there is none. SEGMENT: the WAL files a replay asked the
archive for and did not get. SAMPLEDB_S3_URL, SAMPLEDB_S3_ENDPOINT and SAMPLEDB_S3_SERVER (pg<major>) say where, the
keys are in the environment (objectstore.sh). A recovery with no target ends at the first WAL file the archive does
not have: when this prints, that end is a gap, not the end of the archive (which a live primary, archiving in order,
may have moved past since: the file there now is no gap). Two small listings per file, whatever the archive's size.
"""

import os
import re
import sys

import boto3
from botocore.config import Config

# a segment, or a partial one, as barman-cloud stores it (a compression's suffix perhaps); not a .backup label
SEGMENT = re.compile(r"([0-9A-F]{24})(\.partial)?(\.[a-z0-9]+)?")


def gap(segments: list[str]) -> str:
    bucket, _, path = os.environ["SAMPLEDB_S3_URL"].removeprefix("s3://").partition("/")
    endpoint = os.environ.get("SAMPLEDB_S3_ENDPOINT") or None
    s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(
        s3={"addressing_style": "path"} if endpoint else {}, connect_timeout=10, read_timeout=20,
        retries={"max_attempts": 2}))
    # (barman-cloud keeps <path>/<server>/wals/<timeline and log>/<segment>[.partial][.gz|.bz2|...])
    wals = "/".join(p for p in (path.strip("/"), os.environ["SAMPLEDB_S3_SERVER"], "wals") if p)

    def names(prefix: str, after: str = "", most: int = 50) -> list[str]:
        page = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=after or prefix, MaxKeys=most)
        found = [SEGMENT.fullmatch(item["Key"].rsplit("/", 1)[-1]) for item in page.get("Contents", [])]
        return [m.group(1) for m in found if m]

    for segment in dict.fromkeys(segments):
        if segment in names(f"{wals}/{segment[:16]}/{segment}", most=5):
            continue
        later = [n for n in names(f"{wals}/{segment[:8]}", f"{wals}/{segment[:16]}/{segment}") if n > segment]
        if later:
            return f"{segment} {later[-1]}"
    return ""


if __name__ == "__main__":
    print(gap([s for s in sys.argv[1:] if re.fullmatch("[0-9A-F]{24}", s)]))
