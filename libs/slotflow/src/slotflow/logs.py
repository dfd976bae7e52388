"""One logging set-up for every service process: plain text or JSON lines, aiokafka quiet, every
secret masked (SLOTFLOW_LOG_FORMAT, SLOTFLOW_LOG_LEVEL, SLOTFLOW_LOG_KAFKA_LEVEL).

Defined in `slotflow_base.logs`, which the stats worker shares (it cannot import this library,
decision 0005), so one registry of secrets masks every service's output; every name is here too.
"""

from slotflow_base.logs import FORMATS as FORMATS
from slotflow_base.logs import LEVELS as LEVELS
from slotflow_base.logs import MIN_SECRET_LENGTH as MIN_SECRET_LENGTH
from slotflow_base.logs import REDACTED as REDACTED
from slotflow_base.logs import TEXT_FORMAT as TEXT_FORMAT
from slotflow_base.logs import BadLogSetting as BadLogSetting
from slotflow_base.logs import JsonFormatter as JsonFormatter
from slotflow_base.logs import RedactingFilter as RedactingFilter
from slotflow_base.logs import TextFormatter as TextFormatter
from slotflow_base.logs import configure_logging as configure_logging
from slotflow_base.logs import dsn_password as dsn_password
from slotflow_base.logs import extra_fields as extra_fields
from slotflow_base.logs import redact as redact
from slotflow_base.logs import redacting_excepthook as redacting_excepthook
from slotflow_base.logs import register_dsn as register_dsn
from slotflow_base.logs import register_secret as register_secret
