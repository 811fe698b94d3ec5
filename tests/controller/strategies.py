"""Hypothesis strategies for controller commands and states."""

from __future__ import annotations

from hypothesis import strategies as st

from multiraft.controller import (
    AllocateProducerIds,
    AlterClusterConfigs,
    AlterTopicConfigs,
    Command,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    NodeInfo,
    NodeState,
    RegisterNode,
    SetNodeState,
    SetPartitionReplicas,
    validate_topic_configs,
)

from ._helpers import node

I64 = st.integers(-(2**63), 2**63 - 1)
NODE_IDS = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=30)
NODE_LISTS = st.lists(NODE_IDS, max_size=5).map(tuple)
CONFIG_MAPS = st.dictionaries(TEXT, TEXT, max_size=4)
CAPACITY = st.floats(allow_nan=False, allow_infinity=False)


def node_infos(ids: st.SearchStrategy[int] = NODE_IDS) -> st.SearchStrategy[NodeInfo]:
    return st.builds(NodeInfo, ids, TEXT, TEXT, TEXT, TEXT, CAPACITY, st.sampled_from(NodeState), TEXT)


def any_commands() -> st.SearchStrategy[Command]:
    """Every command type with any well-typed field values, valid or not."""
    assignments = st.lists(st.tuples(NODE_LISTS, NODE_IDS), max_size=4).map(tuple)
    return st.one_of(
        st.builds(RegisterNode, node_infos()),
        st.builds(CreateTopic, TEXT, CONFIG_MAPS, assignments, st.booleans(), I64),
        st.builds(DeleteTopic, TEXT, st.booleans()),
        st.builds(AlterTopicConfigs, TEXT, CONFIG_MAPS, st.lists(TEXT, max_size=3).map(tuple)),
        st.builds(
            SetPartitionReplicas,
            TEXT,
            I64,
            NODE_LISTS,
            NODE_LISTS,
            NODE_IDS,
            st.none() | NODE_LISTS,
            st.none() | NODE_LISTS,
        ),
        st.builds(SetNodeState, NODE_IDS, st.sampled_from(NodeState)),
        st.builds(AllocateProducerIds, I64),
        st.builds(CreatePartitions, TEXT, I64, assignments),
        st.builds(AlterClusterConfigs, CONFIG_MAPS, st.lists(TEXT, max_size=3).map(tuple)),
    )


# A small world, so that random commands often succeed and interact: nodes 1..6, a few topic names. Values
# are mostly valid, sometimes not, so that both outcomes of every command are exercised.
SMALL_NODES = st.integers(1, 6)
TOPIC_NAMES = st.sampled_from(["orders"] * 4 + ["clicks"] * 2 + ["__internal", "bad name"])
_GOOD_CONFIGS = {
    "retention.ms": ["-1", "1000", " 86400000 "],
    "segment.bytes": ["4096", "1073741824"],
    "max.message.bytes": ["2048"],
    "cleanup.policy": ["delete"],
}
_BAD_CONFIGS = {"cleanup.policy": ["compact"], "segment.ms": ["0"], "no.such.key": ["1"], "retention.bytes": ["x"]}
_CONFIG_KEYS = sorted({*_GOOD_CONFIGS, *_BAD_CONFIGS})
_GOOD = st.dictionaries(st.sampled_from(sorted(_GOOD_CONFIGS)), st.just(""), max_size=3).flatmap(
    lambda d: st.fixed_dictionaries({k: st.sampled_from(_GOOD_CONFIGS[k]) for k in d})
)
SMALL_CONFIGS = st.one_of(
    _GOOD,
    _GOOD,
    _GOOD,
    st.dictionaries(st.sampled_from(sorted(_BAD_CONFIGS)), st.just(""), min_size=1, max_size=2).flatmap(
        lambda d: st.fixed_dictionaries({k: st.sampled_from(_BAD_CONFIGS[k]) for k in d})
    ),
)
# Mostly distinct voters and disjoint learners; sometimes anything.
_SPLITS = st.permutations(range(1, 7)).flatmap(
    lambda order: st.tuples(st.integers(1, 4), st.integers(0, 2)).map(
        lambda sizes: (tuple(order[: sizes[0]]), tuple(order[sizes[0] : sizes[0] + sizes[1]]))
    )
)
_ANY_NODES = st.lists(st.integers(0, 7), max_size=4).map(tuple)
_ASSIGNMENTS = st.one_of(_SPLITS, _SPLITS, _SPLITS, st.tuples(_ANY_NODES, _ANY_NODES))


def _small_node(node_id: int, rack: str, capacity: float, state: NodeState, port: int, host: str) -> NodeInfo:
    return NodeInfo(
        node_id, f"n{node_id}:{port}", f"n{node_id}:{port + 1}", f"n{node_id}:{port + 2}", rack, capacity, state, host
    )


def _with_leader(split: tuple[tuple[int, ...], tuple[int, ...]]) -> st.SearchStrategy[tuple[tuple[int, ...], int]]:
    replicas = split[0]
    leader = st.sampled_from(replicas) if replicas and split[1] != (0,) else SMALL_NODES
    return st.tuples(st.just(replicas), leader)


def small_commands() -> st.SearchStrategy[Command]:
    """Commands in a small world of nodes 1..6 and a few topics: a mix that succeeds and fails."""
    nodes = st.builds(
        _small_node,
        SMALL_NODES,
        st.sampled_from(["", "a", "b"]),
        st.sampled_from([1.0, 1.0, 2.0, 0.0]),
        st.sampled_from([NodeState.ACTIVE, NodeState.ACTIVE, NodeState.DRAINING, NodeState.REMOVED]),
        st.sampled_from([9000, 9000, 70000]),
        st.sampled_from(["", "", "h1", "h2", "\n"]),
    )
    set_replicas = st.tuples(TOPIC_NAMES, st.integers(-1, 3), _ASSIGNMENTS, st.booleans()).flatmap(
        lambda t: st.builds(
            SetPartitionReplicas,
            st.just(t[0]),
            st.just(t[1]),
            st.just(t[2][0]),
            st.just(t[2][1]),
            st.sampled_from(t[2][0]) if t[2][0] and t[3] else SMALL_NODES,
        )
    )
    create_topic = st.tuples(TOPIC_NAMES, st.integers(0, 9)).flatmap(
        lambda t: st.builds(
            CreateTopic,
            st.just(t[0]),
            SMALL_CONFIGS,
            st.lists(_ASSIGNMENTS.flatmap(_with_leader), min_size=0 if t[1] == 0 else 1, max_size=4).map(tuple),
            st.just(t[0].startswith("__") != (t[1] == 1)),  # mostly the right flag for the name
            st.sampled_from([0] + [1_700_000_000_000] * 6 + [-1]),
        )
    )
    return st.one_of(
        st.builds(RegisterNode, nodes),
        create_topic,
        st.builds(DeleteTopic, TOPIC_NAMES, st.booleans()),
        st.builds(
            AlterTopicConfigs,
            TOPIC_NAMES,
            SMALL_CONFIGS,
            st.lists(st.sampled_from(_CONFIG_KEYS), max_size=2).map(tuple),
        ),
        set_replicas,
        st.builds(SetNodeState, st.integers(0, 7), st.sampled_from(NodeState)),
        st.builds(AllocateProducerIds, st.integers(-1, 5)),
        st.builds(
            CreatePartitions,
            TOPIC_NAMES,
            st.integers(0, 7),
            st.lists(_ASSIGNMENTS.flatmap(_with_leader), max_size=3).map(tuple),
        ),
        st.builds(
            AlterClusterConfigs,
            st.dictionaries(
                st.sampled_from(["log.retention.ms", "log.segment.bytes", "message.max.bytes", "no.such.key"]),
                st.sampled_from(["-1", "4096", "86400000", "x"]),
                max_size=2,
            ),
            st.lists(st.sampled_from(["log.retention.ms", "log.segment.bytes", "retention.ms"]), max_size=2).map(tuple),
        ),
    )


# A cluster of six nodes in two racks with one topic, then random commands.
BOOTSTRAP: tuple[Command, ...] = (
    *(RegisterNode(node(i, rack="ab"[i % 2])) for i in range(1, 7)),
    CreateTopic("orders", validate_topic_configs({}, creating=True), (((1, 2, 3), 1), ((2, 3, 4), 2), ((3, 4, 5), 3))),
)
LOGS = st.lists(small_commands(), min_size=5, max_size=40).map(lambda tail: (*BOOTSTRAP, *tail))
