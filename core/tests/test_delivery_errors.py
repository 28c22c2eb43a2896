import pytest

from core.delivery_errors import is_failing, readable_error

REFUSED = (
    "could not connect: HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /hook "
    "(Caused by NewConnectionError(\"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new "
    'connection: [Errno 111] Connection refused"))'
)


@pytest.mark.parametrize(
    "raw, readable",
    [
        (REFUSED, "could not connect: connection refused by 127.0.0.1:9"),
        (
            "HTTPSConnectionPool(host='hooks.example-receiver.com', port=443): Max retries exceeded with url: /s/T0 "
            "(Caused by NewConnectionError: Failed to establish a new connection: [Errno 111] Connection refused)",
            "connection refused by hooks.example-receiver.com:443",
        ),
        (
            "could not connect: HTTPSConnectionPool(host='x.test', port=443): Max retries exceeded with url: / (Caused by "
            "NameResolutionError(\"<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to resolve 'x.test' "
            '([Errno -2] Name or service not known)"))',
            "could not connect: could not resolve x.test",
        ),
        (
            "could not connect: HTTPSConnectionPool(host='h.test', port=8443): Max retries exceeded with url: / (Caused by "
            "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed')))",
            "could not connect: h.test:8443 presented a TLS certificate that is not trusted",
        ),
        (
            "could not connect: HTTPConnectionPool(host='::1', port=80): Max retries exceeded with url: / (Caused by "
            "ProtocolError('Connection aborted.', RemoteDisconnected('Remote end closed connection without response')))",
            "could not connect: [::1]:80 closed the connection without answering",
        ),
        (
            "could not connect: HTTPConnectionPool(host='10.0.0.1', port=80): Read timed out. (read timeout=10)",
            "could not connect: 10.0.0.1:80 did not answer in time",
        ),
        (
            "could not connect: HTTPConnectionPool(host='h', port=1): something new",
            "could not connect: could not reach h:1",
        ),
    ],
)
def test_a_connection_pool_repr_becomes_a_sentence_with_cause_and_address(raw, readable):
    assert readable_error(raw) == readable
    assert readable_error(readable) == readable  # applying it twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "",
        "HTTP 404 from hooks.example.com: no hook",
        "timed out after 10 s (ReadTimeout)",
        "A Connection error occurred sending JSON notification to 127.0.0.1.",
    ],
)
def test_text_without_a_pool_repr_is_left_alone(text):
    assert readable_error(text) == text


@pytest.mark.parametrize(
    "statuses, failing",
    [
        (["failed", "failed", "failed"], True),
        (["failed", "failed", "failed", "sent"], True),
        (["failed", "failed"], False),  # too few to call it an outage
        (["sent", "failed", "failed", "failed"], False),  # the newest got through
        ([], False),
    ],
)
def test_a_channel_is_failing_after_a_run_of_failures(statuses, failing):
    assert is_failing(statuses, 3) is failing
