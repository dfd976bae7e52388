"""The stats service's errors: under slotflow's base error (`slotflow_base.errors`), as every
slotflow package's, though the worker cannot import the library itself."""

from slotflow_base.errors import SlotflowError


class StatsError(SlotflowError):
    """Base of every error the stats service raises on purpose."""


class UndecodableEvent(StatsError):
    """A record on an event topic is not an envelope this service can read."""


class TopicMissing(StatsError):
    """A topic the processor consumes does not exist on the broker."""
