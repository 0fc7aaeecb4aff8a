"""`m1flow cluster --secure` without an engine: the credentials folder (made once, reused, keys
owner-only, each principal's folder only its own) and the CLI following the last up's mode."""
from __future__ import annotations

import argparse

from cryptography import x509

from ops import cluster as cluster_mod
from ops.cluster import ClusterConfig
from ops.cluster_secure import PRINCIPALS, identity, make_secrets


def test_secrets_are_made_once_and_each_folder_holds_one_identity(tmp_path):
    root = make_secrets(tmp_path / "s")
    ca_before = (root / "ca" / "ca.pem").read_bytes()
    key_before = (root / "reward" / "key.pem").read_bytes()
    assert make_secrets(root) == root  # a second up reuses the CA and every identity
    assert (root / "ca" / "ca.pem").read_bytes() == ca_before and (root / "reward" / "key.pem").read_bytes() == key_before
    assert root.stat().st_mode & 0o077 == 0
    for name in PRINCIPALS:
        block = identity(root, name)
        assert block.principal == name  # the CN the broker maps to User:<name>
        assert (root / name).stat().st_mode & 0o077 == 0 and block.key_file.stat().st_mode & 0o777 == 0o600
    broker = x509.load_pem_x509_certificate((root / "broker" / "cert.pem").read_bytes())
    names = broker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert {"kafka", "localhost"} <= set(names)
    sandbox = x509.load_pem_x509_certificate((root / "sandbox" / "cert.pem").read_bytes())
    assert "sandbox" in sandbox.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert not any(p.name == "ca.key" for name in PRINCIPALS for p in (root / name).iterdir())


def test_cli_flag_and_the_recorded_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("M1FLOW_CACHE", str(tmp_path / "cache"))
    args = dict(project="p1", gpu=False, secure=False)
    assert ClusterConfig().secure is False and "M1FLOW_SECRETS_DIR" not in ClusterConfig().compose_env()
    up = cluster_mod._config(argparse.Namespace(action="up", **{**args, "secure": True}))
    assert up.secure and up.compose_env()["M1FLOW_SECRETS_DIR"] == str(tmp_path / "cache" / "docker" / "p1-secrets")
    cluster_mod._record_mode(up.model_copy(update={"secrets_dir": str(tmp_path / "mine")}))
    status = cluster_mod._config(argparse.Namespace(action="status", **args))  # no --secure: follows the up
    assert status.secure and status.secrets_path == tmp_path / "mine"
    assert cluster_mod._config(argparse.Namespace(action="up", **args)).secure is False  # up says its own mode
    cluster_mod._record_mode(ClusterConfig(project="p1"))
    assert cluster_mod._config(argparse.Namespace(action="token", **args)).secure is False
