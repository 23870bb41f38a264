"""Job tokens: minted by the controller's own HS256 signer, read back through PyJWT."""

from __future__ import annotations

import time

import jwt
import pytest

from corral.controller.auth import Authenticator, Identity
from corral.controller.errors import ApiError

KEY = "k" * 43


def test_a_minted_token_is_a_standard_hs256_jwt() -> None:
    auth = Authenticator(KEY, "cluster", frozenset({"root"}))
    token = auth.mint(Identity("alice", 1001, 1002, operator=False, via="socket"), 600)
    assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT"}
    claims = jwt.decode(token, KEY, algorithms=["HS256"])
    assert (claims["sub"], claims["uid"], claims["gid"]) == ("alice", 1001, 1002)
    assert claims["exp"] - claims["iat"] == 600 and abs(claims["iat"] - time.time()) < 5
    assert auth.from_token(token) == Identity("alice", 1001, 1002, operator=False,
                                              via="token")
    # a second token reuses the keyed MAC without carrying the first one's state
    other = auth.mint(Identity("root", 0, 0, operator=True, via="socket"), 60)
    assert auth.from_token(other).operator and auth.from_token(token).user == "alice"


def test_tokens_signed_otherwise_or_expired_are_refused() -> None:
    auth = Authenticator(KEY, "cluster", frozenset())
    who = Identity("bob", 1003, 1003, operator=False, via="socket")
    stranger = Authenticator("x" * 43, "cluster", frozenset()).mint(who, 600)
    with pytest.raises(ApiError, match="invalid token: Signature verification failed"):
        auth.from_token(stranger)
    head, body, sig = auth.mint(who, 600).split(".")
    forged = jwt.utils.base64url_encode(b'{"sub":"root","exp":9999999999}').decode()
    with pytest.raises(ApiError, match="invalid token"):
        auth.from_token(f"{head}.{forged}.{sig}")
    with pytest.raises(ApiError, match="the token has expired"):
        auth.from_token(auth.mint(who, -10))
