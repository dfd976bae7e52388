"""The catalogue is the one list of message types: every concrete model is in it, once."""

import importlib
import pkgutil

import slotflow.contracts
from slotflow.contracts import REGISTRY, Message
from slotflow.contracts.catalogue import ALL_MESSAGE_TYPES, COMMAND_TYPES, EVENT_TYPES


def _concrete_models() -> set[type[Message]]:
    for info in pkgutil.iter_modules(slotflow.contracts.__path__, prefix="slotflow.contracts."):
        importlib.import_module(info.name)
    found: set[type[Message]] = set()
    pending = list(Message.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("slotflow.contracts.") and "message_type" in vars(cls):
            found.add(cls)
    return found


def test_every_concrete_message_model_is_catalogued_once_and_registered() -> None:
    assert len(ALL_MESSAGE_TYPES) == len(set(ALL_MESSAGE_TYPES))
    assert not set(COMMAND_TYPES) & set(EVENT_TYPES)
    assert _concrete_models() == set(ALL_MESSAGE_TYPES)
    for model in ALL_MESSAGE_TYPES:
        assert REGISTRY.model_for(model.message_type, model.message_version) is model
