"""The webhook signature: HMAC-SHA256 over `<t>.<body>`, checked the way docs/dlq.md tells a
receiver to check it."""

import hashlib
import hmac

import pytest

from slotflow_dlq.notify import signature, verify

SECRET = b"whsec-unit"
BODY = b'{"event":"dead_lettered_run","attempt":1}'
NOW = 1_764_723_641


def test_the_header_is_t_and_the_hex_hmac_of_t_dot_body() -> None:
    mac = hmac.new(SECRET, b"1764723641." + BODY, hashlib.sha256).hexdigest()
    assert signature(SECRET, NOW, BODY) == f"t=1764723641,v1={mac}"


def test_a_fresh_signature_verifies() -> None:
    assert verify(SECRET, signature(SECRET, NOW, BODY), BODY, now=NOW + 10)


@pytest.mark.parametrize(
    ("secret", "header", "body", "now"),
    [
        (SECRET, signature(SECRET, NOW, BODY), BODY + b" ", NOW),  # a changed body
        (b"other", signature(SECRET, NOW, BODY), BODY, NOW),  # another key
        (SECRET, signature(SECRET, NOW, BODY), BODY, NOW + 301),  # replayed too late
        (SECRET, signature(SECRET, NOW, BODY).replace("t=", "t=x"), BODY, NOW),  # garbled time
        (SECRET, f"t={NOW}", BODY, NOW),  # no mac
        (SECRET, "", BODY, NOW),
    ],
)
def test_anything_else_does_not(secret: bytes, header: str, body: bytes, now: int) -> None:
    assert not verify(secret, header, body, now=now)
