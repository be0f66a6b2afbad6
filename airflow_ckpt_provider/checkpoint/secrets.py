"""Recognise and redact secrets in Spark conf, command lines and free text (pure, stdlib only).

Everything the provider records or shows - task logs, XCom (launch handles), archive manifests,
``ckpt`` output, reports - passes Spark conf and commands through these functions first.

Locations (checkpoint, archive, journal URIs) go through :func:`redact_location`, the one function
that masks the user-info of every URL in a text (``s3a://KEY:SECRET@bucket/x`` -> ``s3a://***@bucket/x``)
before it reaches an error line, the command line's output or a log; :func:`location_credentials`
tells whether a location carries credentials at all, so that the provider refuses it before
anything is read or written (:func:`airflow_ckpt_provider.checkpoint.locations.refuse_credentials`).

A key is sensitive when, lower-cased, it contains one of :data:`SENSITIVE_WORDS` (Airflow's
default sensitive field names plus ``jaas``, ``credential``, ``signature``), or when one of its
``.``/``_``/``-`` separated words ends in ``key`` (``fs.s3a.access.key``, ``secretKey``,
``fs.azure.account.key.<account>``). ``keyStore``/``keytab`` paths are not secrets; their
passwords are (``keyStorePassword``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "***"

SENSITIVE_WORDS: tuple[str, ...] = (
    # Airflow's DEFAULT_SENSITIVE_FIELDS (airflow.sdk._shared.secrets_masker)
    "access_token", "api_key", "apikey", "auth_header", "authorization", "bearer", "connection_string",
    "dsn", "keyfile_dict", "passphrase", "passwd", "password", "private_key", "proxies", "proxy",
    "secret", "service_account", "service_key", "token", "webhook_url",
    # and what Spark, Kafka and Hadoop call secrets
    "jaas", "credential", "signature", "privatekey",
)
_WORDS = re.compile(r"[._\-\s]+")
# key=value / key: value / "key": "value" inside free text (JAAS configs, JVM options, log lines)
_PAIR = re.compile(
    r"""(?P<key>[A-Za-z][A-Za-z0-9_.\-]*)(?P<quote>["']?)(?P<sep>\s*[=:]\s*)"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s,;&"'}\]]+)"""
)
_URL_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<secret>[^/\s@]+)(?P<at>@)")
_SCHEME = re.compile(r"(?i)(?P<head>\b(?:bearer|basic|token)\s+)(?P<secret>[^\s,;\"']+)")


#: schemes whose user part alone is a credential (the access key id of ``s3a://KEY@bucket``)
_KEY_AS_USER = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "oss"})
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_SPACE = re.compile(r"\s")


def _userinfos(text: str) -> list[tuple[str, int, int]]:
    """(scheme, start, end) of the user-info of every URL in ``text`` (``end`` at its ``@``), in one
    pass: user-info is what lies between ``scheme://`` and the first ``@`` before any whitespace,
    when it holds no ``/`` or holds a ``:`` before its first ``/`` (a password may hold ``/``, as
    AWS secret keys do; an unencoded ``@`` in a password cannot be told apart from the host)."""
    found: list[tuple[str, int, int]] = []
    next_at = next_space = -1
    position = text.find("://")
    while position != -1:
        begin = position
        while begin > 0 and text[begin - 1] in _SCHEME_CHARS:
            begin -= 1
        start = position + 3
        if next_at < start:  # both searches only move forward: linear over the whole text
            next_at = text.find("@", start)
            if next_at == -1:
                break
        if next_space < start:
            match = _SPACE.search(text, start)
            next_space = match.start() if match else len(text)
        if begin < position and text[begin].isalpha() and next_at < next_space:
            info = text[start:next_at]
            slash = info.find("/")
            if slash == -1 or 0 <= info.find(":") < slash:
                found.append((text[begin:position].lower(), start, next_at))
                position = text.find("://", next_at)
                continue
        position = text.find("://", start)
    return found


def redact_location(text: str) -> str:
    """``text`` (a location, or any text that holds locations) with the user-info of every URL
    masked whole: ``s3a://KEY:SECRET@bucket/cp`` -> ``s3a://***@bucket/cp``,
    ``hdfs://user:secret@nn:8020/cp`` -> ``hdfs://***@nn:8020/cp``. Idempotent, and linear in the
    length of ``text`` (error lines quote hostile input)."""
    parts: list[str] = []
    last = 0
    for _, start, end in _userinfos(text):
        parts += [text[last:start], REDACTED]
        last = end
    return "".join(parts) + text[last:] if parts else text


def location_credentials(uri: str) -> bool:
    """Whether the location ``uri`` carries credentials in its user-info: a password
    (``scheme://user:secret@``) for any scheme, or any user part for object stores (an access key).
    ``hdfs://alice@nn/`` (a user name alone) is not a credential."""
    uri = uri.strip()
    found = _userinfos(uri)
    if not found or found[0][1] != uri.find("://") + 3:
        return False
    scheme, start, end = found[0]
    info = uri[start:end]
    return info != REDACTED and (":" in info or scheme in _KEY_AS_USER)


def is_sensitive_key(key: str) -> bool:
    """Whether values under ``key`` are secrets (see the module doc)."""
    name = key.strip().lower()
    if any(word in name for word in SENSITIVE_WORDS):
        return True
    return any(word.endswith("key") for word in _WORDS.split(name) if word)


def _mask_pair(match: re.Match[str]) -> str:
    if not is_sensitive_key(match["key"]) or _SCHEME.match(match.string, match.start("value")):
        return match[0]  # "Authorization: Bearer x": the scheme stays, the credential goes below
    value = match["value"]
    masked = value[0] + REDACTED + value[0] if value[:1] in ("'", '"') else REDACTED
    return f"{match['key']}{match['quote']}{match['sep']}{masked}"


def redact_text(text: str) -> str:
    """``text`` with secret values masked: ``password="x"`` and ``fs.s3a.secret.key=x`` pairs,
    ``scheme://user:password@`` URLs and ``Bearer x`` / ``Basic x`` credentials."""
    text = _PAIR.sub(_mask_pair, text)
    text = _URL_USERINFO.sub(lambda m: m["head"] + REDACTED + m["at"], text)
    return _SCHEME.sub(lambda m: m["head"] + REDACTED, text)


def find_secrets(text: str) -> list[str]:
    """The secret values :func:`redact_text` would mask in ``text`` (quotes stripped), so that a
    secrets masker can be told about them."""
    found = [m["value"].strip("'\"") for m in _PAIR.finditer(text)
             if is_sensitive_key(m["key"]) and not _SCHEME.match(text, m.start("value"))]
    found += [m["secret"] for m in _URL_USERINFO.finditer(text)] + [m["secret"] for m in _SCHEME.finditer(text)]
    return [value for value in found if value]


def redact_conf(conf: Mapping[str, object]) -> dict[str, str]:
    """A copy of a Spark/Kafka conf with secret values replaced by :data:`REDACTED`: every value
    of a sensitive key, and secrets embedded in other values (``extraJavaOptions=-D...Password=x``)."""
    return {str(k): REDACTED if is_sensitive_key(str(k)) else redact_text(str(v)) for k, v in conf.items()}


def redact_command(argv: Sequence[str]) -> list[str]:
    """A copy of a command line (argument list) safe to log or record: ``--conf k=v`` values of
    sensitive keys, values after sensitive flags (``--password x``, ``--token=x``) and secrets in
    other arguments are masked. The command that runs is never changed, only this record of it."""
    result: list[str] = []
    mask_next = False
    conf_next = False
    for arg in map(str, argv):
        if mask_next:
            result.append(REDACTED)
            mask_next = False
            continue
        if conf_next:
            result.append(_redact_conf_arg(arg))
            conf_next = False
            continue
        if arg in ("--conf", "-c"):
            conf_next = True
            result.append(arg)
        elif arg.startswith("--conf="):
            result.append("--conf=" + _redact_conf_arg(arg[len("--conf="):]))
        elif arg.startswith("-") and not arg.startswith("--conf"):
            flag, sep, value = arg.partition("=")
            if is_sensitive_key(flag.lstrip("-")):
                if sep:
                    result.append(f"{flag}={REDACTED}")
                else:
                    result.append(arg)
                    mask_next = True
            else:
                result.append(redact_text(arg))
        else:
            result.append(redact_text(arg))
    return result


def _redact_conf_arg(pair: str) -> str:
    key, sep, value = pair.partition("=")
    if not sep:
        return redact_text(pair)
    return f"{key}={REDACTED}" if is_sensitive_key(key) else f"{key}={redact_text(value)}"
