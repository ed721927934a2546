"""The state of a share group (members, assignments, lag), read through Kafka's Admin API."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ._jvm import driver_jvm, raising_kafka_share_errors, require_classic_session, require_connector
from .options import connection_options


@dataclass(frozen=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True)
class ShareGroupMember:
    """A consumer in the group and the partitions the broker assigned to it."""

    member_id: str
    client_id: str
    host: str
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class SharePartitionState:
    """Where the group is in one partition: ``lag`` is None while Kafka has not computed it."""

    topic: str
    partition: int
    start_offset: int
    lag: int | None


@dataclass(frozen=True)
class ShareGroupState:
    """A share group as Kafka describes it; ``exists`` is False (and the rest empty) for an unknown group."""

    group_id: str
    exists: bool
    state: str | None
    members: list[ShareGroupMember]
    partitions: list[SharePartitionState]

    @property
    def total_lag(self) -> int | None:
        """The records waiting across all partitions, or None if the lag of any partition is unknown."""
        lags = [partition.lag for partition in self.partitions]
        return None if None in lags else sum(lag for lag in lags if lag is not None)

    @classmethod
    def from_json(cls, text: str) -> ShareGroupState:
        """Parse the JSON of the JVM's ``KafkaShareGroups.describeJson``."""
        group: dict[str, Any] = json.loads(text)
        return cls(
            group_id=group["groupId"],
            exists=group["exists"],
            state=group["state"],
            members=[
                ShareGroupMember(
                    member_id=member["memberId"],
                    client_id=member["clientId"],
                    host=member["host"],
                    assignment=[TopicPartition(a["topic"], a["partition"]) for a in member["assignment"]],
                )
                for member in group["members"]
            ],
            partitions=[
                SharePartitionState(p["topic"], p["partition"], p["startOffset"], p["lag"])
                for p in group["partitions"]
            ],
        )


def share_group_state(
    spark: SparkSession, bootstrap_servers: str, group_id: str, kafka_options: Mapping[str, str] | None = None
) -> ShareGroupState:
    """Describe a share group: its state, members and their partitions, and the lag per partition.

    ``kafka_options`` are Kafka client settings without the ``kafka.`` prefix, as for the source
    (e.g. security settings, or ``{"default.api.timeout.ms": "5000"}`` to fail sooner)::

        state = share_group_state(spark, "localhost:9092", "orders-processor")
        if state.exists:
            print(state.state, len(state.members), "members, lag", state.total_lag)

    Needs a classic Spark session with the connector jar (the Admin client runs in the driver JVM).

    Raises:
        KafkaShareConfigurationError: a missing option or a Kafka setting the source does not allow.
        KafkaShareBrokerUnreachableError: the cluster did not answer within ``default.api.timeout.ms``.
        KafkaShareConnectNotSupportedError: ``spark`` is a Spark Connect session.
        KafkaShareConnectorNotFoundError: the session's JVM does not have the connector.
    """
    require_classic_session(
        spark,
        "share_group_state",
        "it calls Kafka's Admin client inside the driver JVM",
        "Call it from a classic session, or use Kafka's kafka-share-groups.sh --describe.",
    )
    options = connection_options(bootstrap_servers, group_id, kafka_options or {})
    require_connector(spark)
    jvm = driver_jvm(spark)
    java_options = jvm.java.util.HashMap()
    for name, value in options.items():
        java_options.put(name, value)
    with raising_kafka_share_errors():
        text = jvm.io.github.sparkkafkashare.KafkaShareGroups.describeJson(java_options)
    return ShareGroupState.from_json(text)


def share_group_state_df(
    spark: SparkSession, bootstrap_servers: str, group_id: str, kafka_options: Mapping[str, str] | None = None
) -> DataFrame:
    """The partitions of :func:`share_group_state` as a DataFrame.

    Its columns are ``topic``, ``partition``, ``startOffset`` and ``lag`` (null while unknown)::

        share_group_state_df(spark, "localhost:9092", "orders-processor").orderBy("lag").show()
    """
    state = share_group_state(spark, bootstrap_servers, group_id, kafka_options)
    rows = [(p.topic, p.partition, p.start_offset, p.lag) for p in state.partitions]
    return spark.createDataFrame(rows, "topic STRING, partition INT, startOffset BIGINT, lag BIGINT")
