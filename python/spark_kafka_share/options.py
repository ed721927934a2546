"""Typed options of the kafka-share source, checked in Python exactly as the connector checks them.

The checks and messages mirror ``KafkaShareSourceOptions.scala``: a bad option fails here, before
Spark is involved, with the same condition and wording the JVM would use at ``load()``. Two checks
stay on the JVM: the syntax of ``subscribe_pattern`` (a Java regex) and anything Kafka itself
says about the ``kafka_options``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from .errors import KafkaShareConfigurationError

BOOTSTRAP_SERVERS = "kafka.bootstrap.servers"
GROUP_ID = "kafka.share.group.id"
PARALLELISM = "kafka.share.parallelism"
ACKNOWLEDGMENT_MODE = "kafka.share.acknowledgment.mode"
EXACTLY_ONCE_STRATEGY = "kafka.share.exactly.once.strategy"
LOCK_TIMEOUT_MS = "kafka.share.lock.timeout.ms"
PARTITION_MAX_RECORD_LOCKS = "kafka.share.partition.max.record.locks"
ASSIGNMENT_INTERVAL_MS = "kafka.share.assignment.interval.ms"
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


# Options of the source itself that start with "kafka."; as kafka_options keys they are mistakes.
_SOURCE_OPTION_FIELDS = {
    BOOTSTRAP_SERVERS: "bootstrap_servers",
    GROUP_ID: "group_id",
    PARALLELISM: "parallelism",
    ACKNOWLEDGMENT_MODE: "acknowledgment_mode",
    EXACTLY_ONCE_STRATEGY: "exactly_once_strategy",
    LOCK_TIMEOUT_MS: "lock_timeout_ms",
    PARTITION_MAX_RECORD_LOCKS: "partition_max_record_locks",
    ASSIGNMENT_INTERVAL_MS: "assignment_interval_ms",
}

_SHARE_CONSUMER_REJECTS = (
    "Kafka share consumers do not accept it (share groups manage offsets and membership on the broker)."
)
_GROUP_CONFIG = "it is a share group config, not a client setting;"
_ON_THE_GROUP = "set it on the group with Kafka's kafka-configs tool (--entity-type groups)."
# Kafka client settings the source sets itself or that share consumers reject, with the reason.
_OWNED_KAFKA_CONFIGS = {
    "group.id": f"the source sets it from option '{GROUP_ID}'.",
    "group.type": "the source always uses a share group.",
    "key.deserializer": "keys are always returned as binary; cast or decode the 'key' column.",
    "value.deserializer": "values are always returned as binary; cast or decode the 'value' column.",
    "share.acknowledgement.mode": "the source acknowledges records itself after Spark commits each batch; "
    f"see option '{ACKNOWLEDGMENT_MODE}'.",
    "client.id": "the source names each consumer after the group and its slot.",
    # Kafka's names of the share group's own configs: a client ignores them, so a query would run without.
    "share.auto.offset.reset": f"{_GROUP_CONFIG} use option '{STARTING_OFFSETS}'.",
    "share.record.lock.duration.ms": f"{_GROUP_CONFIG} use option '{LOCK_TIMEOUT_MS}'.",
    **dict.fromkeys(
        [
            "share.session.timeout.ms",
            "share.heartbeat.interval.ms",
            "share.delivery.count.limit",
            "share.isolation.level",
            "share.renew.acknowledge.enable",
            "share.assignor.offload.enable",
        ],
        f"{_GROUP_CONFIG} {_ON_THE_GROUP}",
    ),
    **dict.fromkeys(
        [
            "enable.auto.commit",
            "auto.commit.interval.ms",
            "auto.offset.reset",
            "group.instance.id",
            "partition.assignment.strategy",
            "interceptor.classes",
            "group.protocol",
            "group.remote.assignor",
        ],
        _SHARE_CONSUMER_REJECTS,
    ),
    **{
        config: f"Kafka share consumers do not accept it; a share group has config 'share.{config}' instead: "
        + _ON_THE_GROUP
        for config in ["isolation.level", "session.timeout.ms", "heartbeat.interval.ms"]
    },
}

_LONG_MAX = 2**63 - 1
_INT_MAX = 2**31 - 1


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
        subscribe_pattern: a Java regex of topic names (its syntax is checked by the JVM at ``load()``).
        parallelism: the number of share consumers (default: Spark's default parallelism). With more
            consumers than partitions, each polls at most its even share of the group's lock limit.
        acknowledgment_mode: how records are acknowledged: ``implicit`` (every record of a
            committed batch is accepted) or ``explicit`` (see :func:`~spark_kafka_share.acknowledge`).
        exactly_once_strategy: what the source does about records that reach the sink twice; see
            :class:`ExactlyOnceStrategy`.
        lock_timeout_ms: how long a consumer may hold the records it fetched before Kafka hands them
            out again (the group config ``share.record.lock.duration.ms``).
        partition_max_record_locks: how many records of one partition the group may hold
            unacknowledged (the group config ``share.partition.max.record.locks``; Kafka's default
            2000). Records stay held until their batch commits, so this caps a micro-batch per
            partition; the broker's ``group.share.max.partition.max.record.locks`` bounds it.
        assignment_interval_ms: how long Kafka may wait before it assigns partitions to members that
            joined (the group config ``share.assignment.interval.ms``, Kafka 4.3; default 1000).
            0 gives every consumer of a starting query its partitions when it joins.
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
    lock_timeout_ms: int | None = None
    partition_max_record_locks: int | None = None
    assignment_interval_ms: int | None = None
    include_headers: bool = False
    max_records_per_trigger: int | None = None
    poll_timeout_ms: int | None = None
    starting_offsets: str | datetime.timedelta | None = None
    fetch_offset_num_retries: int | None = None
    # Left out of repr(): a logged or printed options object must not show credentials.
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def to_options(self) -> dict[str, str]:
        """The plain option map, for ``spark.readStream.format("kafka-share").options(**map)``.

        It does not check the options; :meth:`validate` does, and so does the JVM at ``load()``.

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
            **_connection_options(self.bootstrap_servers, self.group_id, self.kafka_options),
            SUBSCRIBE: subscribe,
            SUBSCRIBE_PATTERN: self.subscribe_pattern,
            PARALLELISM: self.parallelism,
            ACKNOWLEDGMENT_MODE: _enum_value(self.acknowledgment_mode),
            EXACTLY_ONCE_STRATEGY: _enum_value(self.exactly_once_strategy),
            LOCK_TIMEOUT_MS: self.lock_timeout_ms,
            PARTITION_MAX_RECORD_LOCKS: self.partition_max_record_locks,
            ASSIGNMENT_INTERVAL_MS: self.assignment_interval_ms,
            INCLUDE_HEADERS: "true" if self.include_headers else "false",
            MAX_RECORDS_PER_TRIGGER: self.max_records_per_trigger,
            POLL_TIMEOUT_MS: self.poll_timeout_ms,
            STARTING_OFFSETS: starting_offsets,
            FETCH_OFFSET_NUM_RETRIES: self.fetch_offset_num_retries,
        }
        return {name: str(value) for name, value in options.items() if value is not None}

    def validate(self) -> None:
        """Check the options as the connector does, in the same order and with the same messages.

        Raises:
            KafkaShareConfigurationError: the first problem found, e.g. for
                ``KafkaShareOptions("localhost:9092", "g").validate()``:
                ``[KAFKA_SHARE_NO_SUBSCRIPTION] One of the options 'subscribe' ... is required.``
        """
        _check_kafka_options(self.kafka_options)
        _validate_source(self.to_options())


def _connection_options(
    bootstrap_servers: str, group_id: str, kafka_options: Mapping[str, str]
) -> dict[str, str]:
    """The options that reach the share group: brokers, group and ``kafka.``-prefixed client settings."""
    return {
        BOOTSTRAP_SERVERS: bootstrap_servers,
        GROUP_ID: group_id,
        **{f"kafka.{key}": str(value) for key, value in kafka_options.items()},
    }


def _check_kafka_options(kafka_options: Mapping[str, str]) -> None:
    """Catch kafka_options keys that the prefixed option map would silently misread (Python only)."""
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


def _validate_connection(options: Mapping[str, str]) -> None:
    """The checks of ``KafkaShareSourceOptions.parseConnection``: brokers, group, Kafka settings."""
    if _get(options, BOOTSTRAP_SERVERS) is None:
        raise _missing_option(
            BOOTSTRAP_SERVERS,
            'Set it to the Kafka brokers to connect to, for example "host1:9092,host2:9092".',
        )
    if _get(options, GROUP_ID) is None:
        raise _missing_option(
            GROUP_ID,
            "Set it to the share group this query consumes as; "
            "queries with the same group split the records.",
        )
    source_owned = {name.lower() for name in _SOURCE_OPTION_FIELDS}
    kafka_params = {
        name[len("kafka.") :]: value
        for name, value in options.items()
        if name.lower().startswith("kafka.") and name.lower() not in source_owned
    }
    for key in kafka_params:
        reason = _OWNED_KAFKA_CONFIGS.get(key.lower())
        if reason is not None:
            raise KafkaShareConfigurationError(
                "KAFKA_SHARE_OWNED_KAFKA_CONFIG",
                f"Kafka setting 'kafka.{key}' cannot be set on the kafka-share source: {reason} "
                "Remove it from the options.",
            )
    # Kafka allows 0, but the driver bounds each of its Admin calls with it (other values Kafka checks).
    timeout = kafka_params.get("default.api.timeout.ms")
    if timeout is not None and re.fullmatch(r"[+-]?0+", _java_trim(timeout)):
        raise KafkaShareConfigurationError(
            "KAFKA_SHARE_INVALID_KAFKA_CONFIG",
            "Kafka setting 'kafka.default.api.timeout.ms' has a value Kafka's consumer or this source does "
            "not accept: expected a positive number of milliseconds (it bounds every Admin call of the "
            "driver). Correct or remove it (the value is not shown: Kafka settings can hold credentials).",
        )


def _validate_source(options: Mapping[str, str]) -> None:
    """The checks of ``KafkaShareSourceOptions.parse``, in its order."""
    _validate_connection(options)

    subscribe, pattern = _get(options, SUBSCRIBE), _get(options, SUBSCRIBE_PATTERN)
    if subscribe is not None and pattern is not None:
        raise KafkaShareConfigurationError(
            "KAFKA_SHARE_CONFLICTING_OPTIONS",
            f"Options '{SUBSCRIBE}', '{SUBSCRIBE_PATTERN}' cannot be used together. "
            "Give either a list of topics or a pattern, not both.",
        )
    if subscribe is None and pattern is None:
        raise KafkaShareConfigurationError(
            "KAFKA_SHARE_NO_SUBSCRIPTION",
            f"One of the options '{SUBSCRIBE}' (a comma-separated list of topics) or "
            f"'{SUBSCRIBE_PATTERN}' (a Java regex of topic names) is required.",
        )
    if subscribe is not None and not any(_java_trim(topic) for topic in subscribe.split(",")):
        raise _invalid_value(SUBSCRIBE, subscribe, "expected a comma-separated list of topic names")

    _one_of(_get(options, ACKNOWLEDGMENT_MODE), ACKNOWLEDGMENT_MODE, AcknowledgmentMode)
    _one_of(_get(options, EXACTLY_ONCE_STRATEGY), EXACTLY_ONCE_STRATEGY, ExactlyOnceStrategy)

    _positive_int(_get(options, PARALLELISM), PARALLELISM)
    _positive_long(_get(options, LOCK_TIMEOUT_MS), LOCK_TIMEOUT_MS)
    _positive_int(_get(options, PARTITION_MAX_RECORD_LOCKS), PARTITION_MAX_RECORD_LOCKS)
    _non_negative_int(_get(options, ASSIGNMENT_INTERVAL_MS), ASSIGNMENT_INTERVAL_MS)
    include_headers = _get(options, INCLUDE_HEADERS)
    if include_headers is not None and include_headers.lower() not in ("true", "false"):
        raise _invalid_value(INCLUDE_HEADERS, include_headers, "expected 'true' or 'false'")
    _positive_long(_get(options, MAX_RECORDS_PER_TRIGGER), MAX_RECORDS_PER_TRIGGER)
    _positive_long(_get(options, POLL_TIMEOUT_MS), POLL_TIMEOUT_MS)
    starting_offsets = _get(options, STARTING_OFFSETS)
    if starting_offsets is not None and not _is_starting_offsets(starting_offsets):
        raise _invalid_value(
            STARTING_OFFSETS,
            starting_offsets,
            "expected 'earliest', 'latest', or a non-negative ISO-8601 duration back from now "
            "such as 'PT30M' or 'P1D'",
        )
    _non_negative_int(_get(options, FETCH_OFFSET_NUM_RETRIES), FETCH_OFFSET_NUM_RETRIES)


def _get(options: Mapping[str, str], name: str) -> str | None:
    """The trimmed value of an option (names are case-insensitive, as in Spark), None if blank."""
    for key, value in options.items():
        if key.lower() == name.lower():
            return _java_trim(value) or None
    return None


def _java_trim(value: str) -> str:
    """``String.trim()``: strips the ASCII control characters and space, not Unicode whitespace."""
    return value.strip("".join(map(chr, range(0x21))))


def _enum_value(value: Enum | str) -> str:
    return str(value.value) if isinstance(value, Enum) else value


def _one_of(value: str | None, option: str, choices: type[Enum]) -> Enum | None:
    if value is None:
        return None
    for choice in choices:
        if choice.value.lower() == value.lower():
            return choice
    allowed = ", ".join(f"'{choice.value}'" for choice in choices)
    raise _invalid_value(option, value, f"expected one of {allowed}")


def _non_negative_int(value: str | None, option: str) -> int | None:
    """``Integer.parseInt`` then ``>= 0``, as the connector parses retry counts."""
    if value is None:
        return None
    if re.fullmatch(r"[+-]?\d+", value) is None or not 0 <= int(value) <= _INT_MAX:
        raise _invalid_value(option, value, f"expected a whole number from 0 to {_INT_MAX}")
    return int(value)


def _positive_long(value: str | None, option: str) -> int | None:
    """``Long.parseLong`` then ``> 0``, as the connector parses counts and durations."""
    if value is None:
        return None
    if re.fullmatch(r"[+-]?\d+", value) is None or not 0 < int(value) <= _LONG_MAX:
        raise _invalid_value(option, value, "expected a positive whole number")
    return int(value)


def _positive_int(value: str | None, option: str) -> int | None:
    """``_positive_long``, then at most ``Integer.MAX_VALUE``, as the connector parses sizes."""
    number = _positive_long(value, option)
    if number is not None and number > _INT_MAX:
        raise _invalid_value(option, str(number), f"expected at most {_INT_MAX}")
    return number


# java.time.Duration.parse's grammar.
_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _is_starting_offsets(value: str) -> bool:
    """``earliest``, ``latest``, or a duration ``Duration.parse`` accepts that is not negative."""
    if value.lower() in ("earliest", "latest"):
        return True
    match = _ISO_DURATION.fullmatch(value.removeprefix("by_duration:"))
    if match is None or match.group(3) in ("T", "t"):
        return False
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    if days is None and hours is None and minutes is None and seconds is None:
        return False
    total_seconds = 0
    for number, unit in ((days, 86400), (hours, 3600), (minutes, 60), (seconds, 1)):
        if number is not None:
            total_seconds += int(number) * unit
            if abs(int(number) * unit) > _LONG_MAX or abs(total_seconds) > _LONG_MAX:
                return False  # Duration.parse fails on long overflow
    nanos = int((fraction or "").ljust(9, "0")) * (-1 if (seconds or "").startswith("-") else 1)
    total_nanos = (total_seconds * 10**9 + nanos) * (-1 if sign == "-" else 1)
    return total_nanos >= 0


def _iso_duration(delta: datetime.timedelta) -> str:
    """A timedelta as the ISO-8601 duration ``Duration.parse`` reads, e.g. ``PT1800S``."""
    micros = (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
    sign = "-" if micros < 0 else ""  # negative: rejected by the checks, as on the JVM
    seconds, micros = divmod(abs(micros), 10**6)
    return f"{sign}PT{seconds}.{micros:06d}S" if micros else f"{sign}PT{seconds}S"


def _missing_option(option: str, hint: str) -> KafkaShareConfigurationError:
    return KafkaShareConfigurationError(
        "KAFKA_SHARE_MISSING_OPTION", f"Option '{option}' is required. {hint}"
    )


def _invalid_value(option: str, value: str, allowed: str) -> KafkaShareConfigurationError:
    return KafkaShareConfigurationError(
        "KAFKA_SHARE_INVALID_OPTION_VALUE", f"Invalid value '{value}' for option '{option}': {allowed}."
    )
