"""The event bus: typed, framed protobuf records over real Kafka with at-least-once delivery,
idempotent consumers, dead-lettering and commit-after-acknowledge."""
from m1flow.bus.codec import CodecError, decode, encode, header, new_id
from m1flow.bus.producer import Producer
from m1flow.bus.records import Record
from m1flow.bus.topics import ALL_TOPICS, TopicSpec, spec
from m1flow.bus.worker import Context, Handler, HandlerBase, StreamWorker

__all__ = ["ALL_TOPICS", "CodecError", "Context", "Handler", "HandlerBase", "Producer", "Record", "StreamWorker",
           "TopicSpec", "decode", "encode", "header", "new_id", "spec"]
