"""Reading a real torchft Lighthouse's /status fragment (fixtures/lighthouse/README.md says
how each was captured), and the rule for a group that never rejoins."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.lighthouse import group_of_replica, parse_status, rejoin_overdue

FIXTURES = Path(__file__).parent / "fixtures" / "lighthouse"


def page(name: str) -> str:
    return (FIXTURES / f"{name}.html").read_text()


def test_two_groups_in_one_quorum_with_their_steps():
    status = parse_status(page("status_two"))
    assert status.quorum_id == 2
    assert status.groups == (0, 1)
    assert [m.step for m in status.members] == [13, 13] and {m.world_size for m in status.members} == {1}
    assert [h.group for h in status.heartbeats] == [0, 1] and not any(h.stale for h in status.heartbeats)
    assert status.recovering() == ()
    assert status.to_dict()["steps"] == {"0": 13, "1": 13}


def test_after_a_kill_the_quorum_has_one_group_and_the_dead_heartbeat_is_old():
    status = parse_status(page("status_one"))
    assert status.quorum_id == 3 and status.groups == (0,) and status.step_of(0) == 20
    dead = [h for h in status.heartbeats if h.group == 1]
    assert dead and dead[0].stale and dead[0].seen_seconds_ago == pytest.approx(2.522978418)
    assert status.recovering() == ()  # stale: dead, not joining
    assert "need min_replicas 1" in status.next_quorum


@pytest.mark.parametrize(
    "garbage", ["", "<html>", "Current quorum_id: x", b'\xff\xfe<div class="member"><b></b></div>', "a" * 3_000_000]
)
def test_anything_else_parses_to_an_empty_status_without_raising(garbage):
    status = parse_status(garbage)
    assert status.groups == () and status.heartbeats == ()


def test_a_group_is_the_trailing_digits_of_the_replica_prefix():
    assert group_of_replica("vigil_group_12:e4b34c63-3125") == 12
    assert group_of_replica("trainer:e4b34c63") is None


def test_a_restarted_group_not_back_after_the_limit_is_overdue():
    status = parse_status(page("status_one"))  # group 0 alone
    assert rejoin_overdue({1: 1000.0}, status, now=1100.0, limit=300) == ()
    assert rejoin_overdue({1: 1000.0}, status, now=1400.5, limit=300) == ((1, 400.5),)
    assert rejoin_overdue({0: 1000.0}, status, now=5000.0, limit=300) == ()  # back in the quorum
