"""What the saga passes between its steps: plain pydantic models, serialised into history as JSON."""

from datetime import timedelta

from pydantic import BaseModel, Field

#: Between authorization and capture: the fraud-review window of the seed's scenario.
HOLD = timedelta(hours=24)


class Line(BaseModel):
    sku: str = Field(min_length=1)
    quantity: int = Field(ge=1)


class Order(BaseModel):
    order_id: str = Field(min_length=1)
    customer_id: str = Field(min_length=1)
    amount_cents: int = Field(gt=0)
    #: The payment method; the sandbox card `tok_capture_declined` authorizes but never captures.
    card_token: str = Field(min_length=1)
    lines: list[Line] = Field(min_length=1)
    #: How long the authorization is held before the capture (the demo and tests shorten it).
    hold: timedelta = Field(default=HOLD, ge=timedelta(0))


class Authorization(BaseModel):
    authorization_id: str
    order_id: str
    amount_cents: int
    #: The gateway's token for the card (never the card number): its capture decides with it.
    card_token: str


class Reservation(BaseModel):
    reservation_id: str
    order_id: str
    lines: list[Line]


class Receipt(BaseModel):
    order_id: str
    capture_id: str
    amount_cents: int
