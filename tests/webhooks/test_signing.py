"""Webhook signatures (FR-7): what a receiver checks."""

from __future__ import annotations

import hashlib
import hmac

from apps.webhooks.signing import signature_header, signature_verify

SECRET = "whsec_test"
BODY = b'{"id":"x","status":"succeeded","finished_at":"2030-01-01T00:00:00Z"}'


def test_the_header_is_t_and_v1_hmac_sha256_of_t_dot_body():
    header = signature_header(secret=SECRET, body=BODY, timestamp=1700000000)
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"


def test_a_signature_verifies_with_the_same_secret_only():
    header = signature_header(secret=SECRET, body=BODY)
    assert signature_verify(secret=SECRET, header=header, body=BODY)
    assert not signature_verify(secret="whsec_other", header=header, body=BODY)


def test_a_changed_body_does_not_verify():
    header = signature_header(secret=SECRET, body=BODY)
    assert not signature_verify(secret=SECRET, header=header, body=BODY.replace(b"succeeded", b"failed"))


def test_an_old_signature_is_refused_as_a_replay():
    header = signature_header(secret=SECRET, body=BODY, timestamp=1700000000)
    assert not signature_verify(secret=SECRET, header=header, body=BODY, now=1700000000 + 301)
    assert signature_verify(secret=SECRET, header=header, body=BODY, now=1700000000 + 299)


def test_a_malformed_header_does_not_verify():
    assert not signature_verify(secret=SECRET, header="garbage", body=BODY)
    assert not signature_verify(secret=SECRET, header="t=abc,v1=00", body=BODY)
