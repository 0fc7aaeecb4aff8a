"""A real single-node KRaft Kafka broker run from jars cached outside the checkout."""
from m1flow.kafka.broker import Broker, BrokerError

__all__ = ["Broker", "BrokerError"]
