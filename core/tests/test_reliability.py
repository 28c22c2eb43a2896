"""A workspace's reliability figures: restarts per bucket and cause, counts by
node and error code, the period selector, and bar geometry."""

from core.reliability import PERIODS, RestartSeen, bars, buckets, count_by, in_period, parse_period

NOW = 1_000_000.0
H = 3600


def seen(i, ago, code="NCCL_ERROR", family="", node="node-a"):
    return RestartSeen(i, job_id=1, at=NOW - ago, error_code=code, family=family, node=node)


def test_the_period_defaults_to_7d_and_a_refused_value_says_which_are_accepted():
    assert parse_period(None) == ("7d", None) and parse_period("") == ("7d", None)
    assert parse_period("24h") == ("24h", None)
    key, message = parse_period("1y")
    assert key == "7d" and message == "period '1y' is not one of 24h, 7d, 30d; showing 7d."


def test_a_day_is_24_hourly_buckets_ending_now_and_each_restart_lands_in_its_hour():
    restarts = [seen(1, 0.5 * H), seen(2, 0.7 * H, code="OOM"), seen(3, 23.5 * H), seen(4, 25 * H)]
    out = buckets(restarts, NOW, "24h")
    assert len(out) == 24 and out[-1].end == NOW and out[0].start == NOW - 24 * H
    assert out[-1].by_cause == {"NCCL_ERROR": 1, "OOM": 1}
    assert out[0].by_cause == {"NCCL_ERROR": 1}
    assert sum(b.total for b in out) == 3  # the one 25 h ago is outside


def test_a_restart_exactly_now_is_in_the_last_bucket_and_one_exactly_a_period_ago_is_out():
    out = buckets([seen(1, 0), seen(2, 7 * 86400)], NOW, "7d")
    assert len(out) == 7 and out[-1].total == 1 and sum(b.total for b in out) == 1


def test_the_cause_is_the_family_when_the_verdict_had_one_else_the_error_code():
    restarts = [seen(1, 10, code="NCCL_ERROR", family="nccl"), seen(2, 20, code="exit:1"), seen(3, 30, code="")]
    assert [r.cause for r in restarts] == ["nccl", "exit:1", "unknown"]


def test_counts_come_most_frequent_first_with_ties_by_name():
    restarts = [
        seen(1, 10, node="b"),
        seen(2, 20, node="a"),
        seen(3, 30, node="c"),
        seen(4, 40, node="c"),
        seen(5, 50, node=""),
    ]
    assert count_by(restarts, "node") == [("c", 2), ("a", 1), ("b", 1), ("unknown", 1)]
    assert count_by(restarts, "error_code") == [("NCCL_ERROR", 5)]


def test_in_period_keeps_the_period_oldest_first():
    assert [r.record_id for r in in_period([seen(1, 10), seen(2, 40 * 86400), seen(3, 20)], NOW, "30d")] == [3, 1]


def test_bars_scale_to_the_largest_and_a_zero_stays_flat():
    out = bars([0, 2, 4], width=300, height=100)
    assert [(b.x, b.height, b.y, b.value) for b in out] == [(0, 0, 100, 0), (100, 50, 50, 2), (200, 100, 0, 4)]
    assert all(b.width == 99 for b in out)
    assert [b.height for b in bars([0, 0], 10, 10)] == [0, 0] and bars([], 10, 10) == []


def test_every_period_has_whole_buckets():
    assert all(span % size == 0 for span, size in PERIODS.values())


def test_stacked_bars_put_the_most_frequent_cause_at_the_bottom_in_its_own_colour():
    from core.reliability import stacked_bars

    restarts = [seen(1, 0.5 * H, code="OOM"), seen(2, 0.6 * H), seen(3, 0.7 * H), seen(4, 1.5 * H)]
    out = buckets(restarts, NOW, "24h")
    causes = [c for c, _ in count_by(restarts, "cause")]
    assert causes == ["NCCL_ERROR", "OOM"]
    columns = stacked_bars(out, causes, width=240, height=90)
    assert len(columns) == 24 and all(not c for c in columns[:22])
    nccl, oom = columns[-1]
    assert (nccl.cause, nccl.count, nccl.colour, nccl.y, nccl.height) == ("NCCL_ERROR", 2, 0, 30.0, 60.0)
    assert (oom.cause, oom.count, oom.colour, oom.y, oom.height) == ("OOM", 1, 1, 0.0, 30.0)
    [one] = columns[-2]
    assert (one.cause, one.height, one.x, one.width) == ("NCCL_ERROR", 30.0, 220.0, 9.0)
