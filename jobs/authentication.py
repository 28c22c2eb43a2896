"""`Authorization: Bearer vpt_...` personal API tokens for the REST API."""

from rest_framework import authentication, exceptions

from .models import ApiToken


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        raw = header[1].decode(errors="replace")
        if not raw.startswith(ApiToken.PREFIX):
            # Job tokens (vjt_) are for the SDK endpoints, which authenticate them.
            return None
        token = ApiToken.authenticate(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
