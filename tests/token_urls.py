"""Token URLs judged by both the operator (`internal_literal`, unit tests) and the
`tooladapter-issuer-addresses` admission policy (integration tests): the two must agree on
every one of them."""

from __future__ import annotations

#: (url, words of the operator's reason): the operator would post a client secret to this
#: machine, an internal service, or a host another parser would read differently.
REFUSED: list[tuple[str, str]] = [
    ("https://localhost./token", "this machine"),
    ("https://LOCALHOST/token", "this machine"),
    ("https://issuer.localhost/token", "this machine"),
    ("https://10.1.2.3/token", "not a public address"),
    ("https://127.0.0.1:8443/token", "not a public address"),
    ("https://192.168.1.1/token", "not a public address"),
    ("https://100.64.0.1/token", "not a public address"),
    ("https://[fd00::1]/token", "not a public address"),
    ("https://[::ffff:10.0.0.1]/token", "not a public address"),
    ("https://[::1]/token", "not a public address"),
    ("https://169.254.169.254/token", "not a public address"),
    # IPv4 inside IPv6 that a router delivers to the IPv4 address (NAT64, 6to4).
    ("https://[64:ff9b::a00:1]/token", "not a public address"),
    ("https://[2002:a00:1::]/token", "not a public address"),
    # What a resolver reads as 10.0.0.1 or 127.0.0.1 (inet_aton's spellings).
    ("https://167772161/token", "non-canonical"),
    ("https://0x7f000001/token", "non-canonical"),
    ("https://0177.0.0.1/token", "non-canonical"),
    ("https://127.1/token", "non-canonical"),
    ("https://0/token", "non-canonical"),
    # Ranges a translator or the network delivers elsewhere, refused whole (attack pass).
    ("https://[64:ff9b:1::a00:1]/token", "not a public address"),
    ("https://[::ffff:0:a9fe:a9fe]/token", "not a public address"),
    ("https://192.88.99.1/token", "not a public address"),
    ("https://[3fff::1]/token", "not a public address"),
    ("https://[fec0::1]/token", "not a public address"),
    # Spellings a URL library maps onto 127.0.0.1 or localhost (attack pass).
    ("https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/token", "not an ASCII host name"),
    ("https://127\u30020\u30020\u30021/token", "not an ASCII host name"),
    (
        "https://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3/token",
        "not an ASCII host name",
    ),
    # Credentials in the URL: which part is the host would depend on the parser.
    ("https://issuer.example.com@10.0.0.1/token", "user or password"),
    ("https://user:pass@issuer.example.com/token", "user or password"),
]

#: Public issuers, by name or by a public address.
ACCEPTED: list[str] = [
    "https://issuer.example.com/token",
    "https://issuer.example.com:8443/oauth/token",
    "https://8.8.8.8/token",
    "https://[2606:4700:4700::1111]/token",
    "https://123.example.com/token",  # a name that starts with digits is a name
]
