"""The settings the scenarios vary: the group's lock limit, kafka-share's options for d) and
firstbatch), Spark's settings a drain runs under (async progress tracking, its checkpoint file
managers) and the exactly-once strategies of e) and f); and the name of a d) variant. The scenarios
run them, the report names and compares them.
"""

from __future__ import annotations

# The group-level lock limit per partition (the source sets the group config): at the broker's default
# maximum for it, and at Kafka's.
LOCK_LIMITS: dict[str, dict[str, str]] = {
    "": {},
    " locks 4000": {"kafka.share.partition.max.record.locks": "4000"},
    " locks 10000": {"kafka.share.partition.max.record.locks": "10000"},
}
# b) and d) under kafka.share.acknowledge=after-log: records ACCEPTed once the checkpoint logs them, so
# the lock limit bounds a poll, not a batch.
AFTER_LOG = {"kafka.share.exactly.once.strategy": "two-phase-commit", "kafka.share.acknowledge": "after-log"}
# b) the drains of each parallelism: at each lock limit, and under after-log at the default one.
B_VARIANTS: dict[str, dict[str, str]] = {**LOCK_LIMITS, " after-log": AFTER_LOG}
# d) with more consumers than partitions: smaller polls, each consumer assigned the partition as it joins.
TUNED_FOR_WORK = {
    "kafka.share.acquire.mode": "record_limit",
    "kafka.max.poll.records": "250",
    "kafka.share.assignment.interval.ms": "0",
}
# d) Spark's settings a kafka-share variant runs under: its default checkpoint file manager, that
# with async progress tracking, or its FileSystem-based manager (as in b's floor section).
DEFAULT_SPARK = "default"
ASYNC_PROGRESS = "async progress tracking"
FILE_SYSTEM_CHECKPOINTS = "FileSystem-based checkpoint manager"
# d) kafka-share's variants: name, source options, Spark's setting.
WORK_VARIANTS: tuple[tuple[str, dict[str, str], str], ...] = (
    ("default", {}, DEFAULT_SPARK),
    ("default locks 4000", LOCK_LIMITS[" locks 4000"], DEFAULT_SPARK),
    ("tuned", TUNED_FOR_WORK, DEFAULT_SPARK),
    ("after-log", AFTER_LOG, DEFAULT_SPARK),
    ("default", {}, ASYNC_PROGRESS),
    ("tuned", TUNED_FOR_WORK, ASYNC_PROGRESS),
    ("default", {}, FILE_SYSTEM_CHECKPOINTS),
    ("tuned", TUNED_FOR_WORK, FILE_SYSTEM_CHECKPOINTS),
)


def work_variant(name: str, setting: str) -> str:
    """A d) variant's name: its source options' name, then Spark's setting unless that is the default."""
    return name if setting == DEFAULT_SPARK else f"{name} {setting}"


# firstbatch) b's and d's settings, each against the default: the group's assignment interval, which
# delays a new consumer's partitions, and a first poll that ends before that interval does.
FIRST_BATCH_VARIANTS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "b": (("default", {}), ("assignment interval 0", {"kafka.share.assignment.interval.ms": "0"})),
    "d": (("default", {}), ("pollTimeoutMs 500", {"pollTimeoutMs": "500"})),
}
# Kafka's default group.share.partition.max.record.locks: with more consumers than partitions, each
# polls at most its even share of it.
KAFKA_DEFAULT_LOCK_LIMIT = 2000

# e) and f): kafka-share's exactly-once strategies.
STRATEGIES = ("none", "checkpoint-dedup", "two-phase-commit")
# Spark's FileSystem-based checkpoint file manager (floor and d).
FILE_SYSTEM_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
# f) Spark's checkpoint file manager for object stores: writes a file in place instead of renaming it.
ABORTABLE_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
# f) each strategy with Spark's default checkpoint file manager, and two with the one for object stores.
S3_VARIANTS = (
    *((strategy, "default") for strategy in STRATEGIES),
    ("none", "abortable"),
    ("two-phase-commit", "abortable"),
)
