"""The Kubernetes backend's parts below the backend seam (sessions as pods).

Pure: `settings`, `errors`, `podstatus`, `podspec`, `bundle`, `kubeconfig`.
IO at the edge: `client` (httpx), `informer` (the one shared pod watch),
`attach` (the PTY bridge over trio-websocket). No httpx name escapes this
package: every apiserver answer that is not 2xx becomes a `errors.KubeError`.
"""
