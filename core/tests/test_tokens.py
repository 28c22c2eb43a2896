from datetime import datetime, timedelta, timezone

import pytest

from core.tokens import EXPIRY_CHOICES, expiry_from

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def test_each_choice_gives_its_lifetime_and_never_gives_none():
    assert [expiry_from(value, NOW) for value, _ in EXPIRY_CHOICES] == [
        NOW + timedelta(days=7),
        NOW + timedelta(days=30),
        NOW + timedelta(days=90),
        None,
    ]


@pytest.mark.parametrize("bad", ["", "0", "-7", "365", "7.0", "Never", " 7"])
def test_anything_else_is_refused(bad):
    with pytest.raises(ValueError, match="choose one of 7 days, 30 days, 90 days, Never"):
        expiry_from(bad, NOW)
