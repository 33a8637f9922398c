"""This machine's side of the cluster: the node's address and free local ports."""

from __future__ import annotations

import json
import socket
import subprocess


def node_ip() -> str:
    """The node's own address: the first IPv4 address of the default route's interface."""
    routes = json.loads(subprocess.check_output(["ip", "-j", "-4", "route", "show", "default"]))
    dev = routes[0]["dev"]
    addrs = json.loads(subprocess.check_output(["ip", "-j", "-4", "addr", "show", "dev", dev]))
    return str(addrs[0]["addr_info"][0]["local"])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
