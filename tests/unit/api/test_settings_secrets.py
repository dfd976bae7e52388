"""A refused api setting names the variable and never quotes what was given: a bootstrap token
one character short is still a secret."""

import pydantic
import pytest

from slotflow_api.config import ApiSettings


def test_a_too_short_bootstrap_token_is_refused_without_being_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "short-secret-token-value"
    monkeypatch.setenv("SLOTFLOW_API_BOOTSTRAP_TOKEN", secret)
    with pytest.raises(pydantic.ValidationError) as refused:
        ApiSettings()
    assert "SLOTFLOW_API_BOOTSTRAP_TOKEN must be at least" in str(refused.value)
    assert secret not in str(refused.value)
    assert secret[:10] not in str(refused.value)
