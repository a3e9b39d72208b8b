"""store.py, the object store asked directly (boto3, in barman's Python), where barman-cloud's answers say too little:

  store.py probe          what is wrong with the archive's settings, one line naming the spec field to fix, or nothing
                          when the store lists the archive's path. barman-cloud creates a bucket that is not there (a
                          typo becomes a new bucket, or fails for keys that may not create one) and words a refused key
                          as any other error: this is asked before the first upload and after a failed call.
  store.py beyond SEG...  for the first SEGMENT the archive lacks while it holds later ones on that segment's timeline,
                          "SEGMENT NEWER" (one of those); nothing when there is none. SEGMENT: the WAL files a replay
                          asked the archive for and did not get. A recovery with no target ends at the first WAL file
                          the archive does not have: when this prints, that end is a gap, not the end of the archive
                          (which a live primary, archiving in order, may have moved past since: the file there now is
                          no gap). Two small listings per file, whatever the archive's size.

SAMPLEDB_S3_URL, SAMPLEDB_S3_ENDPOINT, SAMPLEDB_S3_REGION and SAMPLEDB_S3_FIELD (the spec field these settings come
from) say where, SAMPLEDB_S3_SERVER (pg<major>) which server's WAL; the keys are in the environment (objectstore.sh).
"""

from __future__ import annotations

import os
import re
import sys

# a segment, or a partial one, as barman-cloud stores it (a compression's suffix perhaps); not a .backup label
SEGMENT = re.compile(r"([0-9A-F]{24})(\.partial)?(\.[a-z0-9]+)?")
# S3's error codes for keys it does not take (403: a HEAD's answer, which has no body to say more; versitygw answers
# an unknown key with a code of its own, and 404)
REFUSED_KEYS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken",
                "InvalidSecurity", "403", "XAdminUserNotFound"}
NO_BUCKET = {"NoSuchBucket", "404"}
WRONG_REGION = {"AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException", "301"}


def where() -> tuple[str, str, str]:
    """The bucket, the path in it, and the store for people: its endpoint, or AWS S3 and the region."""
    bucket, _, path = os.environ["SAMPLEDB_S3_URL"].removeprefix("s3://").partition("/")
    endpoint = os.environ.get("SAMPLEDB_S3_ENDPOINT") or ""
    return bucket, path.strip("/"), endpoint or f"AWS S3 ({os.environ.get('SAMPLEDB_S3_REGION') or 'us-east-1'})"


def client(connect: int = 10, read: int = 20, attempts: int = 2):
    import boto3
    from botocore.config import Config

    endpoint = os.environ.get("SAMPLEDB_S3_ENDPOINT") or None
    return boto3.client("s3", endpoint_url=endpoint, config=Config(
        s3={"addressing_style": "path"} if endpoint else {}, connect_timeout=connect, read_timeout=read,
        retries={"max_attempts": attempts}))


def hidden(text: str) -> str:
    """``text`` without the keys, as they are and as Python escapes them (a key read with a stray CR shows as \\r)."""
    for var, name in (("AWS_SECRET_ACCESS_KEY", "<secret access key>"), ("AWS_ACCESS_KEY_ID", "<access key id>")):
        key = os.environ.get(var) or ""
        for form in {key, repr(key)[1:-1], key.strip()} - {""}:
            text = text.replace(form, name)
    return text


def problem(code: str, detail: str, field: str, bucket: str, store: str, http: int = 0) -> str:
    """The sentence for a failed listing of the archive's path: the field to fix first. ``code`` is S3's error code
    (``http`` its HTTP status), or '' when the store did not answer at all (``detail`` says how)."""
    detail = " ".join(hidden(detail).split(': "http')[0].split())[:120]
    if code == "NoCredentials":
        return f"{field}.credentials: no keys to sign with ({detail}): the Secret this field names has empty keys"
    if not code:
        return (f"{field}.endpointURL: the object store at {store} does not answer ({detail}): check the URL, and that "
                f"the store runs and this pod may reach it")
    if code in NO_BUCKET:
        return (f"{field}.bucket: there is no bucket {bucket} at {store}: create it, or name one that exists "
                f"(SampleDB does not create buckets)")
    if code in REFUSED_KEYS or http == 403:
        return (f"{field}.credentials: the object store at {store} refused the keys ({code}: {detail}): put keys it "
                f"accepts, allowed to list, read and write bucket {bucket} (and check that the bucket is yours), in "
                f"the Secret this field names")
    if code in WRONG_REGION:
        return f"{field}.region: bucket {bucket} is not in this region for {store} ({code}: {detail})"
    return f"{field}: the object store at {store} refused to list bucket {bucket} ({code}: {detail})"


def probe() -> str:
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    field = os.environ.get("SAMPLEDB_S3_FIELD") or "spec.backup.objectStore"
    bucket, path, store = where()
    try:
        # (one quick try: it follows a call that failed, within the archiver's time)
        client(5, 10, 1).list_objects_v2(Bucket=bucket, Prefix=f"{path}/" if path else "", MaxKeys=1)
    except NoCredentialsError as error:
        return problem("NoCredentials", str(error), field, bucket, store)
    except ClientError as error:
        said = error.response.get("Error") or {}
        http = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        code = str(said.get("Code") or http or "?")
        return problem(code, str(said.get("Message") or error), field, bucket, store, http)
    except BotoCoreError as error:  # (no connection, no DNS name, no answer in time)
        return problem("", str(error), field, bucket, store)
    return ""


def gap(segments: list[str]) -> str:
    bucket, path, _ = where()
    s3 = client()
    # (barman-cloud keeps <path>/<server>/wals/<timeline and log>/<segment>[.partial][.gz|.bz2|...])
    wals = "/".join(p for p in (path, os.environ["SAMPLEDB_S3_SERVER"], "wals") if p)

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
    command, args = (sys.argv[1:2] or [""])[0], sys.argv[2:]
    if command == "probe":
        print(probe())
    elif command == "beyond":
        print(gap([s for s in args if re.fullmatch("[0-9A-F]{24}", s)]))
    else:
        sys.exit(__doc__)
