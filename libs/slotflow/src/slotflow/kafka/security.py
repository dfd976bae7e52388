"""How every Kafka client of slotflow authenticates: TLS and SASL settings, read from the environment
(SLOTFLOW_KAFKA_SECURITY_PROTOCOL, SLOTFLOW_KAFKA_SASL_*, SLOTFLOW_KAFKA_SSL_*; docs/security.md).

Defined in `slotflow_base.kafka.security`, which the stats worker shares (it cannot import this
library, decision 0005): one definition of the variables, their checks and their masking.
"""

from slotflow_base.kafka.security import PASSWORD_MECHANISMS as PASSWORD_MECHANISMS
from slotflow_base.kafka.security import KafkaSecurity as KafkaSecurity
from slotflow_base.kafka.security import SaslMechanism as SaslMechanism
from slotflow_base.kafka.security import SecurityProtocol as SecurityProtocol
from slotflow_base.kafka.security import TokenFunction as TokenFunction
from slotflow_base.kafka.security import load_token_function as load_token_function
