"""runnerd.kube.errors: the seed's classification rules, fed the apiserver's
real Status bodies (apimachinery's `errors.go`), and what a client can read."""

from __future__ import annotations

import pytest

from runnerd.backend import StartError
from runnerd.kube import errors
from runnerd.kube.errors import Refusal, classify, classify_answer, start_error

SA = "system:serviceaccount:runnerd:runnerd"
AUDIT_ID = "8d3f1c2e-5b7a-4c1d-9e0f-123456789abc"

RBAC_CREATE = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"pods is forbidden: User \\"' + SA.replace('"', '\\"') + '\\" cannot create '
    'resource \\"pods\\" in API group \\"\\" in the namespace \\"runnerd\\"",'
    '"reason":"Forbidden","details":{"kind":"pods"},"code":403}\n'
)
RBAC_ATTACH_NAMED = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"pods \\"runnerd-abc\\" is forbidden: User \\"' + SA + '\\" cannot get '
    'resource \\"pods/attach\\" in API group \\"\\" in the namespace \\"runnerd\\"",'
    '"reason":"Forbidden","details":{"name":"runnerd-abc","kind":"pods"},"code":403}\n'
)
QUOTA_EXCEEDED = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"pods \\"sess-abc\\" is forbidden: exceeded quota: compute, requested: '
    'limits.cpu=2, used: limits.cpu=3, limited: limits.cpu=4","reason":"Forbidden",'
    '"details":{"name":"sess-abc","kind":"pods"},"code":403}\n'
)
QUOTA_FAILED = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"pods \\"sess-abc\\" is forbidden: failed quota: compute: must specify '
    'limits.cpu for: app; limits.memory for: app","reason":"Forbidden",'
    '"details":{"name":"sess-abc","kind":"pods"},"code":403}\n'
)
UNAUTHORIZED = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"Unauthorized","reason":"Unauthorized","code":401}\n'
)
NOT_FOUND = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"pods \\"x\\" not found","reason":"NotFound",'
    '"details":{"name":"x","kind":"pods"},"code":404}\n'
)
ALREADY_EXISTS = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"pods \\"x\\" already exists","reason":"AlreadyExists",'
    '"details":{"name":"x","kind":"pods"},"code":409}\n'
)
INTERNAL = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"Internal error occurred: boom","reason":"InternalError",'
    '"details":{"causes":[{"message":"boom"}]},"code":500}\n'
)
TIMEOUT_504 = (
    '{"metadata":{},"status":"Failure","message":"Timeout: request did not complete '
    'within the allotted timeout","reason":"Timeout","details":{},"code":504}\n'
)
TOO_MANY = "Too many requests, please try again later.\n"
# An admission webhook's 403: neither quota nor an authorizer.
WEBHOOK_403 = (
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
    '"message":"admission webhook \\"policy.example.com\\" denied the request: '
    'images from docker.io are not allowed","reason":"Forbidden","code":403}\n'
)

OP = "could not create the session pod"


def test_classify_quota_403_names_the_quota_not_the_text() -> None:
    for body in (QUOTA_EXCEEDED, QUOTA_FAILED):
        err = classify(OP, 403, body)
        assert isinstance(err, errors.Forbidden)
        assert err.refusal is Refusal.QUOTA
        assert str(err) == (
            "could not create the session pod: the session namespace's resource quota "
            "is exhausted (Forbidden, HTTP 403)"
        )


def test_classify_rbac_403_tells_the_operator_to_check_rbac() -> None:
    for body in (RBAC_CREATE, RBAC_ATTACH_NAMED):
        err = classify(OP, 403, body)
        assert err.refusal is Refusal.RBAC
        assert str(err) == (
            "could not create the session pod: the runner is not permitted to do this "
            "(Forbidden, HTTP 403). The cluster operator must check the runner's RBAC."
        )


def test_classify_403_without_a_body_is_rbac_and_other_403s_are_neutral() -> None:
    assert classify(OP, 403, b"").refusal is Refusal.RBAC
    assert str(classify(OP, 403, b"")).endswith(
        "(HTTP 403). The cluster operator must check the runner's RBAC."
    )
    webhook = classify(OP, 403, WEBHOOK_403)
    assert webhook.refusal is Refusal.OTHER
    assert str(webhook) == (
        "could not create the session pod: the Kubernetes API rejected the request "
        "(Forbidden, HTTP 403)"
    )


def test_classify_401_with_its_message_is_neutral() -> None:
    # The seed's rule: a message that is neither quota nor authorizer → neutral.
    err = classify(OP, 401, UNAUTHORIZED)
    assert isinstance(err, errors.Unauthorized)
    assert str(err).endswith("the Kubernetes API rejected the request (Unauthorized, HTTP 401)")


@pytest.mark.parametrize(
    ("status", "body", "kind", "tail"),
    [
        (404, NOT_FOUND, errors.NotFound, "(NotFound, HTTP 404)"),
        (409, ALREADY_EXISTS, errors.AlreadyExists, "(AlreadyExists, HTTP 409)"),
        (409, '{"reason":"Conflict"}', errors.Conflict, "(Conflict, HTTP 409)"),
        (500, INTERNAL, errors.ServerError, "(InternalError, HTTP 500)"),
        (504, TIMEOUT_504, errors.ServerError, "(Timeout, HTTP 504)"),
        (429, TOO_MANY, errors.TooManyRequests, "(HTTP 429)"),
        (410, '{"reason":"Expired","code":410}', errors.Gone, "(Expired, HTTP 410)"),
        (422, '{"reason":"Invalid"}', errors.Invalid, "(Invalid, HTTP 422)"),
    ],
)
def test_classify_other_statuses_are_neutral_and_typed(
    status: int, body: str, kind: type[errors.KubeError], tail: str
) -> None:
    err = classify(OP, status, body)
    assert type(err) is kind
    assert err.refusal is None
    assert str(err) == f"{OP}: the Kubernetes API rejected the request {tail}"


def test_classify_without_a_status_is_unreachable() -> None:
    for status in (None, 0, 600, -1):
        err = classify(OP, status)
        assert isinstance(err, errors.Unreachable)
        assert str(err) == f"{OP}: the Kubernetes API could not be reached"


def test_classify_passes_on_only_a_one_word_reason() -> None:
    sneaky = '{"reason":"Forbidden because ' + SA + '","message":"x"}'
    assert str(classify(OP, 500, sneaky)).endswith("(HTTP 500)")


def test_classify_answer_keeps_the_body_for_the_log_only() -> None:
    body = (QUOTA_EXCEEDED + "").encode()
    err = classify_answer(OP, 403, body)
    assert isinstance(err.__cause__, errors.ApiAnswer)
    assert "exceeded quota: compute" in err.__cause__.body
    assert "exceeded quota" not in str(err)


def test_start_error_is_client_safe_and_chains_the_original() -> None:
    for status, body in [
        (403, RBAC_CREATE),
        (403, RBAC_ATTACH_NAMED),
        (403, QUOTA_EXCEEDED),
        (401, UNAUTHORIZED),
        (500, INTERNAL),
        (403, WEBHOOK_403),
    ]:
        err = classify_answer(OP, status, body.encode())
        start = start_error(err, "create")
        assert isinstance(start, StartError)
        assert start.stage == "create"
        assert start.__cause__ is err
        readable = " ".join([str(start), start.message, repr(start), repr(err)])
        for secret in (
            SA,
            "serviceaccount",
            AUDIT_ID,
            "cannot create",
            "exceeded quota",
            "compute",
            "webhook",
            "docker.io",
            "Internal error",
            "boom",
            "runnerd-abc",
            "sess-abc",
        ):
            assert secret not in readable, (secret, readable)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (None, None, "unreachable"),
        (404, None, "not_found"),
        (400, None, "other"),
        (409, b'{"kind":"Status","reason":"AlreadyExists"}', "already_exists"),
        (429, None, "too_many_requests"),
        (503, None, "server_error"),
        (403, b'{"kind":"Status","message":"exceeded quota: q, requested: pods=1"}', "quota"),
        (403, b'{"kind":"Status","message":"pods is forbidden: User \\"x\\" cannot"}', "rbac"),
    ],
)
def test_error_class_labels_blame_then_the_type(
    status: int | None, body: bytes | None, expected: str
) -> None:
    assert errors.error_class(classify("op", status, body)) == expected
    assert errors.error_class(None) == "ok"
