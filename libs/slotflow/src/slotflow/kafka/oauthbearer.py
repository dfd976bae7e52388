"""OAUTHBEARER as Kafka's own client speaks it: a refused token ends in an error, not a hang.

Defined in `slotflow_base.kafka.oauthbearer` (the stats worker's Kafka clients use it too).
"""

from slotflow_base.kafka.oauthbearer import ERROR_ACKNOWLEDGEMENT as ERROR_ACKNOWLEDGEMENT
from slotflow_base.kafka.oauthbearer import (
    RejectionAwareOAuthAuthenticator as RejectionAwareOAuthAuthenticator,
)
from slotflow_base.kafka.oauthbearer import install as install
