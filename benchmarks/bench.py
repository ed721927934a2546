"""`make bench`: kafka-share against Kafka's own share-consumer perf tool and Spark's own `kafka`
source, on the same data, in one run.

Scenarios (each share-group reader has a group of its own and reads from the earliest record):
  a) raw limit: `kafka-share-consumer-perf-test` with as many consumer threads as Spark consumers;
  b) kafka-share draining the topic with Trigger.AvailableNow into the `noop` sink, parallelism 1, 2, 4:
     with the group's default lock limit per partition (2000), with it raised to 4000 (the most a group
     may set on a broker with default settings), and to 10000 (the most Kafka allows; the local broker
     lets groups go that far with group.share.max.partition.max.record.locks=10000);
  c) Spark's own `kafka` source (spark-sql-kafka-0-10 4.2.0: Maven Central has no 4.3.0) draining the
     same topic the same way, with default options;
  d) 1 ms of work per record (Thread.sleep through SQL `reflect`, as an I/O-bound job would wait) on a
     1-partition topic, kafka-share at parallelism 1, 2 and 4 against the `kafka` source with default
     options: the case share groups exist for; kafka-share with default settings (with more consumers
     than partitions, each consumer polls at most its even share of the group's lock limit), the same
     with the lock limit raised to 4000, and tuned to spread records over consumers in smaller polls
     (`share.acquire.mode=record_limit`, `max.poll.records=250`) and to assign the partition to each
     consumer as it joins (`kafka.share.assignment.interval.ms=0`); and default and tuned under Spark's
     async progress tracking (as in the async section), which takes Spark's offset and commit logs off
     each batch's path, beside the `kafka` source the same way, and under Spark's FileSystem-based
     checkpoint manager (as in the floor section), which writes them at less cost;
  idle) a kafka-share query and a `kafka` source query on a drained topic, with the default trigger and
     with a 1 s trigger: the driver JVM's CPU use over 60 s, beside the same JVM's with no query running;
  e) the exactly-once strategies: the b) drain at parallelism 4 under each;
  f) the same on a smaller topic with the checkpoint on S3 (moto's S3 emulator, run locally; Hadoop's
     S3A client): the requests each batch makes to the store, Spark's own checkpoint files and the
     records log apart; with Spark's default checkpoint file manager, and with its manager for object
     stores (spark-hadoop-cloud's AbortableStreamBasedCheckpointFileManager).
  floor) what a micro-batch costs Spark whatever the source: Spark's `rate-micro-batch` source (4
     partitions, 8,000 rows a batch) into the `noop` sink for 30 s, with Spark's default checkpoint
     file manager and with its FileSystem-based one; and the b) drains at parallelism 1, 2 and 4 with
     the latter, at the default lock limit and at 10000. A kafka-share batch holds at most the group's
     lock limit per partition, so this cost bounds b.
  async) the floor's query and the b) drains with Spark's async progress tracking (the offset and commit
     logs written in the background, at most once a second), at the default lock limit and at 10000;
     with the default trigger (Spark refuses it with Trigger.AvailableNow), stopped once every record
     was read.
  firstbatch) the first batch of a new group's drain at P=2 and P=4, alternating settings over rounds:
     b) drains of a smaller topic (4 partitions and 1) with Kafka's assignment interval at its default
     (1 s) and at 0 (`kafka.share.assignment.interval.ms=0`), and d) drains with the default poll
     timeout (2 s, longer than that interval) and with `pollTimeoutMs=500` (shorter): how long the
     first batch takes, and on 1 partition when a batch first holds more records than one consumer
     may poll (its even share of the group's lock limit), i.e. when a second consumer had the partition.

Every drain also gives the p50 of each part of a batch's time in Spark's progress (`durationMs`):
planning, the offset log write (walCommit), running the batch (addBatch), the commit log write; and
each batch's start, rows, time and parts (`batch_timeline` in the JSON), from which the printed lines
name the batches that took over twice the p50, when they started and their longest part.

Throughput is given end to end (query start to end, as the perf tool measures), from the first
batch with records to the end of the last (a share consumer first has to join its group), and over
the batches that start in the second half of that time ("steady": past the query's start, what a
long-running stream would sustain).
Writes benchmarks/results/<UTC time>.json (git ignores the folder) and prints a table.
"""

# The bench itself is the package sharebench, next to this file.
from sharebench.run import main

if __name__ == "__main__":
    main(__doc__)
