from __future__ import annotations

import copy
import json
from typing import Any

from spark_kafka_share import ShareGroupMember, ShareGroupState, SharePartitionState, TopicPartition

DESCRIBED: dict[str, Any] = {
    "groupId": "orders-processor",
    "exists": True,
    "state": "Stable",
    "members": [
        {
            "memberId": "m1",
            "clientId": "kafka-share-orders-processor-1a2b3c4d",
            "host": "/127.0.0.1",
            "assignment": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}],
        }
    ],
    "partitions": [
        {"topic": "orders", "partition": 0, "startOffset": 10, "lag": 5},
        {"topic": "orders", "partition": 1, "startOffset": 0, "lag": 7},
    ],
}


def test_from_json_reads_the_jvm_description() -> None:
    assert ShareGroupState.from_json(json.dumps(DESCRIBED)) == ShareGroupState(
        group_id="orders-processor",
        exists=True,
        state="Stable",
        members=[
            ShareGroupMember(
                member_id="m1",
                client_id="kafka-share-orders-processor-1a2b3c4d",
                host="/127.0.0.1",
                assignment=[TopicPartition("orders", 0), TopicPartition("orders", 1)],
            )
        ],
        partitions=[SharePartitionState("orders", 0, 10, 5), SharePartitionState("orders", 1, 0, 7)],
    )


def test_total_lag_adds_up_the_partitions() -> None:
    assert ShareGroupState.from_json(json.dumps(DESCRIBED)).total_lag == 12


def test_total_lag_is_unknown_if_a_partition_lag_is() -> None:
    described = copy.deepcopy(DESCRIBED)
    described["partitions"][1]["lag"] = None
    assert ShareGroupState.from_json(json.dumps(described)).total_lag is None


def test_a_group_that_does_not_exist() -> None:
    state = ShareGroupState.from_json(
        '{"state":null,"groupId":"g","exists":false,"members":[],"partitions":[]}'
    )
    assert state == ShareGroupState("g", False, None, [], [])
    assert state.total_lag == 0
