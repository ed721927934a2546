"""PySpark API for the kafka-share Structured Streaming source: Kafka share groups (KIP-932).

A thin layer over the connector that ships inside this package::

    from pyspark.sql import SparkSession
    from spark_kafka_share import configure_spark_with_kafka_share, read_share_stream

    spark = configure_spark_with_kafka_share(SparkSession.builder.master("local[*]")).getOrCreate()
    df = read_share_stream(spark, bootstrap_servers="localhost:9092", group_id="g", subscribe="orders")
"""

from .acknowledgements import AcknowledgeType, acknowledge, marks, release_or_dead_letter
from .errors import (
    KafkaShareAcknowledgementError,
    KafkaShareBrokerUnreachableError,
    KafkaShareConfigurationError,
    KafkaShareConnectNotSupportedError,
    KafkaShareConnectorNotFoundError,
    KafkaShareError,
    from_jvm_error,
)
from .options import AcceptPoint, AcknowledgmentMode, ExactlyOnceStrategy, KafkaShareOptions
from .session import configure_spark_with_kafka_share, jar_path
from .source import read_share_stream
from .state import (
    ShareGroupMember,
    ShareGroupState,
    SharePartitionState,
    TopicPartition,
    share_group_state,
    share_group_state_df,
)
from .triggers import real_time_trigger

__version__ = "0.1.0"

__all__ = [
    "AcceptPoint",
    "AcknowledgeType",
    "AcknowledgmentMode",
    "ExactlyOnceStrategy",
    "KafkaShareAcknowledgementError",
    "KafkaShareBrokerUnreachableError",
    "KafkaShareConfigurationError",
    "KafkaShareConnectNotSupportedError",
    "KafkaShareConnectorNotFoundError",
    "KafkaShareError",
    "KafkaShareOptions",
    "ShareGroupMember",
    "ShareGroupState",
    "SharePartitionState",
    "TopicPartition",
    "acknowledge",
    "configure_spark_with_kafka_share",
    "from_jvm_error",
    "jar_path",
    "marks",
    "read_share_stream",
    "real_time_trigger",
    "release_or_dead_letter",
    "share_group_state",
    "share_group_state_df",
]
