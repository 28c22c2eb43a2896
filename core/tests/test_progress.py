"""Progress on the job page: points from report_progress samples or step lines,
step N of M, steps/s, time since the last progress, the loss chart's geometry."""

from core.progress import (
    ProgressPoint,
    RestartMark,
    loss_chart,
    point_from_sample,
    points_from_log,
    sparkline,
    summarize,
)

LOG = """\
2026-11-29T10:00:00Z step=10 rank=0 loss=2.5 step_time=0.5
2026-11-29T10:00:00Z step=10 rank=1 loss=2.5 step_time=0.5
a traceback line without a time
[2026-11-29 10:00:05,000] INFO Step 20/500 loss 2.0
2026-11-29T10:00:10Z iteration 30 of 500 lr 0.1 loss: 1.5e+00 val_loss=9
"""


def test_step_lines_give_points_with_their_loss_and_the_total():
    points, total = points_from_log(1, LOG.splitlines())
    assert [(p.step, p.loss) for p in points] == [(10, 2.5), (20, 2.0), (30, 1.5)]
    assert points[1].at - points[0].at == 5 and total == 500


def test_a_sample_of_any_kept_shape_is_a_point():
    assert point_from_sample(2, [100.0, 7]) == (ProgressPoint(2, 100.0, 7, None), None)
    assert point_from_sample(2, [100.0, 7, 0.5]) == (ProgressPoint(2, 100.0, 7, 0.5), None)
    assert point_from_sample(2, [100.0, 7, None, 900]) == (ProgressPoint(2, 100.0, 7, None), 900)


def test_steps_per_second_is_over_the_last_minute_of_the_newest_attempt():
    points = [ProgressPoint(1, t, t * 2) for t in range(0, 200, 10)]  # 2 steps/s
    points += [ProgressPoint(2, 300 + t, 100 + t) for t in range(0, 100, 10)]  # resumed at 100: 1 step/s
    s = summarize(points, now=420.0, total=1000)
    assert (s.step, s.total, s.steps_per_s, s.since_last, s.attempt) == (190, 1000, 1.0, 30.0, 2)


def test_one_point_has_no_rate_and_none_has_no_summary():
    s = summarize([ProgressPoint(1, 10.0, 5)], now=12.5)
    assert s is not None and s.steps_per_s is None and s.since_last == 2.5
    assert summarize([], now=1.0) is None


def test_the_chart_spans_the_steps_and_losses_and_marks_each_restart_where_it_resumed():
    points = [
        ProgressPoint(1, 0, 0, 4.0),
        ProgressPoint(1, 10, 100, 2.0),
        ProgressPoint(1, 20, 150, 1.5),
        ProgressPoint(2, 40, 100, 2.0),
        ProgressPoint(2, 50, 200, 0.0),
    ]
    chart = loss_chart(points, [RestartMark(2, "NCCL_ERROR", failed_at_step=150), RestartMark(3, "OOM")], 200, 40)
    assert chart is not None and (chart.first_step, chart.last_step, chart.min_loss, chart.max_loss) == (0, 200, 0, 4)
    assert chart.lines == ("0.0,0.0 100.0,20.0 150.0,25.0", "100.0,20.0 200.0,40.0")
    [marker] = chart.markers  # attempt 3 reported nothing yet: no place to mark
    assert (marker.x, marker.step, marker.cause, marker.steps_lost) == (100.0, 100, "NCCL_ERROR", 50)


def test_no_chart_without_two_losses():
    assert loss_chart([ProgressPoint(1, 0, 0, 1.0), ProgressPoint(1, 1, 1)], [], 10, 10) is None


def test_the_sparkline_is_thinned_to_its_bound_and_says_the_trend_in_words():
    pts = [ProgressPoint(1 if i < 60 else 2, 1000.0 + i, i * 10, 3.0 - i / 50) for i in range(100)]
    s = sparkline(pts, 60, 16, total=2000, max_points=20)
    coords = [tuple(map(float, xy.split(","))) for xy in s.points.split()]
    assert len(coords) == 20
    assert coords[0] == (0.0, 0.0) and coords[-1] == (60.0, 16.0)  # the largest loss on top, the newest at the right
    assert (s.step, s.trend) == (990, "falling")
    assert s.words == "Loss falling from 3 to 1.02, step 990 of 2000"


def test_a_sparkline_rising_or_flat_says_so_and_needs_two_losses():
    rising = [ProgressPoint(1, 10.0 + i, i, 1.0 + i) for i in range(3)]
    assert sparkline(rising, 60, 16).trend == "rising"
    flat = [ProgressPoint(1, 10.0 + i, i, 2.0 + i * 0.001) for i in range(3)]
    assert sparkline(flat, 60, 16).words == "Loss flat from 2 to 2, step 2"
    assert sparkline([ProgressPoint(1, 1.0, 1, 1.0), ProgressPoint(1, 2.0, 2, None)], 60, 16) is None
