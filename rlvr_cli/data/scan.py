"""Secrets and personal data in task rows.

Secrets are found by `detect-secrets` (Yelp's scanner) with its pattern plugins — keys and
tokens of AWS, GitHub, GitLab, Slack, Stripe, OpenAI, private keys, JWTs, basic-auth URLs,
`password = "..."` assignments and more; its entropy plugins are left out (they flag
ordinary words). Personal data is found by built-in patterns (e-mail addresses, payment card
numbers that pass the Luhn check, US social security numbers, phone numbers written as
such) and the contract's own
`data.pii_patterns`. One cheap regular expression runs on every row first; only rows it
flags are handed to the scanner, which costs ~0.1 ms a line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

SECRET_PLUGINS = (
    "AWSKeyDetector",
    "ArtifactoryDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "CloudantDetector",
    "DiscordBotTokenDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "JwtTokenDetector",
    "KeywordDetector",
    "MailchimpDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "SoftlayerDetector",
    "SquareOAuthDetector",
    "StripeDetector",
    "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)

# Everything a plugin above can match contains a key word or a long unbroken token.
_KEYWORDS = ("pass", "pwd", "secret", "token", "auth", "api", "key", "credential", "contrase", "-----begin", "://")
_DIGITS = "0123456789"


def maybe_secret(text: str) -> bool:
    """Whether a secret plugin could match: a key word, or a token of 20+ characters. Plain
    substring tests and a split, so a clean row costs about a microsecond."""
    low = text.lower()
    if any(word in low for word in _KEYWORDS):
        return True
    return max(map(len, text.split()), default=0) >= 20


def maybe_pii(text: str) -> bool:
    """Whether a built-in PII pattern could match: an `@`, or nine digits or more (an SSN, a
    phone number, a card)."""
    return "@" in text or sum(map(text.count, _DIGITS)) >= 9


BUILTIN_PII = {
    "email": re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
    # one run of 13-19 digits, or groups of four with one separator throughout (4-4-4-4…, Amex
    # 4-6-5): never digits of separate tokens (two ISO dates, a list of readings) read as one
    "card_number": re.compile(
        r"(?<![\d-])(?:\d{13,19}|\d{4}(?P<s>[ -])\d{4}(?P=s)\d{4}(?P=s)\d{1,7}"
        r"|\d{4}(?P<a>[ -])\d{6}(?P=a)\d{5})(?![\d-])"
    ),
    "us_ssn": re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"),
    # nine digits without dashes only where the text says it is one
    "us_ssn_labelled": re.compile(
        r"(?i)(?:\bssn\b|social security(?: number| no\.?)?)\D{0,12}(?<!\d)(?P<value>(?!000|666|9\d\d)\d{9})(?!\d)"
    ),
    # an international number (+ and a country code) or a North American one written with separators
    "phone": re.compile(
        r"(?<![\w+])\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,3}(?![\w-])"
        r"|(?<![\w(-])\(\d{3}\) ?\d{3}-\d{4}(?![\w-])|(?<![\w-])\d{3}[.-]\d{3}[.-]\d{4}(?![\w-])"
    ),
}
# secrets detect-secrets' plugins miss: fine-grained GitHub tokens, an AWS secret after a space
EXTRA_SECRETS = {
    "GitHub fine-grained token": re.compile(r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b|\bgithub_pat_\w{40,}"),
    "AWS secret access key": re.compile(
        r"(?i)aws_secret_access_key\W{0,3}\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
    ),
}


def _in_url(text: str, at: int) -> bool:
    """Whether position `at` is inside a URL's authority (`scheme://...` with no space between)."""
    start = max(text.rfind(c, 0, at) for c in " \t\n\"'<(")
    return "://" in text[start + 1 : at]


def _luhn(text: str) -> bool:
    digits = [int(c) for c in text if c.isdigit()]
    total = 0
    for i, digit in enumerate(reversed(digits)):
        if i % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return 13 <= len(digits) <= 19 and total % 10 == 0


def _redact(text: str) -> str:
    """A finding names what was found without copying the secret into a report."""
    return text[:3] + "…" + f"({len(text)} chars)" if len(text) > 6 else "…"


class Scanner(AbstractContextManager["Scanner"]):
    """`with Scanner(patterns) as scan: scan.row(strings)` → [(kind, name, redacted)]."""

    def __init__(self, patterns: dict[str, str] | None) -> None:
        self.pii = dict(BUILTIN_PII)
        self.custom = {name: re.compile(p) for name, p in (patterns or {}).items()}
        self.pii.update(self.custom)
        self._settings: Any = None

    def __enter__(self) -> Scanner:
        from detect_secrets.settings import transient_settings

        self._settings = transient_settings({"plugins_used": [{"name": n} for n in SECRET_PLUGINS]})
        self._settings.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._settings.__exit__(*exc)

    def row(self, texts: list[str]) -> list[tuple[str, str, str]]:
        """Every secret and personal datum in the strings of one row. The row's text is
        searched once for anything that could be one; most rows stop there."""
        text = "\n".join(texts)
        found = list(self._pii(text, self.pii if maybe_pii(text) else self.custom))
        if maybe_secret(text):
            found.extend(self._secrets(texts))
        return found

    def _pii(self, text: str, patterns: dict[str, re.Pattern[str]]) -> Iterator[tuple[str, str, str]]:
        for name, pattern in patterns.items():
            for match in pattern.finditer(text):
                if name == "card_number" and not _luhn(match.group(0)):
                    continue
                if name == "email" and _in_url(text, match.start()):
                    continue  # `https://user:password@host`: a credential (a secret), not an address
                found = match.group("value") if "value" in pattern.groupindex else match.group(0)
                yield "pii", "us_ssn" if name == "us_ssn_labelled" else name, _redact(found)

    def _secrets(self, texts: list[str]) -> Iterator[tuple[str, str, str]]:
        from detect_secrets.core.scan import scan_line

        for text in texts:
            for name, pattern in EXTRA_SECRETS.items():
                for match in pattern.finditer(text):
                    yield "secret", name, _redact(match.group(match.lastindex or 0))

        for text in texts:
            for line in text.splitlines():
                if maybe_secret(line):
                    for secret in scan_line(line):
                        yield "secret", secret.type, _redact(secret.secret_value or "")
