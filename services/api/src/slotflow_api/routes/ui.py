"""The web dashboard: plain HTML pages under /ui that call the JSON API (/v1) from the browser.

No build step and nothing from outside: one page shell, one stylesheet and a script per page, served
from `slotflow_api/ui/`. The pages read the same endpoints a user's own client would, so the
dashboard can never show something the API does not; its buttons POST the same commands.
"""

from functools import cache
from html import escape
from pathlib import Path
from string import Template

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
STATIC_DIR = UI_DIR / "static"

#: No inline script or style and no other origin: a value rendered from the read model can never run.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

router = APIRouter(include_in_schema=False)


@cache
def _shell() -> Template:
    return Template((UI_DIR / "shell.html").read_text(encoding="utf-8"))


def page(name: str, title: str, subject: str = "") -> HTMLResponse:
    """The page shell for ``name``; the script renders its content from the API."""
    html = _shell().substitute(
        title=escape(title),
        page=escape(name),
        subject=escape(subject),
    )
    return HTMLResponse(html, headers=SECURITY_HEADERS)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
async def ui_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/", response_class=HTMLResponse)
async def schedules_page() -> HTMLResponse:
    return page("schedules", "Schedules")


# Identifiers may contain "/", so the id is the rest of the path.
@router.get("/ui/schedules/{schedule_id:path}", response_class=HTMLResponse)
async def schedule_page(schedule_id: str) -> HTMLResponse:
    return page("schedule", f"Schedule {schedule_id}", schedule_id)


@router.get("/ui/calendar", response_class=HTMLResponse)
async def calendar_page() -> HTMLResponse:
    return page("calendar", "Calendar")


@router.get("/ui/workflows", response_class=HTMLResponse)
async def workflows_page() -> HTMLResponse:
    return page("workflows", "Workflows")


@router.get("/ui/workflows/{workflow_id:path}", response_class=HTMLResponse)
async def workflow_page(workflow_id: str) -> HTMLResponse:
    return page("workflow", f"Workflow {workflow_id}", workflow_id)


@router.get("/ui/runs/{run_id:path}", response_class=HTMLResponse)
async def run_page(run_id: str) -> HTMLResponse:
    return page("run", f"Run {run_id}", run_id)


@router.get("/ui/dlq", response_class=HTMLResponse)
async def dlq_page() -> HTMLResponse:
    return page("dlq", "Dead letters")


@router.get("/ui/downstreams", response_class=HTMLResponse)
async def downstreams_page() -> HTMLResponse:
    return page("downstreams", "Downstreams")


@router.get("/ui/stats", response_class=HTMLResponse)
async def stats_page() -> HTMLResponse:
    return page("stats", "Run statistics")


def mount_ui(app: FastAPI) -> None:
    """Serve the dashboard from ``app``: the pages, and the static assets under /ui/static."""
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.include_router(router)
