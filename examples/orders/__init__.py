"""The seed's order saga as a slotflow workflow (see README.md).

`orders.workflow.Checkout` authorizes the payment, reserves the stock, waits 24 hours (a durable
timer), then captures; when the capture fails for good it releases the stock and then voids the
authorization, newest step first. `orders.activities` holds the five steps as `@handler`s.
"""
