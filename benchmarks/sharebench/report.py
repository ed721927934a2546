"""What the bench prints and writes: each section's figures as it ends, the result JSON file, and
the closing table with its ratios, batch parts, slow batches and idle and strategy costs.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

from .timings import BATCH_PARTS
from .variants import (
    ASYNC_PROGRESS,
    B_VARIANTS,
    DEFAULT_SPARK,
    FILE_SYSTEM_CHECKPOINTS,
    KAFKA_DEFAULT_LOCK_LIMIT,
    WORK_VARIANTS,
    work_variant,
)


def show(measured: dict[str, Any] | list[dict[str, Any]]) -> None:
    """Prints what a section measured as it ends, without the batch timelines (they go to the file)."""
    drains = measured if isinstance(measured, list) else [measured]
    print(json.dumps([{k: v for k, v in r.items() if k != "batch_timeline"} for r in drains]), flush=True)


def write_results(out: Path, meta: dict[str, Any], results: list[dict[str, Any]]) -> None:
    """Indented JSON with every list of numbers (a batch of a timeline) on one line."""
    text = json.dumps({"meta": meta, "results": results}, indent=2)
    out.write_text(re.sub(r"\[[-+0-9.eE,\s]*\]", lambda m: json.dumps(json.loads(m.group(0))), text))


def slow_batches(timeline: list[list[float]], p50_ms: float) -> list[tuple[int, float, float, str]]:
    """The batches of a drain's timeline that took over twice its p50: (number from 1, start, ms, the
    part of the batch that took longest)."""
    return [
        (i, start, ms, BATCH_PARTS[parts.index(max(parts))])
        for i, (start, _, ms, *parts) in enumerate(timeline, 1)
        if ms > 2 * p50_ms
    ]


def lock_limit_ceiling(
    drain: dict[str, Any], results: list[dict[str, Any]]
) -> tuple[float, int, float] | None:
    """The most a b) drain can read a second: a batch holds at most the group's lock limit per
    partition, and costs at least what Spark's floor batch costs under the same Spark setting (the
    floor's 8,000 rows cost Spark about what fewer do: its offset and commit logs are most of it).
    Returns (records/s, lock limit, floor batch p50 ms), or None without that floor in `results`, or
    for a drain under after-log, whose batches the lock limit does not bound."""
    name, _, setting = drain["variant"].partition(", ")
    floor = next(
        (
            r
            for r in results
            if r["scenario"]
            == f"floor) Spark's rate-micro-batch source, {setting or 'default checkpoint manager'}"
        ),
        None,
    )
    if floor is None or not floor["batch_ms_p50"]:
        return None
    group_configs = B_VARIANTS["" if name == "default" else f" {name}"]
    if "kafka.share.acknowledge" in group_configs:
        return None
    limit = int(group_configs.get("kafka.share.partition.max.record.locks", KAFKA_DEFAULT_LOCK_LIMIT))
    return limit * drain["partitions"] / (floor["batch_ms_p50"] / 1000), limit, floor["batch_ms_p50"]


def print_latency(results: list[dict[str, Any]]) -> None:
    """The latency section's table: each run's latency and rate, with its ratio to Spark's `kafka`
    source in the same mode at the same rate and partitions."""
    runs = [r for r in results if r["scenario"].startswith("latency)")]
    if not runs:
        return

    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:,.0f}" if isinstance(v, float) else str(v)

    print(
        "\nlatency: scenario | rate | partitions | p50 ms | p99 ms (each run's) | max ms | records/s "
        "| p50, p99 against kafka"
    )
    for r in runs:
        mode = r["scenario"].split(", ", 1)[1]  # the trigger, and a real-time batch's duration
        kafka = next(
            (
                k
                for k in runs
                if k["scenario"] == f"latency) kafka, {mode}"
                and (k["rate"], k["partitions"]) == (r["rate"], r["partitions"])
            ),
            None,
        )
        ratios = (
            f"{r['latency_ms_p50'] / max(kafka['latency_ms_p50'], 1):.2f}x, "
            f"{r['latency_ms_p99'] / max(kafka['latency_ms_p99'], 1):.2f}x"
            if kafka
            and r is not kafka
            and r["latency_ms_p50"] is not None
            and kafka["latency_ms_p50"] is not None
            else "-"
        )
        each_run = r.get("latency_ms_p99_per_run", [])
        p99 = fmt(r["latency_ms_p99"])
        if len(each_run) > 1:
            p99 += f" ({', '.join(fmt(p) for p in each_run)})"
        cells = [r["scenario"], r["rate"], r["partitions"], r["latency_ms_p50"], p99]
        cells += [r["latency_ms_max"], r["records_per_s"], ratios]
        print(" | ".join(fmt(c) for c in cells))


def print_table(results: list[dict[str, Any]]) -> None:
    """The table of every result, then the lines that compare them: b against a and c, the parts of a
    batch, the slow batches, d's scaling, firstbatch, idle's CPU use, and e's and f's costs."""

    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:,.0f}" if isinstance(v, float) else str(v)

    print_latency(results)
    results = [r for r in results if not r["scenario"].startswith("latency)")]
    columns = [
        "scenario",
        "partitions",
        "records_per_s",
        "flowing_records_per_s",
        "steady_records_per_s",
        "mb_per_s",
        "batch_ms_p50",
        "batch_ms_p99",
        "commit_to_ack_ms_p50",
        "peak_heap_mb",
        "core_share_pct",
    ]
    print("\n" + " | ".join(columns))
    for r in results:
        print(" | ".join(fmt(r.get(c)) for c in columns))
    raw = {(r["partitions"], r["scenario"][-1]): r for r in results if r["scenario"].startswith("a)")}
    source = {r["partitions"]: r for r in results if r["scenario"].startswith("c)")}
    for r in results:
        if r.get("batch_parts_ms_p50"):
            parts = ", ".join(f"{part} {fmt(ms)}" for part, ms in r["batch_parts_ms_p50"].items())
            print(f"{r['scenario']}, {r['partitions']} partitions, p50 ms: {parts}")
        if r.get("source_parts_ms_p50"):
            parts = ", ".join(f"{part} {fmt(ms)}" for part, ms in r["source_parts_ms_p50"].items())
            print(f"{r['scenario']}, {r['partitions']} partitions, kafka-share's parts, p50 ms: {parts}")
    for r in results:
        if len(r.get("batch_timeline") or []) > 1:  # a one-batch drain (the `kafka` source's) has none slow
            slow = slow_batches(r["batch_timeline"], r["batch_ms_p50"])
            where = ", ".join(
                f"#{i} at {start:.1f} s ({ms:,.0f} ms, {part})" for i, start, ms, part in slow[:8]
            )
            print(
                f"{r['scenario']}, {r['partitions']} partitions: {len(slow)} of {len(r['batch_timeline'])} "
                f"batches over twice the p50 ({fmt(r['batch_ms_p50'])} ms){': ' + where if slow else ''}"
                f"{', ...' if len(slow) > 8 else ''}"
            )
    for r in results:
        if r["scenario"].startswith("b)") and (r["partitions"], str(r["parallelism"])) in raw:
            a, c = raw[(r["partitions"], str(r["parallelism"]))], source[r["partitions"]]
            b_a = r["records_per_s"] / a["records_per_s"]
            print(
                f"{r['scenario']}, {r['partitions']} partitions: b/a {b_a:.2f}, "
                f"b/c {r['records_per_s'] / c['records_per_s']:.2f} "
                f"(from the first batch: b/c {r['flowing_records_per_s'] / c['flowing_records_per_s']:.2f})"
            )
    for r in results:
        ceiling = lock_limit_ceiling(r, results) if r["scenario"].startswith("b)") else None
        if ceiling:
            per_s, limit, floor_ms = ceiling
            steady = r["steady_records_per_s"]
            print(
                f"{r['scenario']}, {r['partitions']} partitions: {r['records_per_s'] / per_s:.2f} of the "
                f"ceiling {per_s:,.0f} records/s ({limit} records a partition a batch, a batch at least "
                f"the floor's {floor_ms:.0f} ms), flowing {r['flowing_records_per_s'] / per_s:.2f}"
                + (f", steady {steady / per_s:.2f}" if steady else "")
            )
    for name, _, setting in WORK_VARIANTS:
        variant = f"work {work_variant(name, setting)}"
        work = {r["parallelism"]: r for r in results if r.get("variant") == variant}
        # The `kafka` source reads the topic in one batch, so a checkpoint manager hardly touches it.
        work_source = next(
            (
                r
                for r in results
                if r.get("variant", "").startswith("kafka source")
                and r.get("async_progress") == (setting == ASYNC_PROGRESS)
            ),
            None,
        )
        if work and work_source:
            for measure in ("records_per_s", "flowing_records_per_s", "steady_records_per_s"):
                p1, p4 = work[1][measure], work[4][measure]
                if None in (p1, work[2][measure], p4):
                    continue
                line = f"d {variant} ({measure}): P2/P1 {work[2][measure] / p1:.2f}, P4/P1 {p4 / p1:.2f}"
                if work_source[measure]:  # a single batch has no steady figure
                    line += f", P4 against the kafka source {p4 / work_source[measure]:.2f}"
                print(line)
    # A setting may slow P=1 (the tuned one's small polls), so also the fastest P=4 against the
    # fastest P=1, under each of Spark's settings.
    for setting, measure in itertools.product(
        (DEFAULT_SPARK, ASYNC_PROGRESS, FILE_SYSTEM_CHECKPOINTS), ("records_per_s", "steady_records_per_s")
    ):
        drains = [r for r in results if r.get("spark_setting") == setting and r[measure] is not None]
        fastest = {
            p: max((r for r in drains if r["parallelism"] == p), key=lambda r: r[measure], default=None)
            for p in (1, 4)
        }
        if fastest[1] and fastest[4]:
            print(
                f"d fastest P=4 against fastest P=1{'' if setting == DEFAULT_SPARK else f' ({setting})'} "
                f"({measure}): {fastest[4][measure] / fastest[1][measure]:.2f} "
                f"({fastest[4]['scenario']} / {fastest[1]['scenario']})"
            )
    for r in results:
        if "first_batch_setting" in r:
            shared = r["shared_from_s"]
            print(
                f"{r['scenario']}, {r['partitions']} partitions: {fmt(r['records_per_s'])} records/s, "
                f"first batch at {r['first_batch_start_s']:.1f} s, {fmt(r['first_batch_ms'])} ms"
                + (f", more than one consumer's records from {shared:.1f} s" if shared is not None else "")
            )
    baseline = next((r for r in results if r["scenario"].startswith("idle) no query")), None)
    for r in results:
        if baseline and r["scenario"].startswith("idle)") and r is not baseline:
            total = r["core_share_pct"]
            added = total - baseline["core_share_pct"]
            jit = r["core_share_pct_by_thread"].get("JIT compiler", 0.0)
            print(
                f"{r['scenario']}: {total:.2f}% of a core, {added:.2f}% over the JVM with no query, "
                f"{total - jit:.2f}% without the JIT compiler"
            )
    groups = [("e", [r for r in results if "strategy" in r])]
    for manager in ("default", "abortable"):
        on_s3 = [r for r in results if r.get("checkpoint_manager") == manager]
        groups.append((f"f, checkpoint on S3, {manager} checkpoint manager", on_s3))
    for label, group in groups:
        by_strategy = {r.get("strategy", r.get("strategy_on_s3")): r for r in group}
        for strategy, r in by_strategy.items():
            cost = r["records_per_s"] / by_strategy["none"]["records_per_s"]
            print(
                f"{label} {strategy}: {cost:.2f} of none's throughput, batch p50 {fmt(r['batch_ms_p50'])} ms"
            )
            for origin, per_batch in r.get("s3_requests_per_batch", {}).items():
                print(f"    {origin}: {per_batch:.1f} requests a batch {r['s3_requests'][origin]}")
