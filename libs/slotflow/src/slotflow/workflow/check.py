"""A static check of workflow code for the seed's determinism traps, run before deploy (and in CI).

Workflow code is replayed from its history on every step, so whatever it reads must come from that
history: the host clock, `random`, `uuid4`, the environment, files, sockets, subprocesses, threads and
tasks the runtime does not own give a different answer on replay and strand the workflow with a
`NonDeterminismError`. The runtime's guards catch some of these when they run; this check finds them
in the source without running anything, on every path, including the branch no test takes.

What it reads: every class decorated with `workflow.defn` (its methods, nested functions and lambdas),
plus the module-level functions of the same module those call by name, transitively. Names are
resolved through the module's imports (`from datetime import datetime as dt` is still the host
clock). What it cannot see: helpers imported from other modules and calls through values whose type
it would need to infer; the runtime's guards cover what runs. A line ending in
`# workflow-check: ignore` is not reported (say why beside it).
"""

import ast
import importlib.util
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from slotflow.errors import SlotflowError

IGNORE_MARK = "workflow-check: ignore"


class CheckError(SlotflowError):
    """The workflow code could not be checked (a module not found, a file that does not parse)."""


@dataclass(frozen=True)
class Rule:
    """A forbidden thing: what it breaks and what to use instead."""

    code: str
    why: str
    instead: str


CLOCK = Rule("SFW001", "reads the host clock", "use workflow.now() (the decision's recorded time)")
SLEEP = Rule(
    "SFW002", "waits on the host clock", "use await workflow.sleep(timedelta(...)) (a durable timer)"
)
TIMEOUT = Rule(
    "SFW002", "times out on the host clock", "use await workflow.wait_condition(..., timeout=timedelta(...))"
)
RANDOM = Rule("SFW003", "draws host randomness", "use workflow.random() (seeded from history)")
UUID = Rule(
    "SFW004", "makes a host-random or host-clock id", "use workflow.uuid4() (recorded once, replayed after)"
)
ENVIRON = Rule(
    "SFW005",
    "reads the process environment",
    "pass configuration in the workflow input, or read it in an activity",
)
IO = Rule("SFW006", "does direct I/O", "do it in an activity: await workflow.execute_activity(...)")
PROCESS = Rule(
    "SFW007", "starts or controls a process", "do it in an activity: await workflow.execute_activity(...)"
)
TASKS = Rule(
    "SFW008",
    "runs on the host event loop, which the workflow's loop does not drive",
    "use workflow.create_task() / await workflow.gather(...) (tasks on the workflow's own loop)",
)
SYNC = Rule(
    "SFW008",
    "waits on the host event loop, which the workflow's loop does not drive",
    "use await workflow.wait_condition(lambda: ...) on workflow state",
)
THREADS = Rule(
    "SFW009",
    "uses threads or other processes' executors",
    "do it in an activity: await workflow.execute_activity(...)",
)

#: Qualified names (an exact name or a dotted prefix) and the rule each breaks.
_FORBIDDEN: dict[str, Rule] = {
    **dict.fromkeys(
        (
            "datetime.datetime.now",
            "datetime.datetime.utcnow",
            "datetime.datetime.today",
            "datetime.date.today",
            "time.time",
            "time.time_ns",
            "time.monotonic",
            "time.monotonic_ns",
            "time.perf_counter",
            "time.perf_counter_ns",
            "time.process_time",
            "time.process_time_ns",
            "time.thread_time",
            "time.thread_time_ns",
            "time.localtime",
            "time.gmtime",
            "time.ctime",
            "time.asctime",
            "time.clock_gettime",
            "time.clock_gettime_ns",
            "pendulum.now",
            "pendulum.today",
            "arrow.now",
            "arrow.utcnow",
        ),
        CLOCK,
    ),
    **dict.fromkeys(("time.sleep", "asyncio.sleep"), SLEEP),
    **dict.fromkeys(("asyncio.wait_for", "asyncio.timeout", "asyncio.timeout_at"), TIMEOUT),
    **dict.fromkeys(("random", "secrets", "os.urandom", "os.getrandom", "numpy.random"), RANDOM),
    **dict.fromkeys(("uuid.uuid1", "uuid.uuid4"), UUID),
    **dict.fromkeys(
        ("os.environ", "os.environb", "os.getenv", "os.getenvb", "os.putenv", "os.unsetenv"), ENVIRON
    ),
    **dict.fromkeys(
        (
            "builtins.open",
            "builtins.input",
            "io.open",
            "os.open",
            "os.read",
            "os.write",
            "os.listdir",
            "os.scandir",
            "os.walk",
            "os.stat",
            "os.remove",
            "os.unlink",
            "os.rename",
            "os.makedirs",
            "os.mkdir",
            "os.path.exists",
            "os.path.isfile",
            "os.path.isdir",
            "os.path.getmtime",
            "os.path.getsize",
            "pathlib.Path.cwd",
            "pathlib.Path.home",
            "shutil",
            "glob",
            "tempfile",
            "socket",
            "ssl",
            "select",
            "selectors",
            "http.client",
            "urllib.request",
            "urllib3",
            "requests",
            "httpx",
            "aiohttp",
            "asyncpg",
            "psycopg",
            "psycopg2",
            "sqlite3",
            "aiokafka",
            "kafka",
            "confluent_kafka",
            "redis",
            "boto3",
            "botocore",
            "smtplib",
            "ftplib",
            "grpc",
            "slotflow.kafka",
            "slotflow.pg",
            "asyncio.open_connection",
            "asyncio.start_server",
            "asyncio.open_unix_connection",
            "asyncio.start_unix_server",
        ),
        IO,
    ),
    **dict.fromkeys(
        (
            "subprocess",
            "os.system",
            "os.popen",
            "os.fork",
            "os.forkpty",
            "os.kill",
            "os.execv",
            "os.execve",
            "os.execvp",
            "os.execvpe",
            "os.execl",
            "os.execle",
            "os.execlp",
            "os.execlpe",
            "os.spawnv",
            "os.spawnve",
            "os.spawnvp",
            "os.spawnvpe",
            "os.spawnl",
            "os.spawnle",
            "os.spawnlp",
            "os.spawnlpe",
            "os.posix_spawn",
            "os.posix_spawnp",
            "asyncio.create_subprocess_exec",
            "asyncio.create_subprocess_shell",
        ),
        PROCESS,
    ),
    **dict.fromkeys(
        (
            "asyncio.create_task",
            "asyncio.ensure_future",
            "asyncio.run",
            "asyncio.run_coroutine_threadsafe",
            "asyncio.get_event_loop",
            "asyncio.get_running_loop",
            "asyncio.new_event_loop",
            "asyncio.set_event_loop",
            "asyncio.Runner",
            "asyncio.Future",
            "asyncio.Task",
            "asyncio.TaskGroup",
            "asyncio.gather",
            "asyncio.wait",
            "asyncio.as_completed",
            "asyncio.shield",
        ),
        TASKS,
    ),
    **dict.fromkeys(
        (
            "asyncio.Event",
            "asyncio.Lock",
            "asyncio.Condition",
            "asyncio.Semaphore",
            "asyncio.BoundedSemaphore",
            "asyncio.Barrier",
            "asyncio.Queue",
            "asyncio.PriorityQueue",
            "asyncio.LifoQueue",
        ),
        SYNC,
    ),
    **dict.fromkeys(
        ("threading", "_thread", "concurrent.futures", "multiprocessing", "asyncio.to_thread"), THREADS
    ),
}
#: Methods that touch the file system, when called on a `pathlib.Path(...)` made in place.
_PATH_IO = frozenset(
    {
        "open",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "exists",
        "is_file",
        "is_dir",
        "iterdir",
        "glob",
        "rglob",
        "stat",
        "unlink",
        "mkdir",
        "rmdir",
        "touch",
        "rename",
        "replace",
        "resolve",
        "samefile",
    }
)
_BUILTINS = ("open", "input")


@dataclass(frozen=True)
class Finding:
    """One trap found in workflow code."""

    path: str
    line: int
    column: int
    code: str
    name: str
    workflow: str
    why: str
    instead: str
    via: str | None = None

    def format(self) -> str:
        """`file:line:col: CODE message; use ...` (the shape editors and CI annotate)."""
        where = (
            f"workflow {self.workflow}"
            if self.via is None
            else f"{self.via}, called from workflow {self.workflow}"
        )
        return (
            f"{self.path}:{self.line}:{self.column}: {self.code} {self.name} {self.why} in {where}; "
            f"instead, {self.instead}"
        )


@dataclass(frozen=True)
class CheckResult:
    """What a check of some files found."""

    files: tuple[str, ...]
    workflows: tuple[str, ...]
    findings: tuple[Finding, ...]


def check_source(source: str, path: str = "<string>") -> CheckResult:
    """Check one module's source text.

    Raises:
        CheckError: the source does not parse.
    """
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        raise CheckError(f"{path}:{err.lineno}: cannot parse: {err.msg}") from err
    module = _Module(tree, path, source.splitlines())
    return CheckResult((path,), tuple(module.workflows), tuple(module.check()))


def check_paths(paths: Iterable[Path]) -> CheckResult:
    """Check every `.py` file of ``paths`` (files, or directories walked recursively)."""
    files: list[str] = []
    workflows: list[str] = []
    findings: list[Finding] = []
    for file in _python_files(paths):
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise CheckError(f"cannot read {file}: {err}") from err
        result = check_source(source, str(file))
        files.append(str(file))
        workflows.extend(result.workflows)
        findings.extend(result.findings)
    return CheckResult(tuple(files), tuple(workflows), tuple(findings))


def check_modules(targets: Sequence[str], *, search_path: Sequence[str] | None = None) -> CheckResult:
    """Check modules named by dotted path (`examples.orders`, a package includes its submodules) or
    by file or directory path; nothing is imported or run.

    Raises:
        CheckError: a target names no module or file, or a file does not parse.
    """
    return check_paths(locate(target, search_path) for target in targets)


def locate(target: str, search_path: Sequence[str] | None = None) -> Path:
    """The file or package directory of ``target`` (a path, or a dotted module name).

    Looks through the current directory and ``sys.path`` without importing; an editable install
    that only an import hook can find falls back to `importlib.util.find_spec`, which imports the
    parent packages (not the module itself).

    Raises:
        CheckError: nothing by that name.
    """
    as_path = Path(target)
    if target.endswith(".py") or "/" in target or as_path.is_dir():
        if as_path.exists():
            return as_path
        raise CheckError(f"{target}: no such file or directory")
    parts = target.split(".")
    if not all(part.isidentifier() for part in parts):
        raise CheckError(f"{target!r} is neither a file nor a dotted module name")
    roots = ["", *(sys.path if search_path is None else search_path)]
    for root in roots:
        base = Path(root or ".").joinpath(*parts)
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        if base.is_dir() and any(base.glob("*.py")):
            return base
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError) as err:
        raise CheckError(f"cannot find module {target!r}: {err}") from err
    if spec is None:
        raise CheckError(f"cannot find module {target!r} (on the current directory or sys.path)")
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise CheckError(f"module {target!r} has no Python source to check ({spec.origin})")
    return Path(spec.origin)


def _python_files(paths: Iterable[Path]) -> Iterator[Path]:
    seen: set[Path] = set()
    for path in paths:
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if file not in seen and "__pycache__" not in file.parts:
                seen.add(file)
                yield file


class _Module:
    """One parsed module: its import aliases, its workflow classes and its module-level functions."""

    def __init__(self, tree: ast.Module, path: str, lines: list[str]) -> None:
        self.path = path
        self.lines = lines
        self.aliases: dict[str, str] = {}
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.bound: set[str] = set()
        self.classes: list[tuple[ast.ClassDef, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".")[0]
                        self.aliases[head] = head
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound.add(node.id)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                name = self._workflow_name(node)
                if name is not None:
                    self.classes.append((node, name))

    @property
    def workflows(self) -> list[str]:
        return [name for _, name in self.classes]

    def qualified(self, node: ast.expr) -> str | None:
        """`a.b.c` with `a` resolved through the imports; None for anything else."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = self.aliases.get(node.id)
        if head is None:
            head = f"builtins.{node.id}" if node.id in _BUILTINS and node.id not in self.bound else node.id
        return ".".join([head, *reversed(parts)])

    def _workflow_name(self, node: ast.ClassDef) -> str | None:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = self.qualified(target)
            if name is None or not (name == "workflow.defn" or name.startswith("slotflow.workflow")):
                continue
            if not name.endswith(".defn"):
                continue
            if isinstance(decorator, ast.Call):
                for keyword in decorator.keywords:
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                        return f"{node.name} ({keyword.value.value!s})"
                if decorator.args and isinstance(decorator.args[0], ast.Constant):
                    return f"{node.name} ({decorator.args[0].value!s})"
            return node.name
        return None

    def check(self) -> list[Finding]:
        found: list[Finding] = []
        for cls, name in self.classes:
            visited: set[str] = set()
            pending: list[tuple[ast.AST, str | None]] = [(cls, None)]
            while pending:
                node, via = pending.pop()
                scan = _Scan(self, name, via)
                scan.visit(node)
                found.extend(f for f in scan.findings if not self._ignored(f.line))
                for helper in scan.helpers:
                    if helper not in visited:
                        visited.add(helper)
                        pending.append((self.functions[helper], f"helper {helper}()"))
        return sorted(found, key=lambda f: (f.line, f.column, f.code))

    def _ignored(self, line: int) -> bool:
        return 0 < line <= len(self.lines) and IGNORE_MARK in self.lines[line - 1]


def _rule_for(name: str) -> Rule | None:
    probe = name
    while probe:
        rule = _FORBIDDEN.get(probe)
        if rule is not None:
            return rule
        probe = probe.rpartition(".")[0]
    return None


class _Scan(ast.NodeVisitor):
    """Walks one workflow class (or one helper it calls) and collects findings."""

    def __init__(self, module: _Module, workflow: str, via: str | None) -> None:
        self.module = module
        self.workflow = workflow
        self.via = via
        self.findings: list[Finding] = []
        self.helpers: list[str] = []

    def report(self, node: ast.expr, name: str, rule: Rule, why: str | None = None) -> None:
        self.findings.append(
            Finding(
                path=self.module.path,
                line=node.lineno,
                column=node.col_offset + 1,
                code=rule.code,
                name=name,
                workflow=self.workflow,
                why=why or rule.why,
                instead=rule.instead,
                via=self.via,
            )
        )

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Annotations are types, not calls: `-> asyncio.Task[int]` runs nothing.
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                self.visit(decorator)
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
            self.visit(default)
        for statement in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(statement)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function  # noqa: N815 (NodeVisitor's names)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._reference(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._reference(node)

    def _reference(self, node: ast.Attribute | ast.Name) -> None:
        name = self.module.qualified(node)
        if name is None:
            # `pathlib.Path(...).read_text()` and the like: look inside the chain.
            self.generic_visit(node)
            return
        if not isinstance(node.ctx, ast.Load):
            return
        rule = _rule_for(name)
        if rule is not None:
            self.report(node, name, rule)

    def visit_Call(self, node: ast.Call) -> None:
        if (
            isinstance(node.func, ast.Name)
            and node.func.id in self.module.functions
            and node.func.id not in self.module.aliases
        ):
            self.helpers.append(node.func.id)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _PATH_IO:
            receiver = node.func.value
            if isinstance(receiver, ast.Call) and self.module.qualified(receiver.func) in (
                "pathlib.Path",
                "pathlib.PosixPath",
                "pathlib.WindowsPath",
            ):
                self.report(node, f"pathlib.Path.{node.func.attr}", IO)
        self.generic_visit(node)
