"""The API's reference pages, Swagger UI at /v1/docs and ReDoc at /v1/redoc, working offline.

FastAPI's own pages load their scripts from a CDN, so on a machine without internet (an operator's
jump host, a closed network) /v1/docs was blank. The assets come from the `fastapi-offline`
package instead, served by the api itself; nothing is fetched from another origin.
"""

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

OPENAPI_URL = "/v1/openapi.json"
SWAGGER_URL = "/v1/docs"
REDOC_URL = "/v1/redoc"
ASSETS_URL = "/v1/docs/assets"

#: The pages' own inline bootstrap scripts and styles are FastAPI's; everything else is this origin.
DOCS_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}

router = APIRouter(include_in_schema=False)


def assets_dir() -> Path:
    """Where the installed `fastapi-offline` keeps Swagger UI's and ReDoc's files."""
    return Path(str(files("fastapi_offline") / "static"))


@router.get(SWAGGER_URL, response_class=HTMLResponse)
async def swagger_ui() -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title="slotflow API - Swagger UI",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url="/ui/static/favicon.svg",
    )
    page.headers.update(DOCS_HEADERS)
    return page


@router.get(REDOC_URL, response_class=HTMLResponse)
async def redoc() -> HTMLResponse:
    page = get_redoc_html(
        openapi_url=OPENAPI_URL,
        title="slotflow API - ReDoc",
        redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url="/ui/static/favicon.svg",
        with_google_fonts=False,
    )
    page.headers.update(DOCS_HEADERS)
    return page


@router.get("/docs")
async def docs_redirect() -> RedirectResponse:
    return RedirectResponse(SWAGGER_URL, status_code=307)


@router.get("/redoc")
async def redoc_redirect() -> RedirectResponse:
    return RedirectResponse(REDOC_URL, status_code=307)


def mount_api_docs(app: FastAPI) -> None:
    """Serve Swagger UI and ReDoc from ``app``, with their assets (create the app with docs_url=None)."""
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="api-docs-assets")
    app.include_router(router)
