"""A node's reputation record drains it only with corroboration (core.reputation.isolation_decision)."""

from core.isolation import POLICY, Action
from core.reputation import NodeFaultSeen, isolation_decision

NOW = 1_000_000.0


def faults(*jobs_and_people):
    return [NodeFaultSeen("n3", job, "NODE_LOST", True, NOW - 60, who) for job, who in jobs_and_people]


def test_a_record_over_the_threshold_from_two_submitters_isolates_the_node():
    d = isolation_decision(
        faults((1, 10), (2, 10), (3, 20)), "n3", schedulable=True, automatic_isolations_at=[], now=NOW
    )
    assert d.action == Action.ISOLATE
    assert d.evidence == (
        "node n3's record: 3 retryable faults in the last 24 h across 3 jobs: NODE_LOST x3, from 2 submitters"
    )


def test_one_submitters_jobs_over_the_threshold_only_propose_and_below_it_nothing_happens():
    one = isolation_decision(
        faults((1, 10), (2, 10), (3, 10)), "n3", schedulable=True, automatic_isolations_at=[], now=NOW
    )
    assert one.action == Action.PROPOSE and "one person's jobs never isolate" in one.evidence
    below = isolation_decision(faults((1, 10), (2, 20)), "n3", schedulable=True, automatic_isolations_at=[], now=NOW)
    assert below.action == Action.NOTHING


def test_an_isolated_node_is_left_alone_and_automatic_isolations_are_rate_limited():
    record = faults((1, 10), (2, 10), (3, 20))
    gone = isolation_decision(record, "n3", schedulable=False, automatic_isolations_at=[], now=NOW)
    assert gone.action == Action.NOTHING
    busy = [NOW - 10] * POLICY.max_automatic
    limited = isolation_decision(record, "n3", schedulable=True, automatic_isolations_at=busy, now=NOW)
    assert limited.action == Action.PROPOSE and "isolated automatically" in limited.evidence
