"""The bench's command line: its options and their defaults, some from environment variables."""

from __future__ import annotations

import argparse
import os


def parse_args(description: str | None) -> argparse.Namespace:
    """The options of this run; `description` heads `--help`."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
    )
    parser.add_argument("--jar", default=os.environ.get("SPARK_KAFKA_SHARE_JAR"))
    parser.add_argument("--records", type=int, default=int(os.environ.get("BENCH_RECORDS", "1000000")))
    parser.add_argument("--record-size", type=int, default=200)
    parser.add_argument(
        "--record-batch-bytes",
        type=int,
        default=262144,
        help="the producer's batch.size for the bench's topics (Kafka's default is 16384)",
    )
    parser.add_argument(
        "--work-records",
        type=int,
        default=int(os.environ.get("BENCH_WORK_RECORDS", "20000")),
    )
    parser.add_argument(
        "--s3-records",
        type=int,
        default=int(os.environ.get("BENCH_S3_RECORDS", "200000")),
    )
    parser.add_argument(
        "--first-batch-records",
        type=int,
        default=int(os.environ.get("BENCH_FIRST_BATCH_RECORDS", "200000")),
    )
    parser.add_argument("--first-batch-rounds", type=int, default=2)
    parser.add_argument(
        "--sections",
        default="ab,floor,async,idle,d,firstbatch,strategies,objectstore,latency",
        help="comma-separated: ab (raw vs kafka-share), idle, d (per-record work), strategies (their cost), "
        "objectstore (the strategies with the checkpoint on S3), floor (Spark's own cost of a micro-batch), "
        "async (b and the floor with Spark's async progress tracking), firstbatch (the first batch at P=2 "
        "and P=4: the assignment interval at 0, a poll timeout shorter than it), latency (CreateTime to "
        "sink at a steady rate, real-time mode and the default trigger, against Spark's kafka source)",
    )
    parser.add_argument("--latency-rates", default="1000,10000", help="records a second, comma-separated")
    parser.add_argument("--latency-partitions", default="1,4", help="comma-separated")
    parser.add_argument("--latency-seconds", type=int, default=60, help="how long each latency run produces")
    parser.add_argument(
        "--latency-repeats", type=int, default=3, help="runs of each source in real-time mode, 10 s batches"
    )
    return parser.parse_args()
