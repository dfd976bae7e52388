"""The static check finds each determinism trap in workflow code, where it is, and nothing else."""

import re
from pathlib import Path

import pytest

from slotflow.errors import SlotflowError
from slotflow.workflow.check import CheckError, check_modules, check_source, locate

SAMPLES = Path(__file__).parent / "samples"
EXPECT = re.compile(r"# expect: (SFW\d{3})")


def expected(path: Path) -> list[tuple[int, str]]:
    """(line, code) of every `# expect: CODE` mark in a sample."""
    lines = path.read_text().splitlines()
    return [(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := EXPECT.search(line))]


def test_every_trap_in_the_sample_is_found_on_its_line_and_nothing_else() -> None:
    result = check_modules([str(SAMPLES / "traps.py")])

    assert result.workflows == ("Traps (samples.traps)",)
    found = sorted((f.line, f.code) for f in result.findings)
    assert found == sorted(expected(SAMPLES / "traps.py"))


@pytest.mark.parametrize(
    ("needle", "message"),
    [
        ("datetime.datetime.now reads the host clock in workflow Traps", "use workflow.now()"),
        ("time.monotonic reads the host clock", "use workflow.now()"),
        ("asyncio.sleep waits on the host clock", "use await workflow.sleep(timedelta(...))"),
        ("time.sleep waits on the host clock", "use await workflow.sleep("),
        ("asyncio.wait_for times out on the host clock", "workflow.wait_condition("),
        ("random.random draws host randomness", "use workflow.random()"),
        ("random.choice draws host randomness", "use workflow.random()"),
        ("uuid.uuid4 makes a host-random or host-clock id", "use workflow.uuid4()"),
        ("uuid.uuid1 makes a host-random or host-clock id", "use workflow.uuid4()"),
        ("os.environ reads the process environment", "pass configuration in the workflow input"),
        ("os.getenv reads the process environment", "pass configuration in the workflow input"),
        ("builtins.open does direct I/O", "an activity: await workflow.execute_activity("),
        ("pathlib.Path.write_text does direct I/O", "an activity"),
        ("socket.create_connection does direct I/O", "an activity"),
        ("requests.post does direct I/O", "an activity"),
        ("httpx.AsyncClient does direct I/O", "an activity"),
        ("aiohttp.ClientSession does direct I/O", "an activity"),
        ("asyncpg.connect does direct I/O", "an activity"),
        ("aiokafka.AIOKafkaProducer does direct I/O", "an activity"),
        ("subprocess.run starts or controls a process", "an activity"),
        ("asyncio.create_task runs on the host event loop", "use workflow.create_task()"),
        ("asyncio.get_running_loop runs on the host event loop", "use workflow.create_task()"),
        ("asyncio.gather runs on the host event loop", "await workflow.gather(...)"),
        ("asyncio.Event waits on the host event loop", "use await workflow.wait_condition("),
        ("threading.Thread uses threads", "an activity"),
        ("concurrent.futures.ThreadPoolExecutor uses threads", "an activity"),
    ],
)
def test_each_trap_says_what_it_breaks_and_what_to_use_instead(needle: str, message: str) -> None:
    lines = [f.format() for f in check_modules([str(SAMPLES / "traps.py")]).findings]

    matching = [line for line in lines if needle in line]
    assert matching, f"no finding says {needle!r}:\n" + "\n".join(lines)
    assert message in matching[0]
    assert re.match(r"^.+traps\.py:\d+:\d+: SFW\d{3} ", matching[0])


def test_a_trap_in_a_module_function_the_workflow_calls_names_the_helper() -> None:
    findings = check_modules([str(SAMPLES / "traps.py")]).findings

    (helper,) = [f for f in findings if f.via is not None]
    assert helper.via == "helper fmt_deadline()"
    assert "called from workflow Traps (samples.traps)" in helper.format()


def test_the_clean_sample_passes() -> None:
    result = check_modules([str(SAMPLES / "clean.py")])

    assert result.workflows == ("Clean (samples.clean)",)
    assert result.findings == ()


def test_a_package_is_checked_file_by_file_by_its_dotted_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(SAMPLES.parents[3])
    result = check_modules(["tests.unit.workflow.samples"])

    assert sorted(Path(f).name for f in result.files) == ["__init__.py", "clean.py", "traps.py"]
    assert {Path(f.path).name for f in result.findings} == {"traps.py"}


@pytest.mark.parametrize(
    "imports",
    [
        "from slotflow import workflow\n",
        "import slotflow.workflow as workflow\n",
        "from slotflow import workflow as wf\nworkflow = wf\n",
    ],
)
def test_imports_are_resolved_whatever_the_alias(imports: str) -> None:
    decorator = "wf.defn" if "as wf" in imports else "workflow.defn"
    source = (
        imports
        + "from time import time as now_ish\nimport random as r\n"
        + f"@{decorator}\nclass W:\n    async def run(self) -> None:\n        now_ish(); r.randint(1, 2)\n"
    )

    result = check_source(source, "w.py")

    line = source.splitlines().index("        now_ish(); r.randint(1, 2)") + 1
    assert [(f.name, f.line) for f in result.findings] == [("time.time", line), ("random.randint", line)]


def test_names_the_module_rebinds_are_not_taken_for_builtins_or_traps() -> None:
    source = (
        "from slotflow import workflow\n"
        "def open(name: str) -> str:\n    return name\n"
        "@workflow.defn\nclass W:\n"
        "    async def run(self, time: int) -> asyncio.Task[int]:\n"
        "        uuid = {'uuid4': 1}\n"
        "        return open('x'), time, uuid\n"
    )

    assert check_source(source).findings == ()


def test_code_outside_workflow_classes_is_not_checked() -> None:
    source = "import time\nclass Plain:\n    def run(self) -> float:\n        return time.time()\n"

    result = check_source(source)

    assert result.workflows == ()
    assert result.findings == ()


def test_a_file_that_does_not_parse_is_a_clear_error() -> None:
    with pytest.raises(CheckError, match=r"broken\.py:2: cannot parse"):
        check_source("x = 1\ndef (:\n", "broken.py")
    assert issubclass(CheckError, SlotflowError)


def test_a_module_that_does_not_exist_is_a_clear_error() -> None:
    with pytest.raises(CheckError, match=r"cannot find module 'no_such_pkg\.orders'"):
        locate("no_such_pkg.orders", search_path=[])
    with pytest.raises(CheckError, match="no such file"):
        locate("missing/orders.py")
