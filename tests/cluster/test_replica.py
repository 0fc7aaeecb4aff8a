"""`M1FLOW_REPLICA=auto`: the index in a container's name, from its hostname or a reverse DNS lookup.
A small UDP DNS server stands in for Docker's here; the cluster test checks the real one."""
from __future__ import annotations

import socket
import struct
import threading

import pytest

from m1flow.runtime.config import ServiceConfig
from m1flow.runtime.replica import ReplicaError, container_replica, reverse_lookup


def encode_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"


class FakeDns:
    """Answers every PTR query with `name`, NXDOMAIN when it is empty. The name's first label is
    spelled out and the rest is a compression pointer into the question (`name` must end like the
    query, e.g. in "in-addr.arpa"), as real servers compress."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            ident = struct.unpack(">H", query[:2])[0]
            question = query[12:]
            if not self.name:
                self.sock.sendto(struct.pack(">HHHHHH", ident, 0x8183, 1, 0, 0, 0) + question, peer)
                continue
            first, rest = self.name.split(".", 1)
            pointer = 12 + question.index(encode_name(rest))
            rdata = bytes([len(first)]) + first.encode() + struct.pack(">H", 0xC000 | pointer)
            answer = struct.pack(">HHHIH", 0xC00C, 12, 1, 600, len(rdata)) + rdata
            self.sock.sendto(struct.pack(">HHHHHH", ident, 0x8180, 1, 1, 0, 0) + question + answer, peer)

    def close(self) -> None:
        self.sock.close()


def test_index_from_a_statefulset_style_hostname():
    assert container_replica("m1flow-svc_reward-3") == 3
    assert container_replica("rollout-0") == 0


def test_reverse_lookup_reads_a_compressed_ptr_answer():
    server = FakeDns("m1flow-svc_reward-2.in-addr.arpa")
    try:
        assert reverse_lookup("172.18.0.5", "127.0.0.1", port=server.port) == "m1flow-svc_reward-2.in-addr.arpa"
    finally:
        server.close()


def test_nxdomain_is_an_error_not_a_name():
    server = FakeDns("")
    try:
        with pytest.raises(OSError, match="no PTR record"):
            reverse_lookup("172.18.0.5", "127.0.0.1", port=server.port)
    finally:
        server.close()


def test_no_index_anywhere_names_what_was_tried(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("")  # no DNS server to ask
    with pytest.raises(ReplicaError, match="set M1FLOW_REPLICA"):
        container_replica("localhost", resolv)


def test_config_takes_numbers_and_auto():
    assert ServiceConfig.load([], env={"M1FLOW_REPLICA": "4"}).replica == 4
    assert ServiceConfig.load(["--replica", "2"], env={}).replica == 2
