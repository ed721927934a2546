"""Typed options of the kafka-share source, and their plain option map.

The connector checks the options, at ``load()``: a bad value fails there with the connector's
condition and message (see :mod:`spark_kafka_share.errors`). Python checks only what the option map
would hide from it: the keys of ``kafka_options``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from .errors import KafkaShareConfigurationError

BOOTSTRAP_SERVERS = "kafka.bootstrap.servers"
GROUP_ID = "kafka.share.group.id"
PARALLELISM = "kafka.share.parallelism"
ACKNOWLEDGMENT_MODE = "kafka.share.acknowledgment.mode"
EXACTLY_ONCE_STRATEGY = "kafka.share.exactly.once.strategy"
ACKNOWLEDGE = "kafka.share.acknowledge"
LOCK_TIMEOUT_MS = "kafka.share.lock.timeout.ms"
PARTITION_MAX_RECORD_LOCKS = "kafka.share.partition.max.record.locks"
ASSIGNMENT_INTERVAL_MS = "kafka.share.assignment.interval.ms"
CHECKPOINT_ALLOW_NON_ATOMIC_CREATE = "kafka.share.checkpoint.allow.non.atomic.create"
DEAD_LETTER_TOPIC = "kafka.share.dead.letter.topic"
DEAD_LETTER_COPY_RECORD = "kafka.share.dead.letter.copy.record"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
INCLUDE_HEADERS = "includeHeaders"
MAX_RECORDS_PER_TRIGGER = "maxRecordsPerTrigger"
POLL_TIMEOUT_MS = "pollTimeoutMs"
STARTING_OFFSETS = "startingOffsets"
FETCH_OFFSET_NUM_RETRIES = "fetchOffset.numRetries"


class AcknowledgmentMode(str, Enum):
    """How records are acknowledged to the share group."""

    IMPLICIT = "implicit"
    """Every record of a micro-batch is accepted once Spark commits the batch."""
    EXPLICIT = "explicit"
    """``foreachBatch`` code marks records ACCEPT, RELEASE or REJECT with
    :func:`~spark_kafka_share.acknowledge`; unmarked records are accepted."""


class ExactlyOnceStrategy(str, Enum):
    """What the source does about records that reach the sink twice (after a failed batch)."""

    NONE = "none"
    """At-least-once: a record may reach the sink again after a failure."""
    IDEMPOTENT = "idempotent"
    """At-least-once, for sinks that upsert on the record's (topic, partition, offset)."""
    CHECKPOINT_DEDUP = "checkpoint-dedup"
    """The checkpoint remembers delivered records and drops their redelivery (not with spark.speculation)."""
    TWO_PHASE_COMMIT = "two-phase-commit"
    """Exactly once with a sink idempotent per batch id: a re-run batch reads the same records (not with
    spark.speculation)."""


class AcceptPoint(str, Enum):
    """When a batch's records are ACCEPTed to the share group."""

    AFTER_COMMIT = "after-commit"
    """Once Spark commits the batch: a batch holds at most the group's lock limit per partition."""
    AFTER_LOG = "after-log"
    """Once the task has logged them in the checkpoint (only with ``two-phase-commit`` and implicit
    mode): a batch holds several polls per consumer, and after a crash an uncommitted batch's records
    come back from this query's checkpoint, not from the group."""
    AFTER_ROW = "after-row"
    """Real-time mode: once the query has processed a poll's rows. For a ``foreach`` sink, which
    writes each row as it gets it; the default there."""
    AFTER_TASK = "after-task"
    """Real-time mode: once the task ends, after its sink committed. For sinks that write at their
    commit (Spark's ``kafka`` sink, ``console``, ``memory``); the default there. One poll per consumer a
    batch."""


# Options of the source itself that start with "kafka."; as kafka_options keys they are mistakes.
_SOURCE_OPTION_FIELDS = {
    BOOTSTRAP_SERVERS: "bootstrap_servers",
    GROUP_ID: "group_id",
    PARALLELISM: "parallelism",
    ACKNOWLEDGMENT_MODE: "acknowledgment_mode",
    EXACTLY_ONCE_STRATEGY: "exactly_once_strategy",
    ACKNOWLEDGE: "acknowledge",
    LOCK_TIMEOUT_MS: "lock_timeout_ms",
    PARTITION_MAX_RECORD_LOCKS: "partition_max_record_locks",
    ASSIGNMENT_INTERVAL_MS: "assignment_interval_ms",
    CHECKPOINT_ALLOW_NON_ATOMIC_CREATE: "checkpoint_allow_non_atomic_create",
    DEAD_LETTER_TOPIC: "dead_letter_topic",
    DEAD_LETTER_COPY_RECORD: "dead_letter_copy_record",
}


@dataclass(frozen=True)
class KafkaShareOptions:
    """The options of one kafka-share query.

    ``None`` leaves an option to the source's default. Pass the object to
    :func:`~spark_kafka_share.read_share_stream`, or turn it into a plain option map with
    :meth:`to_options`::

        options = KafkaShareOptions(
            bootstrap_servers="localhost:9092",
            group_id="orders-processor",
            subscribe=["orders"],
            max_records_per_trigger=10_000,
            kafka_options={"security.protocol": "SSL"},
        )
        df = read_share_stream(spark, options)

    Attributes:
        bootstrap_servers: the Kafka brokers, e.g. ``"host1:9092,host2:9092"``.
        group_id: the share group; queries with the same group split the records between them.
        subscribe: the topics, as a list or a comma-separated string. Give this or ``subscribe_pattern``.
        subscribe_pattern: a Java regex of topic names.
        parallelism: the number of share consumers (default: Spark's default parallelism). With more
            consumers than partitions, each polls at most its even share of the group's lock limit.
        acknowledgment_mode: how records are acknowledged: ``implicit`` (every record of a
            committed batch is accepted) or ``explicit`` (see :func:`~spark_kafka_share.acknowledge`).
        exactly_once_strategy: what the source does about records that reach the sink twice; see
            :class:`ExactlyOnceStrategy`.
        acknowledge: when a batch's records are ACCEPTed; see :class:`AcceptPoint` (default
            ``after-commit``).
        lock_timeout_ms: how long a consumer may hold the records it fetched before Kafka hands them
            out again (the group config ``share.record.lock.duration.ms``).
        partition_max_record_locks: how many records of one partition the group may hold
            unacknowledged (the group config ``share.partition.max.record.locks``; Kafka's default
            2000). Records stay held until their batch commits, so this caps a micro-batch per
            partition; the broker's ``group.share.max.partition.max.record.locks`` bounds it.
        assignment_interval_ms: how long Kafka may wait before it assigns partitions to members that
            joined (the group config ``share.assignment.interval.ms``, Kafka 4.3; default 1000).
            0 gives every consumer of a starting query its partitions when it joins.
        dead_letter_topic: the share group's dead-letter topic, which the broker writes (group config
            ``errors.deadletterqueue.topic.name``; Kafka 4.4 with ``share.version=2``). The broker
            writes each REJECTed record there, and each past the group's delivery-count limit, with
            ``__dlq.errors.*`` headers; pass no topic to :func:`~spark_kafka_share.release_or_dead_letter`.
        dead_letter_copy_record: whether the broker copies the record's key, value and headers to
            ``dead_letter_topic`` (group config ``errors.deadletterqueue.copy.record.enable``; Kafka's
            default: false, only the headers).
        checkpoint_allow_non_atomic_create: run ``checkpoint-dedup`` and ``two-phase-commit`` on a
            checkpoint store where two writers of one file could both win (S3A before Hadoop 3.4.2, a
            FUSE mount, a store other than HDFS that renames into place), which they refuse otherwise.
        include_headers: add a ``headers`` column.
        max_records_per_trigger: an upper bound on the records of one micro-batch.
        poll_timeout_ms: how long a consumer waits for records in one poll (default 2000).
        starting_offsets: where a new share group starts: ``"earliest"``, ``"latest"``, an ISO-8601
            duration back from now (``"PT30M"``, also ``"by_duration:PT30M"``) or a ``timedelta``.
            Kafka applies it only when the group first reads a partition.
        fetch_offset_num_retries: how many of the driver's lookups in a row may find the cluster
            unreachable (each waits ``default.api.timeout.ms``) before a running query fails
            (default 3); meanwhile batches keep polling, so a broker restart does not stop the query.
        kafka_options: Kafka consumer settings, keys without the ``"kafka."`` prefix
            (``{"security.protocol": "SSL"}``). Values may be secrets; messages never show them.
    """

    bootstrap_servers: str
    group_id: str
    subscribe: list[str] | str | None = None
    subscribe_pattern: str | None = None
    parallelism: int | None = None
    acknowledgment_mode: AcknowledgmentMode | str = AcknowledgmentMode.IMPLICIT
    exactly_once_strategy: ExactlyOnceStrategy | str = ExactlyOnceStrategy.NONE
    acknowledge: AcceptPoint | str | None = None
    lock_timeout_ms: int | None = None
    partition_max_record_locks: int | None = None
    assignment_interval_ms: int | None = None
    checkpoint_allow_non_atomic_create: bool = False
    dead_letter_topic: str | None = None
    dead_letter_copy_record: bool | None = None
    include_headers: bool = False
    max_records_per_trigger: int | None = None
    poll_timeout_ms: int | None = None
    starting_offsets: str | datetime.timedelta | None = None
    fetch_offset_num_retries: int | None = None
    # Left out of repr(): a logged or printed options object must not show credentials.
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def to_options(self) -> dict[str, str]:
        """The plain option map, for ``spark.readStream.format("kafka-share").options(**map)``.

        Values go to the connector as they are, to be checked at ``load()``.

        Raises:
            KafkaShareConfigurationError: a key of ``kafka_options`` the map would misread; see
                :func:`connection_options`.

        >>> KafkaShareOptions("localhost:9092", "g", subscribe=["a", "b"]).to_options()["subscribe"]
        'a,b'
        """
        subscribe = self.subscribe
        if subscribe is not None and not isinstance(subscribe, str):
            subscribe = ",".join(subscribe)
        starting_offsets = self.starting_offsets
        if isinstance(starting_offsets, datetime.timedelta):
            starting_offsets = _iso_duration(starting_offsets)
        options = {
            **connection_options(self.bootstrap_servers, self.group_id, self.kafka_options),
            SUBSCRIBE: subscribe,
            SUBSCRIBE_PATTERN: self.subscribe_pattern,
            PARALLELISM: self.parallelism,
            ACKNOWLEDGMENT_MODE: _enum_value(self.acknowledgment_mode),
            EXACTLY_ONCE_STRATEGY: _enum_value(self.exactly_once_strategy),
            ACKNOWLEDGE: None if self.acknowledge is None else _enum_value(self.acknowledge),
            LOCK_TIMEOUT_MS: self.lock_timeout_ms,
            PARTITION_MAX_RECORD_LOCKS: self.partition_max_record_locks,
            ASSIGNMENT_INTERVAL_MS: self.assignment_interval_ms,
            CHECKPOINT_ALLOW_NON_ATOMIC_CREATE: "true" if self.checkpoint_allow_non_atomic_create else None,
            DEAD_LETTER_TOPIC: self.dead_letter_topic,
            DEAD_LETTER_COPY_RECORD: None
            if self.dead_letter_copy_record is None
            else str(self.dead_letter_copy_record).lower(),
            INCLUDE_HEADERS: "true" if self.include_headers else "false",
            MAX_RECORDS_PER_TRIGGER: self.max_records_per_trigger,
            POLL_TIMEOUT_MS: self.poll_timeout_ms,
            STARTING_OFFSETS: starting_offsets,
            FETCH_OFFSET_NUM_RETRIES: self.fetch_offset_num_retries,
        }
        return {name: str(value) for name, value in options.items() if value is not None}


def connection_options(
    bootstrap_servers: str, group_id: str, kafka_options: Mapping[str, str]
) -> dict[str, str]:
    """The options that reach the share group: brokers, group and ``kafka.``-prefixed client settings.

    The options :func:`~spark_kafka_share.share_group_state` passes to the connector, and the first of
    :meth:`KafkaShareOptions.to_options`.

    >>> connection_options("localhost:9092", "g", {"security.protocol": "SSL"})["kafka.security.protocol"]
    'SSL'

    Raises:
        KafkaShareConfigurationError: a key of ``kafka_options`` that starts with ``kafka.``
            (``KAFKA_SHARE_PREFIXED_KAFKA_OPTION``), which the prefix added here would hide from Kafka,
            or that names an option of the source (``KAFKA_SHARE_SOURCE_OPTION_IN_KAFKA_OPTIONS``),
            which would silently replace a field. The connector sees only the merged map, so only
            Python can tell.
    """
    for key in kafka_options:
        if key.lower().startswith("kafka."):
            raise KafkaShareConfigurationError(
                "KAFKA_SHARE_PREFIXED_KAFKA_OPTION",
                f"kafka_options key '{key}' starts with 'kafka.': give Kafka settings without the prefix, "
                f"which is added for you (for example '{key[len('kafka.') :]}').",
            )
        source_field = _SOURCE_OPTION_FIELDS.get(f"kafka.{key.lower()}")
        if source_field is not None:
            raise KafkaShareConfigurationError(
                "KAFKA_SHARE_SOURCE_OPTION_IN_KAFKA_OPTIONS",
                f"'{key}' is an option of the kafka-share source, not a Kafka client setting: "
                f"set it with '{source_field}' instead of in kafka_options.",
            )
    return {
        BOOTSTRAP_SERVERS: bootstrap_servers,
        GROUP_ID: group_id,
        **{f"kafka.{key}": str(value) for key, value in kafka_options.items()},
    }


def _enum_value(value: Enum | str) -> str:
    return str(value.value) if isinstance(value, Enum) else value


def _iso_duration(delta: datetime.timedelta) -> str:
    """A timedelta as the ISO-8601 duration ``Duration.parse`` reads, e.g. ``PT1800S``."""
    micros = (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
    sign = "-" if micros < 0 else ""  # negative: the connector rejects it
    seconds, micros = divmod(abs(micros), 10**6)
    return f"{sign}PT{seconds}.{micros:06d}S" if micros else f"{sign}PT{seconds}S"
