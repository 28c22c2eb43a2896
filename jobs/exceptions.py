"""Domain errors to HTTP responses, in one place: REST_FRAMEWORK["EXCEPTION_HANDLER"].

Views raise what the domain raises and never translate it themselves:
- jobs.actions.NotFound: 404 (another workspace's object is not there, never 403);
- jobs.actions.Forbidden: 403 with the reason;
- jobs.inputs.InputError (a value outside a serializer, e.g. a query parameter): 400
  naming the field;
- serializer ValidationErrors: 400, every field error under its path
  (`job_specs.1.resource_config.gpu`; see flat_errors);
- Conflict: 409, the object's state refuses the request (a finished job).

Two bodies, chosen by the view's `error_body`:
- "fields" (the REST API): DRF's shape, {"<field path>": ["message", ...]} or
  {"detail": "..."};
- "detail_and_field" (the SDK endpoints, jobs.sdk): one refusal the SDK can log
  as is, {"detail": "<full sentence>", "field": "<path>"}, paths in the SDK's
  bracket style (`records[0].op`).
"""

from __future__ import annotations

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler

from .actions import Forbidden, NotFound
from .inputs import InputError, flat_errors


class Conflict(exceptions.APIException):
    """The request is fine but the object's state refuses it (a finished job)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class BodyTooLarge(exceptions.APIException):
    """A body over the endpoint's size, refused from its Content-Length before it is read."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    field = "body"


def _domain_to_api(exc: Exception) -> Exception:
    if isinstance(exc, NotFound):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, Forbidden):
        return exceptions.PermissionDenied(str(exc))
    if isinstance(exc, InputError):
        return exceptions.ValidationError({exc.field: [exc.message]})
    return exc


def _detail_and_field(original: Exception, exc: Exception) -> dict:
    """The SDK endpoints' body: the first refusal as a sentence, and its field."""
    if isinstance(original, InputError):
        return {"detail": f"{original.field} {original.message}", "field": original.field}
    field = getattr(exc, "field", None)
    if isinstance(exc, exceptions.ParseError) and field:  # jobs.inputs.UnacceptableJSON: a phrase after the field
        return {"detail": f"{field} {getattr(exc, 'message', '')}", "field": field}
    if isinstance(exc, exceptions.ValidationError):
        name, messages = next(iter(flat_errors(exc.detail, brackets=True).items()))
        if name == api_settings.NON_FIELD_ERRORS_KEY:
            name = "body"
        return {"detail": messages[0], "field": name}
    detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
    return {"detail": str(detail), **({"field": field} if field else {})}


def api_exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler (status, Retry-After, WWW-Authenticate) once the domain's errors
    became API errors; the body in the view's `error_body` shape."""
    api_exc = _domain_to_api(exc)
    response = exception_handler(api_exc, context)
    if response is not None and getattr(context.get("view"), "error_body", "fields") == "detail_and_field":
        response.data = _detail_and_field(exc, api_exc)
    return response
