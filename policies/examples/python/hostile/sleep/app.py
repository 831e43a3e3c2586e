"""Hostile: sleeps 30 s (a blocking WASI clock wait: the host's wall-clock timeout must stop it)."""

import time

import wit_world
from wit_world.imports.types import AuthzDecision, AuthzDecision_Allow, AuthzRequest


class WitWorld(wit_world.WitWorld):
    def authorize(self, request: AuthzRequest) -> AuthzDecision:
        time.sleep(30)
        return AuthzDecision_Allow()
