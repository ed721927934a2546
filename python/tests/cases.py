"""Bad options and the error the connector raises for each, worded as in KafkaShareSourceOptions.scala.

Shared by the Python-only tests and by the JVM test that checks Python and the JVM agree.
"""

from __future__ import annotations

import datetime
from typing import Any

VALID: dict[str, Any] = {"bootstrap_servers": "localhost:9092", "group_id": "g", "subscribe": "orders"}

SHARE_CONSUMERS_REJECT = (
    "Kafka share consumers do not accept it (share groups manage offsets and membership on the broker)."
)
STARTING_OFFSETS_ALLOWED = (
    "expected 'earliest', 'latest', or a non-negative ISO-8601 duration back from now "
    "such as 'PT30M' or 'P1D'"
)

# (changes to VALID, the message of the error: also the JVM's)
BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    (
        {"bootstrap_servers": ""},
        "[KAFKA_SHARE_MISSING_OPTION] Option 'kafka.bootstrap.servers' is required. "
        'Set it to the Kafka brokers to connect to, for example "host1:9092,host2:9092".',
    ),
    (
        {"group_id": "  "},
        "[KAFKA_SHARE_MISSING_OPTION] Option 'kafka.share.group.id' is required. "
        "Set it to the share group this query consumes as; queries with the same group split the records.",
    ),
    (
        {"kafka_options": {"group.id": "other"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.group.id' cannot be set on the kafka-share "
        "source: the source sets it from option 'kafka.share.group.id'. Remove it from the options.",
    ),
    (
        {"kafka_options": {"Client.Id": "me"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.Client.Id' cannot be set on the kafka-share "
        "source: the source names each consumer after the group and its slot. Remove it from the options.",
    ),
    (
        {"kafka_options": {"share.auto.offset.reset": "earliest"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.share.auto.offset.reset' cannot be set on the "
        "kafka-share source: it is a share group config, not a client setting; use option 'startingOffsets'. "
        "Remove it from the options.",
    ),
    (
        {"kafka_options": {"share.record.lock.duration.ms": "60000"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.share.record.lock.duration.ms' cannot be set "
        "on the kafka-share source: it is a share group config, not a client setting; use option "
        "'kafka.share.lock.timeout.ms'. Remove it from the options.",
    ),
    (
        {"kafka_options": {"share.delivery.count.limit": "3"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.share.delivery.count.limit' cannot be set "
        "on the kafka-share source: it is a share group config, not a client setting; set it on the group "
        "with Kafka's kafka-configs tool (--entity-type groups). Remove it from the options.",
    ),
    (
        {"kafka_options": {"isolation.level": "read_committed"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.isolation.level' cannot be set on the "
        "kafka-share source: Kafka share consumers do not accept it; a share group has config "
        "'share.isolation.level' instead: set it on the group with Kafka's kafka-configs tool "
        "(--entity-type groups). Remove it from the options.",
    ),
    (
        {"kafka_options": {"enable.auto.commit": "false"}},
        "[KAFKA_SHARE_OWNED_KAFKA_CONFIG] Kafka setting 'kafka.enable.auto.commit' cannot be set on the "
        f"kafka-share source: {SHARE_CONSUMERS_REJECT} Remove it from the options.",
    ),
    (
        {"kafka_options": {"default.api.timeout.ms": " 00 "}},
        "[KAFKA_SHARE_INVALID_KAFKA_CONFIG] Kafka setting 'kafka.default.api.timeout.ms' has a value Kafka's "
        "consumer or this source does not accept: expected a positive number of milliseconds (it bounds "
        "every Admin call of the driver). Correct or remove it (the value is not shown: Kafka settings can "
        "hold credentials).",
    ),
    (
        {"subscribe_pattern": "orders-.*"},
        "[KAFKA_SHARE_CONFLICTING_OPTIONS] Options 'subscribe', 'subscribePattern' cannot be used together. "
        "Give either a list of topics or a pattern, not both.",
    ),
    (
        {"subscribe": None},
        "[KAFKA_SHARE_NO_SUBSCRIPTION] One of the options 'subscribe' (a comma-separated list of topics) or "
        "'subscribePattern' (a Java regex of topic names) is required.",
    ),
    (
        {"subscribe": []},
        "[KAFKA_SHARE_NO_SUBSCRIPTION] One of the options 'subscribe' (a comma-separated list of topics) or "
        "'subscribePattern' (a Java regex of topic names) is required.",
    ),
    (
        {"subscribe": " , "},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value ',' for option 'subscribe': "
        "expected a comma-separated list of topic names.",
    ),
    (
        {"acknowledgment_mode": "manual"},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value 'manual' for option "
        "'kafka.share.acknowledgment.mode': expected one of 'implicit', 'explicit'.",
    ),
    (
        {"exactly_once_strategy": "exactly-once"},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value 'exactly-once' for option "
        "'kafka.share.exactly.once.strategy': "
        "expected one of 'none', 'idempotent', 'checkpoint-dedup', 'two-phase-commit'.",
    ),
    (
        {"parallelism": 0},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '0' for option 'kafka.share.parallelism': "
        "expected a positive whole number.",
    ),
    (
        {"parallelism": 2**31},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '2147483648' for option 'kafka.share.parallelism': "
        "expected at most 2147483647.",
    ),
    (
        {"lock_timeout_ms": -1},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '-1' for option 'kafka.share.lock.timeout.ms': "
        "expected a positive whole number.",
    ),
    (
        {"partition_max_record_locks": 0},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '0' for option "
        "'kafka.share.partition.max.record.locks': expected a positive whole number.",
    ),
    (
        {"partition_max_record_locks": 2**31},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '2147483648' for option "
        "'kafka.share.partition.max.record.locks': expected at most 2147483647.",
    ),
    (
        {"assignment_interval_ms": -1},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '-1' for option "
        "'kafka.share.assignment.interval.ms': expected a whole number from 0 to 2147483647.",
    ),
    (
        {"max_records_per_trigger": 2**63},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '9223372036854775808' for option "
        "'maxRecordsPerTrigger': expected a positive whole number.",
    ),
    (
        {"poll_timeout_ms": 0},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '0' for option 'pollTimeoutMs': "
        "expected a positive whole number.",
    ),
    (
        {"starting_offsets": "yesterday"},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value 'yesterday' for option 'startingOffsets': "
        f"{STARTING_OFFSETS_ALLOWED}.",
    ),
    (
        {"starting_offsets": datetime.timedelta(seconds=-5)},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '-PT5S' for option 'startingOffsets': "
        f"{STARTING_OFFSETS_ALLOWED}.",
    ),
    (
        {"fetch_offset_num_retries": -1},
        "[KAFKA_SHARE_INVALID_OPTION_VALUE] Invalid value '-1' for option 'fetchOffset.numRetries': "
        "expected a whole number from 0 to 2147483647.",
    ),
]

# Checks only Python makes: mistakes in kafka_options that the flat option map would hide.
PYTHON_ONLY_BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    (
        {"kafka_options": {"kafka.security.protocol": "SSL"}},
        "[KAFKA_SHARE_PREFIXED_KAFKA_OPTION] kafka_options key 'kafka.security.protocol' starts with "
        "'kafka.': give Kafka settings without the prefix, which is added for you "
        "(for example 'security.protocol').",
    ),
    (
        {"kafka_options": {"share.parallelism": "4"}},
        "[KAFKA_SHARE_SOURCE_OPTION_IN_KAFKA_OPTIONS] 'share.parallelism' is an option of the kafka-share "
        "source, not a Kafka client setting: set it with 'parallelism' instead of in kafka_options.",
    ),
    (
        {"kafka_options": {"bootstrap.servers": "elsewhere:9092"}},
        "[KAFKA_SHARE_SOURCE_OPTION_IN_KAFKA_OPTIONS] 'bootstrap.servers' is an option of the kafka-share "
        "source, not a Kafka client setting: set it with 'bootstrap_servers' instead of in kafka_options.",
    ),
]

# startingOffsets values next to whether java.time.Duration.parse (and the source) accepts them.
STARTING_OFFSETS: list[tuple[str, bool]] = [
    ("earliest", True),
    ("LATEST", True),
    ("PT30M", True),
    ("pt30m", True),
    ("by_duration:P1D", True),
    ("P1DT2H3M4.5S", True),
    ("PT1,25S", True),
    ("PT0S", True),
    ("-PT0S", True),
    ("P-1DT25H", True),
    ("PT-0.5S", False),
    ("-PT1H", False),
    ("by_duration:-PT5M", False),
    ("BY_DURATION:PT5M", False),
    ("P", False),
    ("PT", False),
    ("P1DT", False),
    ("PT1H30", False),
    ("P1W", False),
    ("PT1.1234567891S", False),
    ("PT9223372036854775808S", False),
    ("P106751991167301D", False),
]
