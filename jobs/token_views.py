"""The personal API tokens page: make a token with a name and a lifetime, see it
once, list and revoke your own. Thin over ApiToken.issue/revoke. Every lookup is
scoped to the signed-in person, so someone else's token is 404, never 403: the
page must not even confirm that an id exists."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core.tokens import DEFAULT_EXPIRY, EXPIRY_CHOICES, expiry_from

from .inputs import validate_name
from .models import ApiToken

# Listed newest first; a person with hundreds of tokens still gets a bounded page.
LIST_LIMIT = 200


class NewTokenForm(forms.Form):
    name = forms.CharField(
        max_length=100, validators=[validate_name], help_text="To recognise it later, e.g. “laptop” or “CI”."
    )
    expires = forms.ChoiceField(
        label="Expires after", choices=EXPIRY_CHOICES, initial=DEFAULT_EXPIRY, widget=forms.RadioSelect
    )

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("Give the token a name.")
        return name


def _page(request, form, raw=None, status=200):
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at", "-pk")[:LIST_LIMIT]
    return render(request, "jobs/api_tokens.html", {"form": form, "tokens": tokens, "new_token": raw}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request):
    if request.method == "GET":
        return _page(request, NewTokenForm())
    form = NewTokenForm(request.POST)
    if not form.is_valid():
        # 400 with each error at its field (the form's error list names the field)
        return _page(request, form, status=400)
    token, raw = ApiToken.issue(
        request.user,
        name=form.cleaned_data["name"],
        expires_at=expiry_from(form.cleaned_data["expires"], timezone.now()),
    )
    # Rendered in the POST's answer, never redirected: the raw token must not sit in a
    # URL, the session or a cache; this response is the one time it is shown.
    response = _page(request, NewTokenForm(), raw=raw, status=201)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def api_token_revoke(request, token_id):
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token.revoke()
    return redirect("pages:api-tokens")
