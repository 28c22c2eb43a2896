"""Issue 15, "Progress a user can see": the personal API tokens page in a real
browser. Reached from the header, a token is made with a name and a lifetime,
shown once, works on the REST API, and stops working when revoked from the
page; the page fits a phone and axe-core finds no serious violation."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from playwright.sync_api import expect

from test_log_lines import serious_violations
from test_phone_and_forms import PHONE, overflow

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def api_status(server: str, raw: str) -> int:
    request = urllib.request.Request(f"{server}/api/v1/workspaces/", headers={"Authorization": f"Bearer {raw}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_person_makes_sees_once_uses_and_revokes_a_token(page_for, server, alice, alice_ws, shoot):
    page = page_for(alice)
    page.get_by_role("link", name="API tokens").click()
    expect(page.get_by_role("heading", name="API tokens")).to_be_visible()
    # nothing named: the error sits at the name field, and nothing is made
    page.click("button:has-text('Create token')")
    expect(page.locator("#id_name_error")).to_be_visible()
    axe = {"errors": serious_violations(page)}
    page.fill("#id_name", "laptop")
    page.get_by_label("90 days").check()
    page.click("button:has-text('Create token')")
    raw = page.locator("#new-token-value").inner_text()
    assert raw.startswith("vpt_")
    row = page.locator("table.tokens tbody tr", has_text="laptop")
    expect(row.locator("td[data-label=Prefix]")).to_have_text(raw[:10] + "…")
    expect(row.locator("td[data-label=State]")).to_have_text("Active")
    axe["new token"] = serious_violations(page)
    shoot(page, "api-tokens")
    assert api_status(server, raw) == 200
    # revoke from the page (the confirm dialog is accepted): the row says so, the API refuses it
    row.get_by_role("button", name="Revoke laptop").click()
    expect(page.locator("#new-token-value")).to_have_count(0)  # shown once: gone after the next load
    expect(page.locator("table.tokens tbody tr", has_text="laptop").locator("td[data-label=State]")).to_have_text(
        "Revoked"
    )
    assert api_status(server, raw) == 401
    page.set_viewport_size(PHONE)
    shoot(page, "phone-api-tokens")
    axe["phone"] = serious_violations(page)
    assert overflow(page) == 0
    assert axe == {"errors": [], "new token": [], "phone": []}  # axe-core: no serious or critical violation
