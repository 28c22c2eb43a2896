"""Request checks that hold for every page and API call."""

from django.http import JsonResponse

from jobs.inputs import InputError


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
