"""A whole answer whose content-encoding expands past the body limit (issue 38): a 1 MB gzip that decodes to
1 GiB gives the client a 502, and the proxy's memory grows by less than twice the limit (`max_body_bytes`)
on the way - measured as the peak resident set of a proxy process of its own."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib

import httpx
import pytest

from proxy.config import Settings
from proxy.errors import UpstreamUnavailable
from proxy.testing.raw_upstream import RawAnswer
from proxy.upstream.client import Upstream
from tests.conftest import ROOT, chat
from tests.test_upstream_whole import scripted

_CHUNK = 1 << 20


def gzip_bomb(megabytes: int = 1024) -> bytes:
    """A valid gzip member of `megabytes` MiB of zeros, about a thousandth of that in size: each MiB compressed
    once (a full flush makes every block the same bytes), the trailer's CRC and size computed."""
    zero = bytes(_CHUNK)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = packer.compress(zero) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(zero) + packer.flush(zlib.Z_FULL_FLUSH)
    end = packer.flush(zlib.Z_FINISH)[:-8]
    crc = 0
    for _ in range(megabytes):
        crc = zlib.crc32(zero, crc)
    return head + block * (megabytes - 1) + end + struct.pack("<II", crc, (megabytes * _CHUNK) & 0xFFFFFFFF)


def test_the_bomb_is_what_it_says() -> None:
    bomb = gzip_bomb(64)
    assert len(bomb) < 80_000
    assert len(zlib.decompress(bomb, 31)) == 64 * _CHUNK


@pytest.mark.parametrize("whole", [True, False])
async def test_an_answer_decoding_past_the_limit_is_a_failure(whole: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the proxy's own connections and on httpx's (an upstream behind an HTTP proxy of the environment)."""
    bomb = gzip_bomb(64)
    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
              b"content-length: " + str(len(bomb)).encode() + b"\r\n\r\n" + bomb)
    async with scripted(lambda n: answer) as server:
        if not whole:
            monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # reached directly, but through httpx
        upstream = Upstream(Settings(upstream=server.url, max_body_bytes=8 * _CHUNK))
        try:
            assert (upstream._whole is not None) is whole or not whole
            with pytest.raises(UpstreamUnavailable, match="TooLarge"):
                await upstream.request("POST", "/chat/completions", headers={}, content=b"{}")
            small = gzip_bomb(4)  # under the limit: decoded as before
            server.reply = lambda n: (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: "
                                      + str(len(small)).encode() + b"\r\n\r\n" + small)
            response = await upstream.request("POST", "/chat/completions", headers={}, content=b"{}")
            assert len(response.content) == 4 * _CHUNK and response.headers["content-encoding"] == "gzip"
        finally:
            await upstream.aclose()


def test_through_the_proxy_a_bomb_is_a_502(start_proxy, tmp_path) -> None:
    from proxy.testing.raw_upstream import RawUpstream
    from proxy.testing.server import ServerThread

    upstream = RawUpstream(["qwen3.5-27b"])
    with ServerThread(upstream.app) as server:
        upstream.url = server.url + "/v1"
        proxy = start_proxy(upstream.url)
        upstream.script(RawAnswer(gzip_bomb(256), content_type="application/json",
                                  headers={"content-encoding": "gzip"}))
        with proxy.client() as client:
            response = client.post("/v1/chat/completions", json=chat())
        assert response.status_code == 502, response.text
        assert response.json()["error"]["type"] == "upstream_error"


_MEASURE = r"""
import json, sys, httpx
sys.path.insert(0, sys.argv[1])
from proxy.http.app import create_app
from proxy.config import Settings
from proxy.testing.raw_upstream import RawAnswer, RawUpstream
from proxy.testing.server import ServerThread
from tests.test_upstream_bomb import gzip_bomb

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

bomb = gzip_bomb(1024)
upstream = RawUpstream(["m"])
with ServerThread(upstream.app) as up:
    upstream.url = up.url + "/v1"
    settings = Settings(upstream=upstream.url, db="sqlite:///" + sys.argv[2], policy=sys.argv[3], log_level="error")
    with ServerThread(create_app(settings)) as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=proxy.url, timeout=120) as client:
            client.post("/v1/chat/completions", json=body)  # warm: every module loaded, pools made
            before = kib("VmRSS")
            open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from here
            upstream.script(RawAnswer(bomb, content_type="application/json", headers={"content-encoding": "gzip"}))
            status = client.post("/v1/chat/completions", json=body).status_code
        print(json.dumps({"status": status, "before_kib": before, "peak_kib": kib("VmHWM"),
                          "limit_kib": settings.http.max_body_bytes // 1024}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_memory_a_bomb_costs_stays_under_twice_the_limit(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(ROOT), str(tmp_path / "store.db"),
                           str(ROOT / "policies" / "strict.yaml")], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["status"] == 502
    growth = found["peak_kib"] - found["before_kib"]
    assert growth < 2 * found["limit_kib"], found


def test_httpx_would_have_held_it_all() -> None:
    """The control: httpx decodes a whole body at once, which is what the proxy no longer does."""
    response = httpx.Response(200, headers={"content-encoding": "gzip"}, content=gzip_bomb(16))
    assert len(response.content) == 16 * _CHUNK
