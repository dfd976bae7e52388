"""Where the stats worker copies its tables: the one setting the api needs to read them."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class StatsSchemaSettings(BaseSettings):
    """`SLOTFLOW_STATS_DB_SCHEMA`: the PostgreSQL schema the worker writes and the api reads.

    The worker's other settings (`slotflow_stats.config.StatsSettings`) build on this one.
    """

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_STATS_", extra="ignore")

    #: The PostgreSQL schema the tables are copied to (the api reads it).
    db_schema: str = Field(default="stats", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
