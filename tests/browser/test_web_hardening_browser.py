"""Issue 31 in a real Chromium (findings 2 and 7): a page served from another
loopback port cannot open a job's socket with the visitor's cookie while the
console's own page still streams; the pages pass their Content-Security-Policy
with their live parts working; OSC 8 links in job output are shown as text.
(The consumer-level origin tests are in tests/security/test_web_hardening.py.)"""

from __future__ import annotations

import http.server
import threading

import pytest
from playwright.sync_api import expect

from jobs import actions
from testsupport.jobs import stop_job_now as stop
from testsupport.jobs import wait_for_log

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# Collects what the CSP refused; Playwright's init scripts are not subject to it.
WATCH_CSP = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI + " " + (e.sample || "")));
"""


@pytest.fixture
def foreign_site():
    """foreign_site(html) -> the URL of a page served from another loopback port
    (what any job can serve); the server thread stops at teardown."""
    servers = []

    def serve(html: str) -> str:
        body = html.encode()

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


STREAM = 'i=0; while [ $i -lt 600 ]; do echo "tick $i"; i=$((i+1)); sleep 0.2; done'


def test_a_page_on_another_loopback_port_cannot_read_the_job_socket(
    page_for, server, foreign_site, alice, alice_ws, job_body
):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="streaming", user_command=STREAM))
    wait_for_log(job, "worker-0", "tick 1")
    page = page_for(alice)
    ws_base = server.replace("http://", "ws://")
    attacker = foreign_site(
        "<!doctype html><title>job page</title><script>"
        "window.got = {opened: 0, messages: 0, closed: 0};"
        f"for (const url of ['{ws_base}/ws/jobs/{job.pk}/', '{ws_base}/ws/workspaces/{alice_ws.slug}/']) {{"
        "  const ws = new WebSocket(url);"
        "  ws.onopen = () => { got.opened++;"
        "    ws.send(JSON.stringify({type: 'hello', after_event: null, logs: {attempt: null, offsets: {}}})); };"
        "  ws.onmessage = () => { got.messages++; };"
        "  ws.onclose = () => { got.closed++; };"
        "}</script>"
    )
    # the same browser, the same cookie jar: cookies are not kept apart by port
    evil = page.context.new_page()
    evil.goto(attacker)
    evil.wait_for_function("window.got && (window.got.closed === 2 || window.got.messages > 0)", timeout=15_000)
    evil.wait_for_timeout(500)  # any message that was on its way
    assert evil.evaluate("window.got") == {"opened": 0, "messages": 0, "closed": 2}

    # the console's own page still streams the job's lines live
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/?instance=worker-0")
    log = page.locator("#logview")
    expect(log).to_contain_text("tick 1")
    seen = int(log.locator(".ln .t").last.inner_text().split()[-1])
    expect(log).to_contain_text(f"tick {seen + 5}", timeout=15_000)
    stop(alice, job)


OSC8 = (
    r"printf 'see \033]8;;https://evil.example/steal\033\\the docs\033]8;;\033\\ here\n'; "
    r"printf '\033[1mbold\033[0m \033[38;2;1;2;3mrgb\033[0m \033[31mred\033[0m end\n'; sleep 120"
)


def test_the_pages_pass_their_content_security_policy_with_live_parts_working(
    page_for, server, alice, alice_ws, job_body
):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="links", user_command=OSC8))
    wait_for_log(job, "worker-0", "end")
    page = page_for(alice)
    page.context.add_init_script(WATCH_CSP)
    console_errors = []
    page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
    ws = alice_ws.slug
    pages = [
        "/",
        f"/workspaces/{ws}/",
        f"/workspaces/{ws}/jobs/",
        f"/workspaces/{ws}/jobs/new/",
        f"/workspaces/{ws}/reliability/",
        f"/workspaces/{ws}/notifications/",
        f"/workspaces/{ws}/notifications/rules/add/",
        "/account/tokens/",
        "/api/docs/",
        f"/workspaces/{ws}/jobs/{job.pk}/?instance=worker-0",
    ]
    for url in pages:
        response = page.goto(url)
        policy = response.headers.get("content-security-policy", "")
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, (url, policy)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__csp") == [], url

    # the docs page's init script ran (it is a file now, not inline)
    page.goto("/api/docs/")
    expect(page.locator(".opblock-summary-path[data-path='/api/v1/jobs/']").first).to_be_visible(timeout=15_000)

    # the job page's live log renders its colours without style attributes
    page.goto(f"/workspaces/{ws}/jobs/{job.pk}/?instance=worker-0")
    log = page.locator("#logview")
    styled = log.locator(".ln .t", has_text="rgb")
    expect(styled.locator("span.ansi-red-fg")).to_have_text("red")
    bold = styled.locator("span", has_text="bold")
    assert bold.evaluate("e => getComputedStyle(e).fontWeight") in ("700", "bold")
    rgb = styled.locator("span", has_text="rgb")
    assert rgb.evaluate("e => getComputedStyle(e).color") == "rgb(1, 2, 3)"
    assert page.evaluate("window.__csp") == []
    assert not [e for e in console_errors if "Content Security Policy" in e], console_errors
    stop(alice, job)


def test_osc8_links_in_job_output_are_shown_as_text(page_for, server, alice, alice_ws, job_body):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="links", user_command=OSC8))
    wait_for_log(job, "worker-0", "end")
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/?instance=worker-0")
    log = page.locator("#logview")
    line = log.locator(".ln .t", has_text="the docs")
    expect(line).to_have_text("see the docs here")
    assert log.locator("a[href*='evil.example']").count() == 0
    assert line.locator("a").count() == 0
    stop(alice, job)
