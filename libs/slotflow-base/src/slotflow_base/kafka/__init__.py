"""Kafka client settings shared by the library and the stats worker: TLS, SASL, OAUTHBEARER."""
