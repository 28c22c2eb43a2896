"""The API docs page works without the internet (issue 15): Swagger UI's assets are
served by the console (drf-spectacular-sidecar, pinned), so with every request to
another host refused the page still lists the API's operations."""

from __future__ import annotations

import pytest
from playwright.sync_api import Route, expect

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_api_docs_render_the_operations_with_the_network_blocked(page_for, alice, server, shoot):
    page = page_for(alice)
    refused: list[str] = []

    def only_the_console(route: Route) -> None:
        if route.request.url.startswith(server + "/"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_console)
    page.goto("/api/docs/")
    # An operation of the job API, rendered by Swagger UI from the schema: the page
    # did not merely load, its script ran and read /api/schema/.
    jobs = page.locator(".opblock-summary-path[data-path='/api/v1/jobs/']")
    expect(jobs.first).to_be_visible(timeout=15_000)
    expect(page.locator(".opblock-summary-path[data-path='/api/v1/workspaces/']").first).to_be_visible()
    expect(page.locator(".info .title")).to_contain_text("Vigil API")
    shoot(page, "api-docs-offline")
    assert refused == [], f"the docs page asked other hosts: {refused}"
