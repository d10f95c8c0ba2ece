"""A corpus of secrets in their real formats and of look-alikes that are not secrets, made when imported.

No value here is a credential: each secret is drawn from a seeded generator in the format its issuer uses (so no
secret-shaped literal sits in the repository either), and each sits in the kind of text a tool result carries
(a `.env` file, a config, a JSON key file, shell output). `SECRETS` holds (kind, types that count as found,
text, secret values that must be gone); `LOOK_ALIKES` holds (kind, text) that must pass unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import textwrap
import uuid

__all__ = ["LOOK_ALIKES", "SECRETS"]

_rng = random.Random(38)
_ALNUM = string.ascii_letters + string.digits
_UPPER = string.ascii_uppercase + "234567"
_HEX = "0123456789abcdef"


def _pick(alphabet: str, size: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(size))


def _b64(size: int) -> str:
    return base64.b64encode(_rng.randbytes(size)).decode()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _pem(label: str, size: int) -> str:
    body = "\n".join(textwrap.wrap(_b64(size), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"


def _jwt() -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": _pick(string.digits, 10), "name": "Test User", "iat": 1_700_000_000}).encode())
    return f"{header}.{payload}.{_b64url(_rng.randbytes(32))}"


def _secrets() -> list[tuple[str, tuple[str, ...], str, tuple[str, ...]]]:
    out: list[tuple[str, tuple[str, ...], str, tuple[str, ...]]] = []

    def add(kind: str, types: str | tuple[str, ...], text: str, *values: str) -> None:
        out.append((kind, (types,) if isinstance(types, str) else types, text, values))

    for label, size in (("RSA PRIVATE KEY", 1190), ("OPENSSH PRIVATE KEY", 400), ("EC PRIVATE KEY", 121),
                        ("PRIVATE KEY", 1218)):
        pem = _pem(label, size)
        add("private key (PEM/OpenSSH)", "private-key", f"$ cat id_key\n{pem}", pem.split("\n")[1])
    for n in range(2):
        pem = _pem("PRIVATE KEY", 1218)
        key_file = json.dumps({"type": "service_account", "project_id": f"demo-{n}", "private_key_id": _pick(_HEX, 40),
                               "private_key": pem, "client_email": f"svc{n}@demo-{n}.iam.gserviceaccount.com"},
                              indent=2)
        add("GCP service-account JSON", "private-key", key_file, pem.split("\n")[1])
    for prefix in ("AKIA", "ASIA"):
        key_id = prefix + _pick(_UPPER, 16)
        add("AWS access key id", "aws-access-token", f"[default]\naws_access_key_id = {key_id}\n", key_id)
    for _ in range(2):
        secret = _pick(_ALNUM + "/+", 40)
        add("AWS secret access key", ("aws-secret-access-key", "generic-api-key"),
            f"[default]\nregion = eu-west-1\naws_secret_access_key = {secret}\n", secret)
    for name in ("stacct1", "stacct2"):
        key = _b64(64)
        add("Azure storage connection string", "azure-storage-connection-string",
            f'AZURE_STORAGE="DefaultEndpointsProtocol=https;AccountName={name};AccountKey={key};'
            'EndpointSuffix=core.windows.net"', key)
    for prefix, size in (("ghp_", 36), ("gho_", 36), ("github_pat_", 82)):
        token = prefix + _pick(_ALNUM if size == 36 else _ALNUM + "_", size)
        add("GitHub token", ("github-pat", "github-oauth", "github-fine-grained-pat"),
            f"remote: https://github.com\ntoken: {token}\n", token)
    for _ in range(2):
        token = "glpat-" + _pick(_ALNUM + "-_", 20)
        add("GitLab token", ("gitlab-pat", "gitlab-pat-routable"), f"GITLAB_TOKEN={token}\n", token)
    bot = f"xoxb-{_pick(string.digits, 12)}-{_pick(string.digits, 13)}-{_pick(_ALNUM, 24)}"
    user = f"xoxp-{_pick(string.digits, 12)}-{_pick(string.digits, 12)}-{_pick(string.digits, 13)}-{_pick(_HEX, 32)}"
    hook = f"https://hooks.slack.com/services/T{_pick(_UPPER, 8)}/B{_pick(_UPPER, 10)}/{_pick(_ALNUM, 24)}"
    add("Slack token", "slack-bot-token", f'slack:\n  bot_token: "{bot}"\n', bot)
    add("Slack token", "slack-user-token", f"SLACK_USER={user}\n", user)
    add("Slack token", "slack-webhook-url", f"notify: {hook}\n", hook.rsplit("/", 3)[1])
    for prefix in ("sk_live_", "rk_live_"):
        key = prefix + _pick(_ALNUM, 24)
        add("Stripe key", "stripe-access-token", f'stripe.api_key = "{key}"\n', key)
    for _ in range(2):
        key = f"sk-proj-{_pick(_ALNUM + '-_', 74)}T3BlbkFJ{_pick(_ALNUM + '-_', 74)}"
        add("OpenAI key", "openai-api-key", f"OPENAI_API_KEY={key}\n", key)
    for _ in range(2):
        key = f"sk-ant-api03-{_pick(_ALNUM + '-_', 93)}AA"
        add("Anthropic key", "anthropic-api-key", f'export ANTHROPIC_API_KEY="{key}"\n', key)
    for _ in range(2):
        token = "hf_" + _pick(string.ascii_letters, 34)
        add("HuggingFace token", "huggingface-access-token", f"huggingface-cli login --token {token}\n", token)
    for _ in range(2):
        token = "npm_" + _pick(_ALNUM, 36)
        add("npm token", "npm-access-token", f"//registry.npmjs.org/:_authToken={token}\n", token)
    for _ in range(2):
        token = "pypi-AgEIcHlwaS5vcmc" + _pick(_ALNUM + "-_", 70)
        add("PyPI token", "pypi-upload-token", f"[pypi]\n  username = __token__\n  password = {token}\n", token)
    for _ in range(2):
        key = "SK" + _pick(_HEX, 32)
        add("Twilio key", "twilio-api-key", f"twilio_key: {key}\n", key)
    for _ in range(2):
        key = f"SG.{_pick(_ALNUM + '-_', 22)}.{_pick(_ALNUM + '-_', 43)}"
        add("SendGrid key", "sendgrid-api-token", f"SENDGRID={key}\n", key)
    for _ in range(2):
        key = "AIza" + _pick(_ALNUM + "-_", 35)
        add("Google API key", "gcp-api-key", f'const config = {{ apiKey: "{key}" }};\n', key)
    for _ in range(2):
        token = _jwt()
        add("JWT", "jwt", f"Authorization: Bearer {token}\n", token)
    for url, password in (
        ("postgres://app:{p}@db.internal:5432/app", _pick(_ALNUM, 16)),
        ("mongodb+srv://admin:{p}@cluster0.abcde.mongodb.net/prod", _pick(_ALNUM, 20)),
        ("redis://:{p}@cache.internal:6379/0", _pick(_ALNUM, 24)),
        ("mysql://root:{p}@127.0.0.1:3306/shop", "Tr0ub4dor&3x!"),
    ):
        add("connection string with password", "connection-string-password",
            f"DATABASE_URL={url.format(p=password)}\n", password)
    client_secret = _pick(_ALNUM + "-_", 32)
    api_key = _pick(_ALNUM, 40)
    add("high-entropy secret assignment", ("generic-api-key",),
        json.dumps({"client_id": "my-app", "client_secret": client_secret}, indent=2), client_secret)
    add("high-entropy secret assignment", ("generic-api-key",), f"service:\n  api_key: {api_key}\n", api_key)
    for line, value in (("DB_PASSWORD=hunter2-horse-battery", "hunter2-horse-battery"),
                        ("SECRET_KEY='django-insecure-abc123-not-for-prod'", "django-insecure-abc123-not-for-prod"),
                        ("export SMTP_PASS=correct.horse.staple", "correct.horse.staple")):
        add(".env secret line", ("dotenv-secret", "generic-api-key"), f"# .env\nDEBUG=false\n{line}\n", value)
    return out


def _look_alikes() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for n in range(3):
        out.append(("UUID", f'{{"id": "{uuid.UUID(int=_rng.getrandbits(128), version=4)}", "n": {n}}}'))
    out.append(("UUID", f"request_id={uuid.UUID(int=_rng.getrandbits(128), version=4)}"))
    for n in range(3):
        out.append(("git hash", f"commit {hashlib.sha1(str(n).encode()).hexdigest()}\nAuthor: Dev <dev@example.com>\n"))
    out.append(("git hash", f"Merge: {hashlib.sha1(b'a').hexdigest()[:7]} {hashlib.sha1(b'b').hexdigest()[:7]}"))
    for n in range(3):
        digest = hashlib.sha256(str(n).encode()).hexdigest()
        out.append(("uv.lock hash", f'[[package]]\nname = "pkg{n}"\nversion = "1.{n}.0"\nsdist = {{ url = '
                    f'"https://files.pythonhosted.org/pkg{n}-1.{n}.0.tar.gz", hash = "sha256:{digest}" }}\n'))
    for n in range(3):
        integrity = base64.b64encode(hashlib.sha512(str(n).encode()).digest()).decode()
        out.append(("package-lock integrity",
                    f'"node_modules/pkg{n}": {{\n  "version": "2.0.{n}",\n  "resolved": '
                    f'"https://registry.npmjs.org/pkg{n}/-/pkg{n}-2.0.{n}.tgz",\n'
                    f'  "integrity": "sha512-{integrity}"\n}}'))
    out.append(("requirements hash", f"httpx==0.28.1 \\\n    --hash=sha256:{hashlib.sha256(b'h').hexdigest()}"))
    for size in (120, 600, 3000):
        out.append(("base64 image", f'<img src="data:image/png;base64,{_b64(size)}" alt="logo">'))
    image = {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{_b64(900)}"}}
    out.append(("base64 image", json.dumps(image)))
    out.append(("minified JS", "!function(e,t){\"object\"==typeof exports?module.exports=t():e.lib=t()}(this,function()"
                "{var n={key:function(e){return e.k},token:function(t){return t.split('.')}};return n});"))
    out.append(("minified JS", "var a=function(b){return b.apiKey||b.access_token_url},"
                "c={authEndpoint:\"/o/oauth2/auth\",tokenEndpoint:\"/o/oauth2/token\"};"))
    out.append(("public key", f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{_b64(32)[:43]} dev@laptop"))
    out.append(("public key", f"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{_b64(256)} ci@build"))
    out.append(("public key", _pem("PUBLIC KEY", 294)))
    out.append(("public key", _pem("CERTIFICATE", 800)))
    out.append(("AWS documented example", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"))
    out.append(("AWS documented example",
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"))
    out.append(("placeholder", "DATABASE_URL=postgres://user:password@localhost:5432/app"))
    out.append(("placeholder", "REDIS_URL=redis://:${REDIS_PASSWORD}@redis:6379/0"))
    out.append(("placeholder", "API_KEY=your-api-key-here\nDB_PASSWORD=changeme\nSECRET_KEY=${SECRET_KEY}"))
    out.append(("placeholder", 'OPENAI_API_KEY="<your key>"\nGITHUB_TOKEN=$GITHUB_TOKEN'))
    out.append(("code", "def get_token(self):\n    token = self.session.token_for(user)\n    return token\n"))
    out.append(("code", "api_key = os.environ[\"API_KEY\"]\npassword = getpass.getpass()\n"))
    out.append(("code", "MAX_TOKENS = 4096\nTOKEN_TYPE = \"bearer\"\nKEY_LENGTH = 32\n"))
    out.append(("code", "const { data: secrets } = await client.listSecrets({ project });\n"))
    out.append(("URL", "see https://docs.python.org/3/library/secrets.html#secrets.token_hex for more"))
    out.append(("URL", "git clone https://github.com/astral-sh/uv.git && cd uv"))
    out.append(("version strings", "Python 3.11.7 (main, Dec  4 2023) [GCC 12.2.0]\nuv 0.5.11\nnode v22.11.0"))
    out.append(("log line", "2026-12-06T10:00:00Z INFO request_id=4f1c2a key=user:42 status=200 duration_ms=12.5"))
    out.append(("docker digest", f"FROM python:3.11-slim@sha256:{hashlib.sha256(b'img').hexdigest()}"))
    return out


SECRETS = _secrets()
LOOK_ALIKES = _look_alikes()
