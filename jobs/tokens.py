"""Job tokens are verified by digest, but the console must hand the same token to
every new instance of the job until someone resets it, so the plain token is
also kept sealed (Fernet, keyed from SECRET_KEY) rather than in clear."""

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


def _fernet() -> Fernet:
    key = hashlib.sha256(("vigil-job-token:" + settings.SECRET_KEY).encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def seal(raw: str) -> str:
    return _fernet().encrypt(raw.encode()).decode()


def unseal(sealed: str) -> str:
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        # SECRET_KEY changed: the token cannot be recovered; a reset issues a new one.
        return ""
