"""slotflow: a distributed job scheduler and durable workflow engine on Kafka and PostgreSQL."""

__version__ = "0.1.0"
