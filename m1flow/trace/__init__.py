"""A sample's story read back from the topics (`m1flow trace`, the monitor's per-group page): the
ids that link the records (`ids`), and the bounded search that finds them (`story`)."""
