"""A real single-node KRaft Kafka broker run from jars cached outside the checkout."""
from ops.kafka.broker import Broker, BrokerError

__all__ = ["Broker", "BrokerError"]
