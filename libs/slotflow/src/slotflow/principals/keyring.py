"""The signing keys a command consumer checks signatures against, kept in memory from the keys topic.

The api is the only writer of the keys topic (`slotflow.keys.v1`, compacted, one partition); each
record is a key's whole state. A consumer reads the topic from the start when it starts, then,
before it verifies commands, catches up to the topic's end as it is at that moment (`refresh`):
one ListOffsets round trip, and the records written since, if any. So a key revoked through the
api is refused by every service for every command it verifies after the revocation reached the
topic; there is no cache to expire. A service that cannot read the topic does not verify (the
refresh raises `TransientStorageError`): its commands wait, as for any outage, and none passes on
stale keys.
"""

import asyncio
import logging

from pydantic import ValidationError

from slotflow.contracts.codec import decode
from slotflow.contracts.keys import SigningKey
from slotflow.contracts.topics import SIGNING_KEYS
from slotflow.errors import PoisonMessage
from slotflow.kafka.reading import TopicFollower
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings

log = logging.getLogger(__name__)

#: How long a refresh may take to reach the topic's end before the verification waits it out.
REFRESH_TIMEOUT_S = 10.0


class KeyRing:
    """Keys by id. This base holds what it is given (tests, tools); `KafkaKeyRing` follows the topic."""

    def __init__(self, keys: list[SigningKey] | None = None) -> None:
        self._keys: dict[str, SigningKey] = {}
        #: Records on the keys topic that were not a SigningKey (skipped, logged).
        self.skipped = 0
        for key in keys or ():
            self.put(key)

    def get(self, key_id: str) -> SigningKey | None:
        return self._keys.get(key_id)

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, key: SigningKey) -> None:
        """Take ``key`` as the newest state of its id. A revocation is final: a later record that
        says otherwise (there should be none; the api refuses to register a revoked key again)
        does not bring the key back."""
        known = self._keys.get(key.key_id)
        if known is not None and known.revoked_at is not None and key.revoked_at is None:
            log.warning("keys: ignoring a record that would un-revoke %s", key.key_id)
            return
        self._keys[key.key_id] = key

    def apply(self, record: Record) -> None:
        """Take one record of the keys topic; anything but a SigningKey is skipped and logged."""
        try:
            envelope = decode(record.value)
            if envelope.type != SigningKey.message_type:
                raise PoisonMessage(f"unexpected type {envelope.type!r}")
            key = SigningKey.model_validate(envelope.data)
        except (PoisonMessage, ValidationError) as err:
            self.skipped += 1
            log.error("keys: skipping %s: %s", record.position, err)
            return
        self.put(key)

    async def refresh(self) -> None:
        """Catch up with the keys' source; nothing to do for keys given in memory."""


class KafkaKeyRing(KeyRing):
    """The keys topic of this deployment, read from the start and caught up before each use."""

    def __init__(self, kafka: KafkaSettings, *, client_id: str, timeout: float = REFRESH_TIMEOUT_S) -> None:
        super().__init__()
        self._follower = TopicFollower(kafka, kafka.topic(SIGNING_KEYS), client_id=f"{client_id}-keys")
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self._started = False

    async def start(self) -> None:
        """Read every key the topic holds.

        Raises:
            TopicNotFound, KafkaAuthenticationFailed, KafkaAccessDenied: the topic cannot be read
                (the service stops and says so: it could verify nothing).
            TransientStorageError: Kafka was unreachable.
        """
        await self._follower.start()
        self._started = True
        await self.refresh()
        log.info("keys: %d signing keys known", len(self))

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._follower.stop()

    async def refresh(self) -> None:
        """Apply every key record written before this call.

        Raises:
            TransientStorageError: the topic's end could not be read or reached in time.
        """
        async with self._lock:
            await self._follower.catch_up(self.apply, timeout=self._timeout)
