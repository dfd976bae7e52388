"""slotflow: a distributed job scheduler and durable workflow engine on Kafka and PostgreSQL."""

from importlib.metadata import PackageNotFoundError, version

# The distribution is `slotflow-lib` (`slotflow` on PyPI is an unrelated project); its version is
# the repository's VERSION file, the one version of every slotflow distribution.
try:
    __version__ = version("slotflow-lib")
except PackageNotFoundError:  # imported from a source tree without being installed (PYTHONPATH)
    __version__ = "0+unknown"
