"""Outbound safety: the destinations a channel may not reach are refused when the
channel is saved, when it is tested and when a delivery is attempted, redirects
included; and nothing is ever sent off the loopback interface."""

from __future__ import annotations

import ipaddress

import pytest

from notifications import dispatch, outbound
from notifications.forms import ChannelForm
from notifications.models import Delivery, DeliveryStatus

from .conftest import assert_only_loopback

REFUSED = [
    "http://127.0.0.1/hook",
    "http://localhost/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://2130706433/hook",
    "http://0x7f.1/hook",
    "http://0.0.0.0/hook",
    "http://169.254.169.254/latest/meta-data",
    "http://10.0.0.1/hook",
    "http://100.64.0.1/hook",
    "http://[fd00::1]/hook",
    "file:///etc/passwd",
    "gopher://x",
    "http://a@127.0.0.1/hook",
]


def _refusal_text(text: str) -> bool:
    return "refused destination" in text or "is not accepted" in text


# --- the pure rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    "address, words",
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:10.1.2.3", "private"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.169.254", "metadata"),
        ("169.254.10.1", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "shared address space"),
        ("100.127.255.254", "shared address space"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
    ],
)
def test_non_public_addresses_are_refused_with_the_reason(address, words):
    assert words in outbound.refusal_reason(address)


@pytest.mark.parametrize("address", ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address):
    assert outbound.refusal_reason(address) is None


def test_the_allow_list_lets_a_private_address_through_but_never_the_metadata_service():
    allow = outbound.parse_allow_list(["127.0.0.1", "169.254.0.0/16", "10.0.0.0/8"])
    assert outbound.refusal_reason("127.0.0.1", allow) is None
    assert outbound.refusal_reason("10.9.8.7", allow) is None
    assert outbound.refusal_reason("127.0.0.2", allow) == "127.0.0.2 is a loopback address"
    assert "metadata" in outbound.refusal_reason("169.254.169.254", allow)


def test_a_bad_allow_list_entry_names_the_setting():
    with pytest.raises(ValueError, match="VIGIL_OUTBOUND_ALLOW: 'localhost' is not an IP address or CIDR"):
        outbound.parse_allow_list(["localhost"])


def test_one_bad_address_among_the_resolved_ones_refuses_the_host():
    assert outbound.first_refusal("hooks.example.com", ["93.184.215.14", "2606:4700::1"]) is None
    assert outbound.first_refusal("hooks.example.com", ["93.184.215.14", "10.0.0.7"]) == (
        "refused destination: hooks.example.com resolves to 10.0.0.7; 10.0.0.7 is a private address"
    )


def test_resolving_checks_what_getaddrinfo_returned(nothing_allowed):
    nothing_allowed.VIGIL_OUTBOUND_ALLOW = ["127.0.0.1"]
    infos = outbound.resolve_checked("127.0.0.1", 80)
    assert {ipaddress.ip_address(i[4][0]) for i in infos} == {ipaddress.ip_address("127.0.0.1")}
    with pytest.raises(outbound.RefusedDestination, match="::1 is a loopback address"):
        outbound.resolve_checked("[::1]", 80)


# --- refused at save -----------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_refused_when_the_channel_is_saved(url, nothing_allowed, alice_ws, connections):
    form = ChannelForm({"name": "ops", "kind": "webhook", "url": url}, workspace=alice_ws)
    assert not form.is_valid()
    assert list(form.errors) == ["url"]
    assert _refusal_text(form.errors["url"][0])
    assert connections == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "kind, url",
    [
        ("apprise_json", "json://10.0.0.1/hook"),
        ("apprise_json", "jsons://[::1]:8443/hook"),
        ("mattermost", "mmost://169.254.169.254/token"),
        ("email", "mailto://127.0.0.1:25?from=a@example.com&to=b@example.com"),
        ("email", "mailtos://user:pw@mail.example.com?smtp=10.1.1.1&to=b@example.com"),
    ],
)
def test_apprise_services_with_a_user_given_host_are_checked_at_save(kind, url, nothing_allowed, alice_ws):
    form = ChannelForm({"name": "ops", "kind": kind, "url": url}, workspace=alice_ws)
    assert not form.is_valid()
    assert "refused destination" in form.errors["url"][0]


@pytest.mark.django_db
def test_the_allow_list_setting_lets_a_loopback_webhook_be_saved(loopback_allowed, alice_ws):
    form = ChannelForm({"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:8080/hook"}, workspace=alice_ws)
    assert form.is_valid(), form.errors


# --- refused at send test and at delivery ------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_refused_when_the_channel_is_tested(url, nothing_allowed, make_channel, connections):
    channel = make_channel(url)  # saved before the rules or the DNS changed
    delivery = dispatch.send_test(channel)
    assert delivery.status == DeliveryStatus.FAILED and delivery.permanent_error
    assert _refusal_text(delivery.error), delivery.error
    assert connections == []


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_refused_when_a_delivery_is_attempted(
    url, announce, nothing_allowed, job, make_event, make_channel, make_rule, connections
):
    channel = make_channel(url)
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.attempts == 1 and delivery.permanent_error
    assert _refusal_text(delivery.error), delivery.error
    channel.refresh_from_db()
    assert not channel.enabled and _refusal_text(channel.disabled_reason)
    assert connections == []


@pytest.mark.django_db
def test_apprise_delivery_to_a_refused_host_disables_the_channel(
    announce, nothing_allowed, job, make_event, make_channel, make_rule, connections
):
    channel = make_channel("json://10.0.0.1/hook", kind="apprise_json")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and "refused destination" in delivery.error
    channel.refresh_from_db()
    assert not channel.enabled
    assert connections == []


# --- redirects -------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_redirect_to_the_metadata_service_is_refused_at_send_test(
    loopback_allowed, http_sink, make_channel, connections
):
    http_sink.answer((302, {"Location": "http://169.254.169.254/"}))
    channel = make_channel(http_sink.url + "/redirect")
    delivery = dispatch.send_test(channel)
    assert delivery.status == DeliveryStatus.FAILED and "169.254.169.254 is a cloud metadata address" in delivery.error
    assert len(http_sink.requests) == 1
    assert_only_loopback(connections)


@pytest.mark.django_db
def test_a_redirect_to_the_metadata_service_is_refused_at_delivery(
    announce, loopback_allowed, http_sink, job, make_event, make_channel, make_rule, connections
):
    http_sink.answer((302, {"Location": "http://169.254.169.254/"}))
    channel = make_channel(http_sink.url + "/redirect")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.permanent_error
    assert "metadata" in delivery.error
    channel.refresh_from_db()
    assert not channel.enabled
    assert len(http_sink.requests) == 1
    assert_only_loopback(connections)


@pytest.mark.django_db
def test_a_redirect_to_another_loopback_spelling_outside_the_allow_list_is_refused(
    loopback_allowed, http_sink, make_channel, connections
):
    # 127.0.0.1 is allowed; the redirect target ::1 is not.
    http_sink.answer((307, {"Location": f"http://[::1]:{http_sink.port}/again"}))
    delivery = dispatch.send_test(make_channel(http_sink.url + "/first"))
    assert delivery.status == DeliveryStatus.FAILED and "::1 is a loopback address" in delivery.error
    assert len(http_sink.requests) == 1
    assert "::1" not in connections


@pytest.mark.django_db
def test_allowed_redirects_are_followed_up_to_three_hops(loopback_allowed, http_sink, make_channel):
    hop = (307, {"Location": "/next"})
    http_sink.answer(hop, hop, hop)
    delivery = dispatch.send_test(make_channel(http_sink.url + "/start"))
    assert delivery.status == DeliveryStatus.SENT, delivery.error
    assert [r.path for r in http_sink.requests] == ["/start", "/next", "/next", "/next"]
    assert all(r.method == "POST" and r.body for r in http_sink.requests)  # 307 keeps the body


@pytest.mark.django_db
def test_a_fourth_redirect_is_refused(loopback_allowed, http_sink, make_channel):
    hop = (302, {"Location": "/loop"})
    http_sink.answer(hop, hop, hop, hop)
    delivery = dispatch.send_test(make_channel(http_sink.url + "/start"))
    assert delivery.status == DeliveryStatus.FAILED and "more than 3 redirects" in delivery.error
    assert len(http_sink.requests) == 4


# --- the connection guard ------------------------------------------------------------


@pytest.mark.django_db
def test_the_guard_checks_the_address_it_connects_to_not_an_earlier_lookup(nothing_allowed, http_sink):
    """Whatever a URL check said before, the connection itself resolves, checks
    and connects by the checked address (so DNS rebinding has no window)."""
    import requests

    with outbound.guarded() as guard, pytest.raises(outbound.RefusedDestination):
        requests.get(http_sink.url + "/direct", timeout=2)
    assert guard.refusals and "127.0.0.1 is a loopback address" in guard.refusals[0]
    assert http_sink.requests == []
    # Outside the guard the wrapper is a pass-through (other code is unaffected).
    assert requests.get(http_sink.url + "/direct", timeout=2).status_code == 200


# --- saving needs no DNS answer; sending still refuses (issue 15, defect 11) ---------------------

UNRESOLVABLE = "https://hooks.vigil.invalid/vigil"  # .invalid never resolves (RFC 6761): no DNS answer, ever


def test_a_webhook_whose_name_does_not_resolve_yet_saves_and_its_delivery_says_why(
    nothing_allowed, alice_ws, alice, api_as, job, make_event, make_rule, announce
):
    from notifications.models import Channel, Delivery, DeliveryStatus

    api = api_as(alice)
    made = api.post(
        f"/api/v1/workspaces/{alice_ws.slug}/notifications/channels/",
        {"name": "later", "kind": "webhook", "url": UNRESOLVABLE},
        format="json",
    )
    assert made.status_code == 201, made.content
    channel = Channel.objects.get(pk=made.json()["id"])
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    # checked at send: no address, so nothing sent; DNS may answer later, so the channel stays on
    assert delivery.status == DeliveryStatus.FAILED and "could not resolve hooks.vigil.invalid" in delivery.error
    channel.refresh_from_db()
    assert channel.enabled


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://2130706433/x",
        "http://[::ffff:10.0.0.1]/x",
        "http://localhost/x",
        "http://169.254.169.254/latest",
    ],
)
def test_an_address_that_resolves_to_a_private_one_is_still_refused_at_save(nothing_allowed, url):
    from notifications.transports import InvalidChannelURL, WebhookTransport

    with pytest.raises(InvalidChannelURL, match="refused destination"):
        WebhookTransport.validate_url(url)


def test_a_saved_channel_whose_name_now_resolves_to_a_private_address_is_refused_at_delivery(
    nothing_allowed, http_sink, job, make_event, make_channel, make_rule, announce
):
    """A name accepted at save (no DNS answer then) that later answers with a loopback address
    (here: the stored URL names it) is refused when sent: the receiver on it gets nothing."""
    from notifications.models import Delivery, DeliveryStatus

    channel = make_channel(f"http://localhost:{http_sink.port}/hook")
    make_rule(channel)
    [delivery_id] = announce(make_event(job).pk)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.FAILED and delivery.permanent_error
    assert "loopback address" in delivery.error
    assert http_sink.requests == []
