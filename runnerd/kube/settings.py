"""`KubeSettings`: what the Kubernetes backend is configured with. Pure data.

Defined beside the other config dataclasses (`runnerd.config.model`), since the
config layer parses the `[kubernetes]` section into it and may not import this
package; re-exported here so the backend's parts name it where they live. The
field names follow the operator-facing keys (`start_deadline_seconds` becomes
`start_deadline_s`, as durations are named `*_s` in code). Every default is
justified where it is set.
"""

from runnerd.config.model import KubeSettings

__all__ = ["KubeSettings"]
