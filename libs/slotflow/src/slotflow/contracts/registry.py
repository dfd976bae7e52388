"""Maps `(type, version)` to the pydantic model that validates an envelope's data."""

from collections.abc import Iterable, Iterator

from pydantic import ValidationError

from slotflow.contracts.acceptance import ERROR_TYPE, STORED
from slotflow.contracts.envelope import Envelope, Message
from slotflow.errors import InvalidPayload, UnknownMessageType

MessageClass = type[Message]


class MessageRegistry:
    """A lookup from wire name and version to model; one per process is usual (`REGISTRY`)."""

    def __init__(self, models: Iterable[MessageClass] = ()) -> None:
        self._models: dict[tuple[str, int], MessageClass] = {}
        for model in models:
            self.register(model)

    def register(self, model: MessageClass) -> MessageClass:
        """Add ``model``; registering a different model under a taken name is a programming error."""
        name = (model.message_type, model.message_version)
        existing = self._models.get(name)
        if existing is not None and existing is not model:
            raise ValueError(f"{name} is already registered to {existing.__name__}")
        self._models[name] = model
        return model

    def model_for(self, type_: str, version: int) -> MessageClass:
        """The model for ``(type_, version)``.

        Raises:
            UnknownMessageType: nothing is registered under that name and version.
        """
        try:
            return self._models[(type_, version)]
        except KeyError:
            known = sorted(v for (t, v) in self._models if t == type_)
            hint = f"; known versions {known}" if known else ""
            raise UnknownMessageType(f"unknown message type {type_!r} version {version}{hint}") from None

    def parse(self, envelope: Envelope, *, stored: bool = False) -> Message:
        """Validate the envelope's data into its model.

        ``stored``: the record is one the caller stored itself after it was accepted (a waiting
        input read back); the acceptance rule was applied then and is not applied again.

        Raises:
            UnknownMessageType: the (type, version) is not registered.
            InvalidPayload: the data does not validate; the message lists each failing field.
        """
        model = self.model_for(envelope.type, envelope.version)
        try:
            return model.model_validate(envelope.data, context=STORED if stored else None)
        except ValidationError as err:
            raise InvalidPayload(f"invalid {envelope.type} v{envelope.version}: {_summarise(err)}") from err

    def __iter__(self) -> Iterator[MessageClass]:
        return iter(sorted(self._models.values(), key=lambda m: (m.message_type, m.message_version)))

    def __len__(self) -> int:
        return len(self._models)


def _summarise(err: ValidationError) -> str:
    parts = []
    for item in err.errors(include_url=False)[:10]:
        if item["type"] == ERROR_TYPE:
            # The acceptance rule's refusal already names the field (`definition.payload.note: ...`).
            parts.append(item["msg"])
            continue
        where = ".".join(str(p) for p in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
