"""Which rules an event matches, what the message says (plain, Markdown, Slack),
how failures are classified and what happens after each attempt."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from notifications.dispatch import plan_after_attempt
from notifications.matching import job_name_matches, rule_matches
from notifications.messages import EventInfo, compose, md_escape
from notifications.models import Delivery
from notifications.transports import (
    EmailTransport,
    InvalidChannelURL,
    SlackTransport,
    WebhookTransport,
    classify_status,
    status_from_apprise_logs,
    transport_for,
)


# --- matching (pure) -----------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern, name, expected",
    [
        ("", "anything", True),
        ("resnet-*", "resnet-ddp", True),
        ("resnet-*", "ResNet-DDP", True),
        ("RESNET-*", "resnet-ddp", True),
        ("resnet-*", "bert-large", False),
        ("*-ddp", "resnet-ddp", True),
        ("bert-??", "bert-xl", True),
        ("bert-??", "bert-xxl", False),
        ("llama-[78]b", "llama-7b", True),
        ("llama-[78]b", "llama-13b", False),
        ("resnet", "resnet-ddp", False),  # the whole name, not a substring
    ],
)
def test_job_patterns_are_case_insensitive_globs_over_the_whole_name(pattern, name, expected):
    assert job_name_matches(pattern, name) is expected


def test_a_rule_matches_only_its_event_types():
    assert rule_matches(["restart", "hang"], "", "hang", "any")
    assert not rule_matches(["restart", "hang"], "", "job_failed", "any")
    assert not rule_matches([], "", "restart", "any")


@pytest.mark.django_db
def test_events_reach_only_rules_matching_type_and_job(
    announce, loopback_allowed, http_sink, job, alice_ws, make_event, make_channel, make_rule
):
    from jobs.models import Job

    bert = Job.objects.create(workspace=alice_ws, display_name="BERT-large", job_type="PyTorchJob", user_command="x")
    restarts_of_resnet = make_rule(make_channel(http_sink.url + "/a", name="a"), ["restart"], pattern="resnet-*")
    hangs_anywhere = make_rule(make_channel(http_sink.url + "/b", name="b"), ["hang"])
    disabled = make_rule(make_channel(http_sink.url + "/c", name="c"), ["restart", "hang"], enabled=False)

    announce(make_event(job, type="restart").pk)
    announce(make_event(bert, type="restart").pk)
    announce(make_event(bert, type="hang", message="no progress for 600 s").pk)
    announce(make_event(job, type="decision", message="not notifiable").pk)

    deliveries = Delivery.objects.select_related("event__job", "rule")
    assert sorted((d.rule.name, d.event.job.display_name, d.event.type) for d in deliveries) == sorted(
        [
            (restarts_of_resnet.name, "resnet-ddp", "restart"),
            (hangs_anywhere.name, "BERT-large", "hang"),
        ]
    )
    assert not Delivery.objects.filter(matched_rules=disabled).exists()
    assert sorted(r.path for r in http_sink.requests) == ["/a", "/b"]


# --- messages (pure) -------------------------------------------------------------------


def _info(**overrides) -> EventInfo:
    fields: dict[str, Any] = dict(
        event_id=9,
        type="restart",
        type_label="Restart",
        level="warning",
        message="worker-1 exited with code 1; restarting the job",
        created_at=datetime(2026, 11, 30, 0, 0, tzinfo=timezone.utc),
        payload={"reason": "NCCL timeout is retryable"},
        attempt=2,
        instance="worker-1",
        job_id=7,
        job_name="bert_large*v2",
        job_status="Restarting",
        job_url="http://console.test/jobs/7/",
        workspace_slug="alice-lab",
        workspace_name="Alice Lab",
    )
    fields.update(overrides)
    return EventInfo(**fields)


def test_a_message_says_what_happened_to_which_job_why_and_links_the_job_page():
    message = compose(_info())
    assert message.title == "[Vigil] Restart: bert_large*v2 (#7)"
    assert message.text.splitlines() == [
        "Restart on job bert_large*v2 (#7) in workspace Alice Lab (warning).",
        "What happened: worker-1 exited with code 1; restarting the job",
        "Why: NCCL timeout is retryable",
        "Attempt 2, instance worker-1. Job status: Restarting.",
        "Job page: http://console.test/jobs/7/",
    ]


def test_without_a_reason_the_message_has_no_why_line():
    text = compose(_info(payload={})).text
    assert "Why:" not in text and "What happened:" in text


def test_markdown_escapes_what_would_change_a_names_meaning():
    assert md_escape("bert_large*v2 [x] <b>") == r"bert_large\*v2 \[x\] \<b\>"
    md = compose(_info()).markdown
    assert r"[bert_large\*v2 (#7)](http://console.test/jobs/7/)" in md


def test_slack_gets_mrkdwn_with_a_link_to_the_job_and_escaped_text():
    from apprise.plugins.slack import NotifySlack

    info = _info(job_name="bert_large-v2", message="loss <nan> & rising", payload={"reason": "NCCL timeout"})
    transport = SlackTransport("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#ops")
    title, body = transport.body(info)
    assert transport.body_format == "markdown"
    assert title == "[Vigil] Restart: bert_large-v2 (#7)"
    # What apprise's Slack service turns it into before posting:
    mrkdwn = NotifySlack._commonmark_to_slack(body)
    assert mrkdwn.splitlines() == [
        "*Restart* on job <http://console.test/jobs/7/|bert_large-v2 (#7)> in workspace Alice Lab (warning).",
        "",
        "What happened: loss &lt;nan&gt; &amp; rising",
        "",
        "Why: NCCL timeout",
        "",
        "Attempt 2, instance worker-1. Job status: Restarting.",
    ]


def test_a_test_message_says_it_is_a_test():
    info = _info(is_test=True, job_id=None, message="Channel “ops” was tested from the console.")
    message = compose(info)
    assert "Test notification" in message.title and "channel works" in message.text


# --- URL validation per kind ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, url",
    [
        ("slack", "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#general"),
        ("slack", "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"),
        ("discord", "discord://1234567890/abcdefghijklmnop"),
        ("telegram", "tgram://123456789:abcdefg_hijklmnop/12315544"),
        ("dingtalk", "dingtalk://abcdefghijklmnop/"),
        ("feishu", "feishu://abcdefghijklmnop"),
        ("feishu", "lark://abcdefghijklmnop"),
        ("wecom", "wecombot://botkey123"),
    ],
)
def test_service_urls_are_accepted_by_their_kind(kind, url):
    assert transport_for(kind).validate_url(url) == url


@pytest.mark.parametrize(
    "kind, url, accepted",
    [
        ("slack", "discord://1234567890/abcdefghijklmnop", "slack://"),
        ("email", "smtp://mail.example.com", "mailto://, mailtos://"),
        ("telegram", "tgram://", "tgram://"),
        ("mattermost", "ftp://chat.example.com/x", "mmost://, mmosts://"),
        ("wecom", "https://example.com/not-wecom", "wecombot://"),
    ],
)
def test_a_wrong_url_names_the_accepted_schemes(kind, url, accepted):
    with pytest.raises(InvalidChannelURL) as caught:
        transport_for(kind).validate_url(url)
    assert accepted in str(caught.value)


def test_an_unknown_kind_lists_the_kinds():
    with pytest.raises(InvalidChannelURL, match="webhook, slack"):
        transport_for("pager")


def test_webhook_urls_must_be_http(nothing_allowed):
    with pytest.raises(InvalidChannelURL, match="use one of: http://, https://"):
        WebhookTransport.validate_url("ftp://example.com/x")


def test_email_smtp_host_is_the_checked_host():
    plugin = EmailTransport.plugin_for("mailtos://user:pw@example.com?smtp=smtp.example.net&to=a@example.com")
    assert EmailTransport.user_hosts(plugin) == [("smtp.example.net", 587)]


# --- outcomes (pure) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, verdict",
    [
        (200, "ok"),
        (204, "ok"),
        (401, "permanent"),
        (403, "permanent"),
        (404, "permanent"),
        (410, "permanent"),
        (408, "transient"),
        (429, "transient"),
        (500, "transient"),
        (503, "transient"),
        (400, "rejected"),
        (422, "rejected"),
        (302, "rejected"),
    ],
)
def test_http_statuses_are_classified(code, verdict):
    assert classify_status(code) == verdict


def test_the_status_is_read_from_apprise_logs():
    assert status_from_apprise_logs(["Failed to send JSON POST notification: error=403."]) == 403
    assert status_from_apprise_logs(["Failed to send Slack notification: Not Found, error=404."]) == 404
    assert status_from_apprise_logs(["A Connection error occurred sending Slack notification."]) is None


@pytest.mark.parametrize(
    "attempt, verdict, expected",
    [
        (1, "ok", ("sent", None)),
        (1, "transient", ("retrying", 2.0)),
        (2, "transient", ("retrying", 8.0)),
        (3, "transient", ("failed", None)),
        (1, "permanent", ("failed", None)),
        (1, "rejected", ("failed", None)),
    ],
)
def test_after_each_attempt_the_delivery_is_sent_retried_with_backoff_or_failed(attempt, verdict, expected):
    assert plan_after_attempt(attempt, verdict, (2.0, 8.0)) == expected
