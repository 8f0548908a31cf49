"""The one rule for environment variable names, used everywhere a name is checked.

A name is the POSIX portable form `[A-Za-z_][A-Za-z0-9_]*`: a catalog entry
(config), a session's env (admission) and the workload's environment (the
local backend) all apply this same rule, so admission never accepts a name a
backend would refuse at start. The portable form is what every shell can
expand and every backend (a process environment, a Kubernetes container's
`env`) can carry.
"""

from __future__ import annotations

import re

# The rule as a JSON Schema `pattern` (the API description's env names).
ENV_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_env_name(name: str) -> bool:
    """True when `name` may name an environment variable."""
    return _ENV_NAME.fullmatch(name) is not None
