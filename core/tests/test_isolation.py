"""core.isolation: one submitter's C4D Errors never isolate a shared node; Errors of
several submitters' jobs do, at most a few times an hour; the rest are proposals."""

from core.isolation import POLICY, Action, NodeErrorSeen, decide, nodes_to_avoid

NOW = 100_000.0


def seen(job, who, ws=1, node="gpu-1", ago=10.0):
    return NodeErrorSeen(node, job, who, ws, NOW - ago)


def test_one_jobs_error_is_only_a_proposal():
    d = decide("gpu-1", [seen(1, 7)], schedulable=True, automatic_isolations_at=[], now=NOW)
    assert d.action == Action.PROPOSE and "1 job of 1 submitter" in d.evidence


def test_many_jobs_of_one_submitter_are_still_only_a_proposal():
    errors = [seen(j, 7, ws=j) for j in range(1, 10)]
    d = decide("gpu-1", errors, schedulable=True, automatic_isolations_at=[], now=NOW)
    assert d.action == Action.PROPOSE and "9 jobs of 1 submitter" in d.evidence


def test_jobs_of_two_submitters_isolate():
    d = decide("gpu-1", [seen(1, 7), seen(2, 8, ws=2)], schedulable=True, automatic_isolations_at=[], now=NOW)
    assert d.action == Action.ISOLATE and "2 jobs of 2 submitters in 2 workspaces" in d.evidence


def test_errors_on_other_nodes_or_outside_the_window_do_not_count():
    errors = [seen(1, 7), seen(2, 8, node="gpu-2"), seen(3, 9, ago=POLICY.window + 1)]
    assert decide("gpu-1", errors, schedulable=True, automatic_isolations_at=[], now=NOW).action == Action.PROPOSE


def test_the_rate_limit_turns_a_corroborated_error_into_a_proposal():
    errors = [seen(1, 7), seen(2, 8)]
    recent = [NOW - 60.0] * POLICY.max_automatic
    d = decide("gpu-1", errors, schedulable=True, automatic_isolations_at=recent, now=NOW)
    assert d.action == Action.PROPOSE and "isolated automatically" in d.evidence
    old = [NOW - POLICY.rate_window - 1] * 10
    assert decide("gpu-1", errors, schedulable=True, automatic_isolations_at=old, now=NOW).action == Action.ISOLATE


def test_nothing_to_do_without_a_node_or_on_a_node_already_out_of_service():
    assert decide("", [seen(1, 7)], schedulable=True, automatic_isolations_at=[], now=NOW).action == Action.NOTHING
    errors = [seen(1, 7), seen(2, 8)]
    assert decide("gpu-1", errors, schedulable=False, automatic_isolations_at=[], now=NOW).action == Action.NOTHING


def test_a_job_avoids_its_own_suspects_only_while_another_node_is_free():
    assert nodes_to_avoid(["x"], ["a"], ["a", "b"]) == ["x", "a"]
    assert nodes_to_avoid([], ["a"], ["a"]) == []  # nowhere else: it retries there
    assert nodes_to_avoid(["a"], ["a"], ["b"]) == ["a"]
