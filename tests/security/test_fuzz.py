"""Fuzzing the API (issue 12): no request, however odd, gets a 500.

- schemathesis over /api/schema/: every operation but job submission (a fuzzer
  must not launch jobs), positive and negative cases, against the WSGI app in
  this process, as a staff owner with a personal token (and the SDK endpoints
  with the job's token). Bounded: a fixed number of examples per operation,
  derandomized, so the run takes seconds and fails the same way every time.
- job submission by a hypothesis test with harmless commands: whatever the body,
  the answer is a 201 with a job and its first attempt, or a 4xx that leaves no
  job, attempt or event behind.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from django.core.cache import cache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import actions
from jobs.models import Attempt, Job, JobEvent, Membership, Role

pytestmark = pytest.mark.django_db

EXAMPLES_PER_OPERATION = 8


def bounded(max_examples: int) -> settings:
    """Deterministic and bounded: the same examples every run, no example database."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def wsgi_app():
    """The console's WSGI app, called in this thread (so it sees the test's
    database). Like Django's test client, it must not close the connection
    after each request."""
    from django.core import signals
    from django.db import close_old_connections

    from console.wsgi import application

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield application
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def staff_owner(django_user_model, alice_ws):
    user = django_user_model.objects.create_user(
        "sam", "sam@example.com", "sam-password-123", is_staff=True, is_superuser=True
    )
    Membership.objects.create(workspace=alice_ws, user=user, role=Role.OWNER)
    return user


def test_no_fuzzed_api_request_gets_a_500(staff_owner, alice_ws, memory_backend, settings, wsgi_app):
    import schemathesis
    from schemathesis import GenerationMode

    from jobs.models import ApiToken

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"sdk": "100000/s"}}
    memory_backend.nodes = [{"name": "node-a", "slots": 4}]
    job, job_token = actions.submit_job(
        staff_owner,
        {
            "workspace": alice_ws.slug,
            "display_name": "fuzz-target",
            "job_type": "PyTorchJob",
            "user_command": "true",
            "job_specs": [{"type": "Worker", "pod_count": 1}],
        },
    )
    actions.launch_attempt(job.pk, 1)
    _, raw = ApiToken.issue(staff_owner)
    person = {"Authorization": f"Bearer {raw}"}

    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", wsgi_app, headers=person)
    schema = schema.exclude(path="/api/v1/jobs/", method="POST")  # submission: the hypothesis test below
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15, [op.label for op in operations]
    failures = []
    statuses: Counter = Counter()
    for operation in operations:
        sdk = "/sdk/" in operation.path
        # Real objects some of the time, so that more than the 404 path is fuzzed.
        known = {"id": "local:node-a" if "/nodes/" in operation.path else str(job.pk), "job_id": str(job.pk)}
        headers = {"Authorization": f"Bearer {job_token}"} if sdk else person
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @bounded(EXAMPLES_PER_OPERATION)
            @given(case=operation.as_strategy(generation_mode=mode), use_known=st.booleans())
            def call(case, use_known):
                if use_known:
                    for name in list(case.path_parameters or {}):
                        case.path_parameters[name] = known.get(name, case.path_parameters[name])
                cache.clear()  # the SDK rate limit counts in the cache
                response = case.call(headers=headers)
                statuses[response.status_code // 100] += 1
                if response.status_code >= 500:
                    failures.append(
                        (
                            operation.label,
                            mode.value,
                            case.path_parameters,
                            case.query,
                            case.body,
                            response.status_code,
                            response.text[:300],
                        )
                    )

            call()
    assert failures == []
    assert statuses[2] > 50 and statuses[4] > 50, statuses  # it got past authentication, and it was refused
    assert Job.objects.count() == 1  # the fuzzer launched nothing


HARMLESS_COMMANDS = st.sampled_from(["true", "echo hello", "exit 0", ":", "printf 'x\\n'"])
# Any code point, lone surrogates and NUL included: a JSON body can carry them all.
TEXT = st.text(st.characters(codec=None, categories=None, exclude_categories=()), max_size=40)
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.floats(allow_nan=False),
    TEXT,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(TEXT, st.integers(), max_size=2),
)
ROLE = st.fixed_dictionaries(
    {
        "type": st.one_of(st.sampled_from(["Master", "Worker", "PS", "Chief", "Launcher", "worker"]), ODD),
        "pod_count": st.one_of(st.integers(-2, 5), st.sampled_from(["2", "²", "٣", " 1 ", "1e3", ""]), ODD),
    },
    optional={
        "resource_config": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "gpu": st.one_of(st.sampled_from([0, 1, 3, "2", "²"]), ODD),
                    "cpu": st.one_of(st.sampled_from([1, 0.5, "2", "nan", "inf", -1]), ODD),
                    "memory": st.one_of(st.sampled_from(["1Gi", "٣Gi", "12", "lots"]), ODD),
                },
            ),
            ODD,
        ),
        "image": st.one_of(TEXT, ODD),
    },
)
SUBMISSION = st.fixed_dictionaries(
    {
        "workspace": st.one_of(st.just("alice-lab"), st.sampled_from(["²", "0", "-1", "4"]), ODD),
        "display_name": st.one_of(TEXT, ODD),
        "job_type": st.one_of(st.sampled_from(["PyTorchJob", "TFJob", "MPIJob", "ElasticBatchJob"]), ODD),
        "job_specs": st.one_of(st.lists(ROLE, max_size=3), ODD),
        "user_command": st.one_of(HARMLESS_COMMANDS, ODD),
    },
    optional={
        "envs": st.one_of(
            st.dictionaries(
                st.sampled_from(["A", "B_1", "PATH", "1X", "VIGIL_JOB_ID"]), st.one_of(TEXT, ODD), max_size=3
            ),
            ODD,
        ),
        "backend": st.one_of(st.just("local"), ODD),
        "workdir": st.one_of(st.sampled_from(["/tmp", "relative", ""]), ODD),
        "settings": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "enable_error_monitoring_in_aimaster": st.one_of(st.booleans(), ODD),
                    "error_monitoring_args": st.one_of(
                        st.sampled_from(["", "--job-hang-interval=60", "--bogus=1"]), ODD
                    ),
                    "retryable_errors": st.one_of(st.lists(TEXT, max_size=3), ODD),
                },
            ),
            ODD,
        ),
    },
)


# Valid bodies with harmless commands, so that the fuzzer also reaches the path that creates a job.
VALID = st.fixed_dictionaries(
    {
        "workspace": st.sampled_from(["alice-lab", "ALICE_WS_ID"]),
        "display_name": st.text(st.characters(categories=["L", "N", "P", "Zs"]), min_size=1, max_size=30),
        "job_type": st.just("PyTorchJob"),
        "job_specs": st.just([{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}]),
        "user_command": HARMLESS_COMMANDS,
    },
    optional={
        "envs": st.dictionaries(st.sampled_from(["A", "B_1", "EPOCHS"]), st.text(max_size=20), max_size=2),
        "workdir": st.sampled_from(["/tmp", ""]),
    },
)


def test_fuzzed_submissions_make_a_whole_job_or_a_4xx_and_nothing(alice, alice_ws, api_as, memory_backend):
    api = api_as(alice)
    outcomes: Counter = Counter()

    @bounded(150)
    @given(body=st.one_of(SUBMISSION, VALID))
    def submit(body):
        if body.get("workspace") == "ALICE_WS_ID":
            body["workspace"] = alice_ws.pk
        before = (Job.objects.count(), Attempt.objects.count(), JobEvent.objects.count())
        # json.dumps escapes a lone surrogate as \udc80, as any other client's JSON would.
        response = api.post("/api/v1/jobs/", json.dumps(body), content_type="application/json")
        assert response.status_code < 500, (body, response.content[:300])
        outcomes[response.status_code] += 1
        if response.status_code == 201:
            job = Job.objects.get(pk=response.json()["id"])
            assert job.attempts.filter(number=1).exists() and job.events.exists()
            assert job.user_command in {"true", "echo hello", "exit 0", ":", "printf 'x\\n'"}
        else:
            assert 400 <= response.status_code < 500
            assert (Job.objects.count(), Attempt.objects.count(), JobEvent.objects.count()) == before, body
            assert response.json(), body  # says what was wrong

    submit()
    assert outcomes[201] >= 10 and outcomes[400] >= 10, outcomes
