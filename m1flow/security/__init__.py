"""Identities and their use: a CA and one certificate per principal (pki), the typed block a
process reads them from (config), and the Kafka client settings derived from it."""
