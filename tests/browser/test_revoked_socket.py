"""An open page whose person loses access stops its live updates and says why
(issue 12): the socket closes with a code and the banner names it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Membership

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_a_removed_member_sees_the_job_page_stop_with_the_reason(page_for, alice, dave, alice_ws, job_body, shoot):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="watched", user_command="sleep 30"))
    page = page_for(dave)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    expect(page.locator("#logview")).to_be_visible()
    page.wait_for_timeout(500)  # the socket is open
    Membership.objects.filter(user=dave, workspace=alice_ws).delete()
    banner = page.locator("#live-banner")
    expect(banner).to_contain_text("no longer a member of this workspace", timeout=8_000)
    expect(banner).to_contain_text("code 4403")
    shoot(page, "job-page-access-revoked")
    page.wait_for_timeout(1_500)
    expect(banner).to_contain_text("code 4403")  # it stays: no reconnect loop replaces it
    actions.stop_job(alice, job)
