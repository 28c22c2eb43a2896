"""The log view's lines in a real browser against real processes: permalinks to
numbered lines, `e` to the first error (the classifier's line when a restart
record has one), readable lines (ANSI colours escaped and rendered, \\r progress
bars, timestamps on `t`), log filters that live in the URL, and axe-core on the
list, job and rules pages. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from jobs import actions
from testsupport.jobs import stop_job_now as stop
from testsupport.jobs import wait_for_log
from jobs.models import RestartRecord

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).parent / "vendor" / "axe.min.js"

# worker-0 writes 600 numbered lines with a harmless "Error" at 100 and the real
# fault at 401; master-0 writes 600 clean lines. Then both wait.
NUMBERED = (
    "i=1; while [ $i -le 600 ]; do "
    'if [ "$VIGIL_INSTANCE" = "worker-0" ] && [ $i -eq 100 ]; then echo "step $i ValueError ignored by the loader"; '
    'elif [ "$VIGIL_INSTANCE" = "worker-0" ] && [ $i -eq 401 ]; then echo "RuntimeError: CUDA error: out of memory"; '
    'else echo "step $i"; fi; i=$((i+1)); done; sleep 120'
)


def test_a_line_permalink_opens_the_log_at_that_line_and_line_numbers_link_to_lines(
    page_for, alice, alice_ws, job_body, shoot
):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="numbered", user_command=NUMBERED))
    wait_for_log(job, "worker-0", "step 600")
    page = page_for(alice)
    base = f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/"
    page.goto(base + "?attempt=1&instance=worker-0#L250")
    target = page.locator("#log-target")
    expect(target).to_contain_text("step 250")
    expect(target.locator("a.n")).to_have_text("250")
    expect(page.locator("#paused-bar")).to_be_visible()  # held at the line, not following
    box, view = target.bounding_box(), page.locator("#logview").bounding_box()
    assert view["y"] <= box["y"] <= view["y"] + view["height"] - box["height"]  # scrolled into the view
    expect(page.locator("#log-notice")).to_have_text("Linked line: line 250 of worker-0.")
    # the download links of the chosen log, URLs the server reversed
    expect(page.locator("#log-download")).to_have_attribute("href", f"{base}attempts/1/logs/worker-0/download/")
    expect(page.locator("#log-download")).to_have_text("Download worker-0")
    expect(page.locator("#log-archive")).to_have_attribute("href", f"{base}attempts/1/logs.zip")
    shoot(page, "log-permalink")

    # every line's number is a link to it; a click puts the permalink in the address bar
    number = page.locator("#logview .ln a.n", has_text=re.compile(r"^260$"))
    assert number.get_attribute("href").endswith(f"{base}?attempt=1&instance=worker-0#L260")
    assert number.get_attribute("tabindex") == "-1"  # the log stays one tab stop
    number.click()
    expect(page).to_have_url(re.compile(r"\?attempt=1&instance=worker-0#L260$"))
    expect(page.locator("#log-target")).to_contain_text("step 260")
    expect(page.locator("#logview .ln.hl")).to_have_count(1)

    # a line past the end says so
    page.goto(base + "?attempt=1&instance=worker-0#L9000")
    expect(page.locator("#log-notice")).to_have_text(
        "Line 9000 is not in worker-0's log of attempt 1: the log has 600 lines. Showing its end."
    )
    expect(page.locator("#logview")).to_contain_text("step 600")
    # an instance the attempt does not have: told so, not left waiting
    page.goto(base + "?attempt=1&instance=worker-9#L5")
    expect(page.locator("#log-notice")).to_have_text(
        "Line 5 is not in worker-9's log of attempt 1: attempt 1 has no instance of that name."
    )
    expect(page.locator("#log-archive")).to_have_attribute("href", f"{base}attempts/1/logs.zip")
    stop(alice, job)


def test_e_jumps_to_the_classified_line_else_the_first_error_line_and_says_when_there_is_none(
    page_for, alice, alice_ws, job_body, shoot
):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="errors", user_command=NUMBERED))
    backend, handle = wait_for_log(job, "worker-0", "step 600")
    wait_for_log(job, "master-0", "step 600")
    page = page_for(alice)
    base = f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/"

    # no restart record: the first line that looks like an error in the chosen instance
    page.goto(base + "?instance=worker-0")
    expect(page.locator("#logview .ln").first).to_be_visible()
    page.locator("#logview").focus()
    page.keyboard.press("e")
    expect(page.locator("#log-target")).to_contain_text("step 100 ValueError ignored")
    expect(page).to_have_url(re.compile(r"\?attempt=1&instance=worker-0#L100$"))
    expect(page.locator("#log-notice")).to_have_text("First error line: line 100 of worker-0.")

    # an instance without one: told so
    page.select_option("#log-instance", "master-0")
    page.locator("#logview").focus()
    page.keyboard.press("e")
    expect(page.locator("#log-notice")).to_contain_text("No error line to jump to in master-0's log of attempt 1")
    # all instances and no classified failure: told what to do
    page.select_option("#log-instance", "")
    page.locator("#logview").focus()
    page.keyboard.press("e")
    expect(page.locator("#log-notice")).to_contain_text("Nothing to jump to: attempt 1 has no classified failure")

    # a restart record with the classifier's line wins over the first "Error"
    log = backend.read_log(handle, "worker-0")
    RestartRecord.objects.create(
        job=job,
        number=1,
        kind="job",
        attempt=1,
        new_attempt=2,
        instance_name="worker-0",
        node_name="local",
        error_code="CUDA_OOM",
        error_message="CUDA error: out of memory",
        error_source="Log",
        reason="worker-0 ran out of memory",
        result="Succeeded",
        log_offset=log.index(b"RuntimeError: CUDA"),
        idempotency_key=f"e-key-{job.pk}",
    )
    page.goto(base)
    expect(page.locator("#part-restarts tr[data-failure-offset]")).to_have_count(1)
    page.locator("#logview").focus()
    page.keyboard.press("e")
    expect(page.locator("#log-target")).to_contain_text("RuntimeError: CUDA error: out of memory")
    expect(page.locator("#log-target a.n")).to_have_text("401")
    expect(page).to_have_url(re.compile(r"\?attempt=1&instance=worker-0#L401$"))
    expect(page.locator("#log-notice")).to_have_text(
        "The line the classifier used for attempt 1's failure: line 401 of worker-0."
    )
    shoot(page, "log-first-error")
    stop(alice, job)


READABLE = (
    r"printf '\033[31mred alert\033[0m <b>not bold</b> \033[38;5;196mextended\033[0m \033[5mblink\033[0m done\n'; "
    r"printf 'progress 10%%\rprogress 50%%\rprogress 100%%\n'; "
    "echo '2026-01-02T03:04:05.678Z optimizer ready'; "
    "echo 'RuntimeError: NCCL communicator was aborted on rank 3 while waiting for the allreduce of bucket 17 "
    "after 1800000 ms, see the NCCL_DEBUG=INFO output of every rank for the first one that failed'; sleep 120"
)
LONG_LINE_END = "for the first one that failed"


def test_lines_render_ansi_colours_escaped_progress_bars_and_timestamps_in_local_or_utc(
    page_for, alice, alice_ws, job_body, shoot
):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="readable", user_command=READABLE))
    wait_for_log(job, "worker-0", "optimizer ready")
    page = page_for(alice)  # its browser's time zone is Asia/Jakarta (UTC+7)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/?instance=worker-0")
    log = page.locator("#logview")
    colour = log.locator(".ln .t", has_text="red alert")
    expect(colour).to_have_count(1)
    expect(colour.locator("span.ansi-red-fg")).to_have_text("red alert")
    assert colour.locator("b").count() == 0  # markup in a line is text
    expect(colour).to_have_text("red alert <b>not bold</b> extended blink done")  # unknown codes dropped
    assert "\x1b" not in log.inner_text() and "[38;5" not in log.inner_text()
    expect(log.locator(".ln .t", has_text="progress")).to_have_text("progress 100%")  # the bar's last state

    ready = log.locator(".ln", has_text="optimizer ready")
    expect(ready.locator(".ts")).to_be_hidden()
    log.focus()
    page.keyboard.press("t")
    expect(ready.locator(".ts")).to_have_text("10:04:05.678")  # the line's own time, in local time
    expect(page.locator("#log-times")).to_have_text("Times: local")
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", log.locator(".ln", has_text="progress").locator(".ts").inner_text())
    shoot(page, "log-readable-lines")
    page.keyboard.press("t")
    expect(ready.locator(".ts")).to_have_text("03:04:05.678Z")
    expect(page.locator("#log-times")).to_have_attribute("aria-pressed", "true")
    page.keyboard.press("t")
    expect(ready.locator(".ts")).to_be_hidden()
    expect(page.locator("#log-times")).to_have_attribute("aria-pressed", "false")

    # On a phone (issue 15, defect 7) a long line wraps inside the log view, whole: its end is on the screen,
    # the view scrolls only up and down, and the page is no wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    long_line = log.locator(".ln .t", has_text=LONG_LINE_END)
    expect(long_line).to_have_count(1)
    fit = page.evaluate("""() => {
        const view = document.getElementById("logview");
        const text = [...view.querySelectorAll(".ln .t")].find(t => t.textContent.includes("failed"));
        const end = document.createRange(); end.selectNodeContents(text);
        const rects = end.getClientRects();
        return {page_over: document.documentElement.scrollWidth - window.innerWidth,
                view_over: view.scrollWidth - view.clientWidth,
                text_past_view: Math.round(rects[rects.length - 1].right - view.getBoundingClientRect().right)};
    }""")
    assert fit["page_over"] <= 0 and fit["view_over"] <= 0 and fit["text_past_view"] <= 0, fit
    expect(page.locator("#log-wrap")).to_have_attribute("aria-pressed", "true")  # and the button says so
    shoot(page, "phone-log-wrapped")
    stop(alice, job)


def test_log_filters_live_in_the_url_and_come_back_on_reload(page_for, alice, alice_ws, job_body):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="filters", user_command=NUMBERED))
    wait_for_log(job, "master-0", "step 600")
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    page.select_option("#log-instance", "master-0")
    expect(page).to_have_url(re.compile(r"\?instance=master-0$"))
    page.select_option("#log-attempt", "1")
    expect(page).to_have_url(re.compile(r"\?attempt=1&instance=master-0$"))
    page.reload()
    expect(page.locator("#log-instance")).to_have_value("master-0")
    expect(page.locator("#log-attempt")).to_have_value("1")
    expect(page.locator("#logview .ln").first).to_be_visible()
    gutters = set(page.locator("#logview .ln .g").all_inner_texts())
    assert gutters == {"master-0"}
    stop(alice, job)


def serious_violations(page) -> list[str]:
    # Evaluated through the DevTools protocol, not added as a <script>: the pages'
    # Content-Security-Policy refuses inline script, as it should.
    page.evaluate(AXE.read_text() + "\n;undefined")
    result = page.evaluate("""async () => {
        const r = await axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
        return r.violations.filter(v => v.impact === "serious" || v.impact === "critical")
            .map(v => v.id + ": " + v.help + " @ " + v.nodes.slice(0, 3).map(n => n.target.join(" ")).join(", "));
    }""")
    return result


def test_axe_finds_no_serious_violation_on_the_list_job_and_rules_pages(page_for, alice, alice_ws, job_body):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="axe", user_command=READABLE))
    wait_for_log(job, "worker-0", "optimizer ready")
    page = page_for(alice)
    found = {}
    for name, path in (
        ("job list", f"/workspaces/{alice_ws.slug}/jobs/"),
        ("job page", f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/"),
        ("rules page", f"/workspaces/{alice_ws.slug}/notifications/rules/"),
    ):
        page.goto(path)
        if name == "job page":
            expect(page.locator("#logview .ln").first).to_be_visible()
            page.keyboard.press("t")
        found[name] = serious_violations(page)
    assert found == {"job list": [], "job page": [], "rules page": []}
    stop(alice, job)
