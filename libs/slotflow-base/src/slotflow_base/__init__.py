"""What the slotflow library and the stats worker share (distribution `slotflow-base`).

The stats worker runs faust-streaming in an environment of its own that cannot hold the library
(decision 0005), yet it connects to the same Kafka and PostgreSQL, with the same settings and the
same secrets, as every other service. So the parts both need live here, once, and need nothing
but pydantic, pydantic-settings and aiokafka:

- `errors`: `SlotflowError`, the base of every error slotflow raises, and `ConfigurationError`;
- `logs`: the logging set-up and the masking of secrets in every line (`register_secret`,
  `redact`, the redacting filter and excepthook);
- `kafka.security` and `settings`: the Kafka TLS/SASL settings, where Kafka is
  (`KafkaConnection`), and the PostgreSQL connection (`PostgresSettings`);
- `stats`: what the api reads of the stats worker's tables (histograms, counter names, its schema).

The library re-exports each of them where it always had them (`slotflow.errors`, `slotflow.logs`,
`slotflow.kafka.security`, `slotflow.settings`).
"""
