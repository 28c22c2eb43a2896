"""Request checks that hold for every page and API call."""

from django.conf import settings
from django.http import JsonResponse

from jobs.inputs import InputError


def content_security_policy(get_response):
    """Every response names what its page may load (settings.CONTENT_SECURITY_POLICY):
    scripts and styles from the console itself only, so markup that slipped past
    escaping still cannot run script (no inline script, no event-handler attributes,
    no other origin). A response that set its own policy keeps it."""

    def middleware(request):
        response = get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response

    return middleware


def refuse_nul_in_url(get_response):
    """A NUL character in the path or a query parameter is a 400 naming it:
    PostgreSQL refuses NUL in any query, so without this every text parameter
    that reaches a filter (status, q, type, an instance name...) would be a 500.
    (JSON bodies are checked by jobs.inputs.BoundedJSONParser; form fields by
    Django's own ProhibitNullCharactersValidator.)"""

    def middleware(request):
        field = None
        if "\x00" in request.path:
            field = "path"
        else:
            field = next(
                (k for k, values in request.GET.lists() if "\x00" in k or any("\x00" in v for v in values)), None
            )
            field = field.replace("\x00", "\\u0000") if field is not None else None
        if field is None:
            return get_response(request)
        error = InputError(field, "contains a NUL character (\\u0000); remove it.")
        if request.path.startswith("/api/"):
            return JsonResponse({error.field: [error.message]}, status=400)
        raise error

    return middleware
