"""Three kinds of verdict from the corpus's own counts (issue 26)."""

from __future__ import annotations

import pytest

from core.classify import Classification, ErrorSource
from core.kinds import Kind, reports_of, verdict_of


def _c(retryable: bool, rule: str = "some-rule") -> Classification:
    return Classification(retryable, rule, "E", "msg", ErrorSource.LOG, "cause", "next", False)


@pytest.mark.parametrize(
    "retryable, counts, kind",
    [
        (True, (23, 24), Kind.TRANSIENT),  # 1 in 24 against: below one in five
        (True, (6, 12), Kind.AMBIGUOUS),  # both ways
        (False, (1, 20), Kind.DETERMINISTIC),
        (False, (3, 12), Kind.AMBIGUOUS),  # one in four against
        (True, (0, 1), Kind.AMBIGUOUS),  # the reports go against the catalog: probe, do not flip
        (False, (4, 4), Kind.AMBIGUOUS),
        (True, (0, 0), Kind.TRANSIENT),  # no report: the catalog's verdict
        (False, (0, 0), Kind.DETERMINISTIC),
    ],
)
def test_the_kind_follows_the_public_reports(retryable, counts, kind):
    v = verdict_of(_c(retryable), {"some-rule": counts})
    assert v.kind == kind
    assert v.restarts is (kind != Kind.DETERMINISTIC)


def test_the_reason_says_the_kind_and_how_sure():
    v = verdict_of(_c(True), {"some-rule": (6, 12)})
    assert v.reason == "ambiguous: transient in 6 of 12 public reports; retrying once to tell"
    assert verdict_of(_c(False), {}).reason.startswith("deterministic: no public report")


def test_the_committed_table_is_read():
    # service-unavailable (5xx from a service) is transient in every training report
    retryable, reports = reports_of("service-unavailable")
    assert reports > 0 and retryable == reports
    assert verdict_of(_c(True, "service-unavailable")).kind == Kind.TRANSIENT
