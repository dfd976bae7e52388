"""The stats service's errors (it runs without the slotflow library, so it has its own base)."""


class StatsError(Exception):
    """Base of every error the stats service raises on purpose."""


class UndecodableEvent(StatsError):
    """A record on an event topic is not an envelope this service can read."""


class TopicMissing(StatsError):
    """A topic the processor consumes does not exist on the broker."""
