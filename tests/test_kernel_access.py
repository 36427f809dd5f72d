"""Owner tokens: a kernel's token names its owner and nothing else can pass for one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bai_jupyter.server.kernel_access import OwnerTokens


@given(st.text(min_size=1, max_size=40))
def test_a_token_names_its_owner(owner: str) -> None:
    tokens = OwnerTokens("secret")
    assert tokens.owner_of(tokens.mint(owner)) == owner


def test_forged_or_foreign_tokens_name_nobody() -> None:
    tokens = OwnerTokens("secret")
    alice = tokens.mint("alice")
    bob_part = OwnerTokens("secret").mint("bob").split(".")[1]
    forged = f"bai1.{bob_part}.{alice.split('.')[2]}"  # bob's name with alice's signature
    for token in (
        None,
        "",
        "alice",
        alice + "0",
        forged,
        OwnerTokens("other").mint("alice"),  # another store's
        "bai1.!!!.00",
    ):
        assert tokens.owner_of(token) is None, token
