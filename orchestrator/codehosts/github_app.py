"""GitHub App credentials (GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY_FILE), instead of a personal CODEHOST_TOKEN.

The app signs a JSON Web Token with its private key (RS256, PyJWT: `iss` the app id, `iat` a minute back for clock
drift, `exp` nine minutes on; GitHub accepts at most ten), finds the installation that covers a repository
(`GET /repos/{owner}/{repo}/installation`) and exchanges the token for that installation's access token
(`POST /app/installations/{id}/access_tokens`), which is what the API calls and private clones then use. Both are
kept until REFRESH_MARGIN before the installation token expires (an hour), so a busy service asks GitHub about
once an hour per installation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import jwt

from orchestrator.plugin_api.api_client import ApiClient, CodeHostError

JWT_LIFETIME = 540  # seconds; GitHub refuses more than 600
CLOCK_DRIFT = 60  # `iat` this far back, as GitHub recommends
REFRESH_MARGIN = 300  # an installation token is replaced this long before it expires


@dataclass(frozen=True)
class InstallationToken:
    token: str
    expires_at: float  # epoch seconds


class AppTokens:
    def __init__(self, app_id: int, private_key: bytes, api: ApiClient,
                 clock: Callable[[], float] = time.time) -> None:
        self.app_id = app_id
        self._key = private_key
        self._api = api
        self._clock = clock
        self._lock = threading.Lock()
        self._installations: dict[str, int] = {}  # owner/repo (lower case) -> installation id
        self._tokens: dict[int, InstallationToken] = {}
        self._replaced: list[InstallationToken] = []  # still valid until they expire: still masked

    def app_jwt(self) -> str:
        now = int(self._clock())
        return jwt.encode({"iat": now - CLOCK_DRIFT, "exp": now + JWT_LIFETIME, "iss": str(self.app_id)},
                          self._key, algorithm="RS256")

    def token_for(self, owner: str, repo: str) -> str:
        """The access token of the installation that covers `owner/repo` (CodeHostError when the app is not
        installed there, or GitHub refuses)."""
        with self._lock:
            installation = self._installation(owner, repo)
            cached = self._tokens.get(installation)
            if cached is not None and cached.expires_at - REFRESH_MARGIN > self._clock():
                return cached.token
            response = self._api.request("app_token", "POST", f"/app/installations/{installation}/access_tokens",
                                         headers=self._as_app())
            data = self._api.check(response).json()
            expires = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00")).timestamp()
            if cached is not None:
                self._replaced.append(cached)
            self._tokens[installation] = InstallationToken(str(data["token"]), expires)
            return str(data["token"])

    def remember(self, owner: str, repo: str, installation: object) -> None:
        """The installation a verified delivery of `owner/repo` names (its `installation.id`): the token is asked
        for it, without looking the installation up."""
        if isinstance(installation, int) and not isinstance(installation, bool) and installation > 0:
            with self._lock:
                self._installations[f"{owner}/{repo}".lower()] = installation

    def _installation(self, owner: str, repo: str) -> int:
        key = f"{owner}/{repo}".lower()
        if key not in self._installations:
            response = self._api.request("app_installation", "GET", f"/repos/{owner}/{repo}/installation",
                                         headers=self._as_app())
            if response.status_code == 404:
                raise CodeHostError(f"the GitHub App {self.app_id} is not installed on {owner}/{repo}")
            self._installations[key] = int(self._api.check(response).json()["id"])
        return self._installations[key]

    def _as_app(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.app_jwt()}"}

    def tokens(self) -> list[str]:
        """The installation tokens held now, and the ones replaced that GitHub still accepts: masked in logs like
        the other secrets."""
        with self._lock:
            now = self._clock()
            self._replaced = [token for token in self._replaced if token.expires_at > now]
            return [token.token for token in (*self._tokens.values(), *self._replaced)]
