"""The TLS options of ``rediss+sentinel://`` and ``rediss+cluster://`` URLs (llmgw_contract/redis_url.py)."""

from __future__ import annotations

from llmgw_contract.redis_url import parse


def test_tls_schemes_keep_their_kind_and_take_the_ssl_options() -> None:
    url = "rediss+cluster://u:p@h1:7000,h2:7001?ssl_ca_certs=/ca.pem&ssl_check_hostname=false&db=0&x=1"
    target = parse(url)
    assert (target.kind, target.nodes, target.username) == ("cluster", (("h1", 7000), ("h2", 7001)), "u")
    assert target.tls_kwargs() == {"ssl": True, "ssl_ca_certs": "/ca.pem", "ssl_check_hostname": False}
    sentinel = parse("rediss+sentinel://h:26379/llmgw?ssl_certfile=/c.pem&ssl_keyfile=/k.pem")
    assert (sentinel.kind, sentinel.service) == ("sentinel", "llmgw")
    assert sentinel.tls_kwargs() == {"ssl": True, "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem"}


def test_plain_schemes_have_no_tls() -> None:
    assert parse("redis+cluster://h:7000?ssl_ca_certs=/ca.pem").tls_kwargs() == {}
    assert parse("redis+sentinel://h:26379/llmgw").tls is None
