"""The api's in-process fixtures (its app with the embedded projector, an HTTP client on it)."""

from tests.integration.api.conftest import api_settings, app, client  # noqa: F401 - fixtures
