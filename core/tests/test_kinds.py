"""Three kinds of verdict from the corpus's own counts (issue 26)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.classify import Classification, ErrorSource
from core.kinds import (
    AMBIGUOUS_SHARE,
    COUNTS_PATH,
    MIN_REPORTS,
    Kind,
    counted_key,
    evidence_keys,
    reports_of,
    verdict_of,
)


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
    # service-unavailable (5xx from a service): its counts are the committed table's, read from
    # the file rather than pinned (a new training report changes them), and transient in all but
    # a few of them (below one in five against)
    row = json.loads(COUNTS_PATH.read_text(encoding="utf-8"))["rules"]["service-unavailable"]
    retryable, reports = reports_of("service-unavailable")
    assert (retryable, reports) == (row["retryable"], row["reports"])
    assert reports > 0 and (reports - retryable) / reports < AMBIGUOUS_SHARE
    assert verdict_of(_c(True, "service-unavailable")).kind == Kind.TRANSIENT


def _log(evidence: str, retryable: bool = False, rule: str = "python-exception") -> Classification:
    return Classification(retryable, rule, "E", "msg", ErrorSource.LOG, "cause", "next", False, evidence=evidence)


def test_evidence_is_keyed_from_the_line_to_the_rule():
    keys = [k for k, _ in evidence_keys(_log("pip._vendor.urllib3.exceptions.ReadTimeoutError: Read timed out."))]
    assert keys == [
        "line:pip._vendor.urllib#.exceptions.readtimeouterror: read timed out.",  # digits stripped as the guard does
        "exception:urllib3.exceptions.ReadTimeoutError",  # the vendored copy is the same class
        "exception:ReadTimeoutError",
        "family:network",
        "rule:python-exception",
    ]
    keys = [k for k, _ in evidence_keys(_log("ConnectionResetError: [Errno 104] Connection reset by peer"))]
    assert keys[1:] == ["errno:104", "exception:ConnectionResetError", "family:network", "rule:python-exception"]
    keys = [k for k, _ in evidence_keys(_log("requests.exceptions.HTTPError: 503 Server Error: Service Unavailable"))]
    assert keys[1:3] == ["http:503", "exception:requests.exceptions.HTTPError"] and "family:network" in keys
    assert "family:refused" in [k for k, _ in evidence_keys(_log("HTTPError: 404 Client Error: Not Found for url"))]
    assert "family:programming" in [k for k, _ in evidence_keys(_log("TypeError: 'NoneType' object is not callable"))]


@pytest.mark.parametrize(
    "line, family",
    [
        # ssl's own classes for a TLS connection that closed or broke; not a certificate's
        ("ssl.SSLZeroReturnError: TLS/SSL connection has been closed (EOF) (_ssl.c:1131)", "network"),
        ("ssl.SSLEOFError: EOF occurred in violation of protocol (_ssl.c:2426)", "network"),
        ("ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", ""),
        # botocore's (one of the errors it retries itself), azure-core's, google-auth's, s3transfer's
        (
            "botocore.exceptions.ConnectionClosedError: Connection was closed before we received a valid "
            'response from endpoint URL: "https://bucket.s3.amazonaws.com/x".',
            "network",
        ),
        ("azure.core.exceptions.ServiceResponseError: The read operation timed out", "network"),
        ("google.auth.exceptions.TransportError: Failed to retrieve the token", "network"),
        ("s3transfer.exceptions.RetriesExceededError: Max Retries Exceeded", "network"),
        # an RPC's deadline in TensorFlow's words (google-api-core's "DeadlineExceeded: 504" is
        # service-timeout's, a signature)
        ("tensorflow.python.framework.errors_impl.DeadlineExceededError: Deadline Exceeded", "network"),
    ],
)
def test_library_classes_that_name_a_network_failure_are_of_the_network_family(line, family):
    keys = [k for k, _ in evidence_keys(_log(line))]
    assert [k for k in keys if k.startswith("family:")] == ([f"family:{family}"] if family else [])


def test_a_chained_exceptions_root_cause_is_keyed_after_its_own_line():
    # a generic exception raised while handling a TLS connection the peer closed (ssl's text)
    c = replace(
        _log("RuntimeError: could not fetch shard 7"),
        root_cause="ssl.SSLZeroReturnError: TLS/SSL connection has been closed (EOF) (_ssl.c:1131)",
    )
    assert [k for k, _ in evidence_keys(c)] == [
        "line:runtimeerror: could not fetch shard #",
        "exception:ssl.SSLZeroReturnError",
        "exception:SSLZeroReturnError",
        "family:network",
        "rule:python-exception",
    ]
    keyed = {"family:network": (9, 10), "exception:KeyError": (0, 4)}
    v = verdict_of(c, {"python-exception": (1, 20)}, keyed)
    assert (v.kind, v.basis) == (Kind.AMBIGUOUS, "network and timeout errors (its exception chain's root cause)")
    # the last exception's own keys come first: a bug raised while handling it stays the bug
    bug = replace(_log("KeyError: 'shard'"), root_cause=c.root_cause)
    assert verdict_of(bug, {"python-exception": (1, 20)}, keyed).kind == Kind.DETERMINISTIC


def test_a_generic_class_says_nothing_by_itself_nor_does_a_bare_timeout_word():
    keys = [k for k, _ in evidence_keys(_log("RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x2 and 6x64)"))]
    assert keys == [
        "line:runtimeerror: mat# and mat# shapes cannot be multiplied (#x# and #x#)",
        "rule:python-exception",
    ]
    keys = [
        k for k, _ in evidence_keys(_log("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)"))
    ]
    assert keys[1:] == ["rule:python-exception"]
    assert [k for k, _ in evidence_keys(_log("socket.timeout: timed out"))][1:3] == [
        "exception:socket.timeout",
        "exception:timeout",
    ]


def test_only_log_evidence_is_keyed_finer():
    user = Classification(
        True, "user-keyword", "E", "m", ErrorSource.USER_KEYWORD, "c", "n", False, evidence="TypeError: x"
    )
    backend = Classification(True, "preempted", "E", "m", ErrorSource.BACKEND, "c", "n", False, evidence="Preempted")
    assert [k for k, _ in evidence_keys(user)] == ["rule:user-keyword"]
    assert [k for k, _ in evidence_keys(backend)] == ["rule:preempted"]


def test_a_finer_key_with_enough_reports_decides_and_names_itself():
    c = _log("ConnectionResetError: [Errno 104] Connection reset by peer")
    rules = {"python-exception": (1, 15)}  # the rule alone: deterministic
    assert verdict_of(c, rules, {}).kind == Kind.DETERMINISTIC
    keyed = {"exception:ConnectionResetError": (3, 7), "family:network": (21, 23)}
    v = verdict_of(c, rules, keyed)  # the class is finer than the family and has MIN_REPORTS
    assert v.kind == Kind.AMBIGUOUS
    assert v.reason == "ambiguous: transient in 3 of 7 public reports of ConnectionResetError; retrying once to tell"


def test_below_the_minimum_a_finer_key_leaves_it_to_the_coarser():
    c = _log("ConnectionResetError: [Errno 104] Connection reset by peer")
    keyed = {"exception:ConnectionResetError": (MIN_REPORTS - 1, MIN_REPORTS - 1), "family:network": (1, 20)}
    v = verdict_of(c, {"python-exception": (10, 10)}, keyed)
    assert (v.kind, v.retryable_reports, v.reports) == (Kind.DETERMINISTIC, 1, 20)
    assert v.reason == "deterministic: transient in 1 of 20 public reports of network and timeout errors"
    v = verdict_of(c, {"python-exception": (1, 15)}, {"family:network": (1, 2)})  # nothing finer has enough
    assert v.reason == "deterministic: transient in 1 of 15 public reports"


def test_the_committed_table_counts_finer_keys_from_every_rule():
    # network errors are decided by many rules (service-timeout, connection-dropped, ...), and the
    # public reports of them go both ways
    c = _log("requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('closed'))")
    v = verdict_of(c)
    assert v.kind == Kind.AMBIGUOUS and v.basis and v.reports >= MIN_REPORTS
    assert 0 < v.retryable_reports < v.reports


def test_an_exit_status_verdict_is_keyed_by_the_last_error_line_of_its_tail():
    from core.classify import FailureInput, classify_failure

    tail = "Downloading model...\nrequests.exceptions.httperror 503 server error for url http://x/y\n 14%|#    | 3/20\n"
    c = classify_failure(FailureInput(exit_code=1, signal=None, log_tail=tail))
    assert c.rule == "crashed-with-exit-code" and not c.evidence
    keys = evidence_keys(c)
    assert [k for k, _ in keys][1:] == ["http:503", "family:network", "rule:crashed-with-exit-code"]
    v = verdict_of(c, {"crashed-with-exit-code": (1, 20)}, {"family:network": (21, 24)})
    assert v.kind == Kind.AMBIGUOUS
    assert v.reason.startswith(
        "ambiguous: transient in 21 of 24 public reports of network and timeout errors "
        "(the log's last error line: requests.exceptions.httperror 503 server error"
    )
    plain = classify_failure(FailureInput(exit_code=1, signal=None, log_tail="loading\ndone\n"))
    assert [k for k, _ in evidence_keys(plain)] == ["rule:crashed-with-exit-code"]


def test_the_counted_key_is_the_finest_with_enough_reports_else_the_rule():
    c = Classification(
        True, "python-exception", "E", "m", ErrorSource.LOG, "c", "n", False,
        evidence="requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='hub'): Read timed out.",
    )  # fmt: skip
    keys = [key for key, _ in evidence_keys(c)]
    assert keys[1:3] == ["exception:requests.exceptions.ReadTimeout", "exception:ReadTimeout"]
    enough, few = (2, MIN_REPORTS), (1, MIN_REPORTS - 1)
    assert counted_key(c, {keys[1]: few, keys[2]: enough}) == ("exception:ReadTimeout", "ReadTimeout")
    assert counted_key(c, {keys[1]: few}) == ("rule:python-exception", "")
    # and the verdict is counted by that key's reports
    assert verdict_of(c, counts={}, keyed={keys[2]: enough}).basis == "ReadTimeout"
