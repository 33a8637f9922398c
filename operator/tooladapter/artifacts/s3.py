"""Artifacts as objects in an S3-compatible bucket: shared by every replica, as durable as
the bucket (versioning, replication and object lock are the bucket's business).

Keys are `<prefix>[results/]sha256/<2 hex>/<64 hex>`, the file layout under a prefix. Objects are
written once and never overwritten: a put is conditional (`If-None-Match: *`) where the
server honours it, which `connect` finds out by writing the empty artifact (a legitimate
content-addressed object) twice; elsewhere a HEAD comes first, and two writers racing past
it write the same bytes by construction. Every put carries the content's SHA-256
(`x-amz-checksum-sha256`), so the server refuses a body damaged on the way, and `get`
hashes what it reads before anyone sees it.

Named index entries (`<prefix>index/...`) are written once the same way: a conditional put,
or a HEAD first; a key found holding other bytes is an error, never overwritten. `list`
pages through ListObjectsV2 under a folder.

The client is boto3's (blocking, thread-safe): callers run `put`/`get` off the event loop,
as they do the file store's fsync.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tooladapter.artifacts import protocol

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

    from tooladapter.settings import ArtifactSettings

logger = logging.getLogger("tooladapter.artifacts")

#: Status codes meaning "an object is already there" for a conditional put (409: another
#: conditional write of the key was in flight; it may still fail, so 409 is checked).
_EXISTS = {412, 409}


@dataclass(frozen=True)
class S3Location:
    """Where the artifacts go; credentials come from boto3's chain (the environment's
    `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` first), never from here."""

    bucket: str
    prefix: str = ""
    #: None: AWS's own endpoint for `region`.
    endpoint: str | None = None
    region: str = "us-east-1"
    #: `https://endpoint/bucket/key` instead of `https://bucket.endpoint/key`.
    path_style: bool = False

    def __str__(self) -> str:
        at = f" at {self.endpoint}" if self.endpoint else f" ({self.region})"
        return f"s3://{self.bucket}/{self.prefix}{at}"

    @classmethod
    def of(cls, settings: ArtifactSettings) -> S3Location:
        """The configured bucket (`TOOLADAPTER_S3_*`)."""
        return cls(
            bucket=settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint=settings.s3_endpoint,
            region=settings.s3_region,
            path_style=settings.s3_path_style,
        )


def normal_prefix(prefix: str) -> str:
    """`team/receipts` and `/team/receipts/` both mean the folder `team/receipts/`."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _failed(what: str, exc: Exception) -> protocol.ArtifactStoreError:
    # botocore's messages name the operation, bucket and status, never the credentials.
    return protocol.ArtifactStoreError(f"{what}: {type(exc).__name__}: {exc}")


class S3ArtifactStore:
    def __init__(
        self,
        client: S3Client,
        *,
        bucket: str,
        prefix: str = "",
        conditional: bool = True,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = normal_prefix(prefix)
        #: Whether the server honours `If-None-Match: *` on PUT (see `probe_conditional`).
        self.conditional = conditional
        self.name = name or f"s3://{bucket}/{self.prefix}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def connect(cls, location: S3Location) -> S3ArtifactStore:
        """A store on `location`, checked: the bucket answers and takes writes. Blocking."""
        store = cls.open(location)
        store.check()
        return store

    @classmethod
    def open(cls, location: S3Location) -> S3ArtifactStore:
        """A store on `location`, unchecked (nothing is written: a reader's)."""
        config = Config(
            region_name=location.region,
            connect_timeout=5,
            read_timeout=30,
            retries={"mode": "standard", "max_attempts": 3},
            s3={"addressing_style": "path" if location.path_style else "auto"},
            # The SHA-256 of each put is sent explicitly; no second (CRC) checksum.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client = boto3.session.Session().client(
            "s3", endpoint_url=location.endpoint or None, config=config
        )
        return cls(client, bucket=location.bucket, prefix=location.prefix, name=str(location))

    def key_of(self, ref: str, space: protocol.Space = protocol.Space.RECEIPTS) -> str:
        return self.prefix + protocol.relative_key(ref, space)

    def check(self) -> None:
        """Fail closed at start: a bucket that is absent, forbidden or unreachable is an
        error now, not at the first receipt. Also learns whether puts can be conditional."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (ClientError, BotoCoreError) as exc:
            raise _failed(f"bucket {self.bucket!r} is not usable", exc) from exc
        self.conditional = self.probe_conditional()
        if not self.conditional:
            logger.warning(
                "artifact store %s ignores If-None-Match on PUT: HEAD before each put instead",
                self,
            )

    def probe_conditional(self) -> bool:
        """Put the empty artifact twice with `If-None-Match: *`: a server that honours it
        refuses the second (412); one that does not takes it (the same zero bytes)."""
        empty = b""
        for _ in range(2):
            try:
                self._put(self.key_of(protocol.content_ref(empty)), empty, conditional=True)
            except ClientError as exc:
                if _status(exc) in _EXISTS:
                    return True
                if _status(exc) in (400, 501) or _code(exc) == "NotImplemented":
                    return False
                raise _failed("a conditional put was refused", exc) from exc
            except BotoCoreError as exc:
                raise _failed("a conditional put failed", exc) from exc
        return False

    def put(self, data: bytes, space: protocol.Space = protocol.Space.RECEIPTS) -> str:
        ref = protocol.content_ref(data)
        key = self.key_of(ref, space)
        try:
            if self.conditional:
                self._put_new(key, data)
            elif not self._stored(key, len(data)):
                self._put(key, data, conditional=False)
        except (ClientError, BotoCoreError) as exc:
            raise _failed(f"put {key}", exc) from exc
        return ref

    def _put_new(self, key: str, data: bytes) -> None:
        try:
            self._put(key, data, conditional=True)
        except ClientError as exc:
            if _status(exc) not in _EXISTS:
                raise
            # Written meanwhile (another replica, a retry whose answer was lost): the same
            # bytes by construction, once it is there in full.
            if not self._stored(key, len(data)):
                raise

    def get(self, ref: str, space: protocol.Space = protocol.Space.RECEIPTS) -> bytes:
        key = self.key_of(ref, space)
        return protocol.verified(ref, self._get(key, missing=ref))

    def put_key(self, key: str, data: bytes) -> None:
        full = self.prefix + protocol.index_key(key)
        try:
            if self.conditional:
                try:
                    self._put(full, data, conditional=True)
                    return
                except ClientError as exc:
                    if _status(exc) not in _EXISTS:
                        raise
            else:
                try:
                    self.client.head_object(Bucket=self.bucket, Key=full)
                except ClientError as exc:
                    if _status(exc) != 404:
                        raise
                    self._put(full, data, conditional=False)
                    return
            held = self._read(full)
        except (ClientError, BotoCoreError) as exc:
            raise _failed(f"put {full}", exc) from exc
        if held != data:
            raise protocol.CorruptArtifact(f"{full} already holds other bytes (never overwritten)")

    def get_key(self, key: str) -> bytes:
        return self._get(self.prefix + protocol.index_key(key), missing=key)

    def _get(self, full: str, *, missing: str) -> bytes:
        """The object's bytes; KeyError(`missing`) when there is none."""
        try:
            return self._read(full)
        except ClientError as exc:
            if _status(exc) == 404 or _code(exc) == "NoSuchKey":
                raise KeyError(missing) from None
            raise _failed(f"get {full}", exc) from exc
        except BotoCoreError as exc:
            raise _failed(f"get {full}", exc) from exc

    def list(self, prefix: str) -> list[str]:
        folder = self.prefix + protocol.index_prefix(prefix)
        keys: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=folder
            )
            for page in pages:
                keys.extend(item["Key"][len(self.prefix) :] for item in page.get("Contents", []))
        except (ClientError, BotoCoreError) as exc:
            raise _failed(f"list {folder}", exc) from exc
        return sorted(keys)

    def _read(self, key: str) -> bytes:
        data: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return data

    def _put(self, key: str, data: bytes, *, conditional: bool) -> None:
        digest = bytes.fromhex(protocol.digest_of(protocol.content_ref(data)))
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if conditional else {}
        self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=data,
            ContentType="application/octet-stream",
            ChecksumSHA256=base64.b64encode(digest).decode(),
            **extra,
        )

    def _stored(self, key: str, size: int) -> bool:
        """Whether `key` holds an object, which must then have `size` bytes (its name is
        its hash: any other size is damage, and a write-once store never repairs it)."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404:
                return False
            raise
        if head["ContentLength"] != size:
            raise protocol.CorruptArtifact(
                f"{key} holds {head['ContentLength']} bytes where its hash names {size}"
            )
        return True
